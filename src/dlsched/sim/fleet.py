"""Ensemble jobs in simulation: FLEET vs independent training vs homogeneous data sharing.

An ensemble is N members, each needing ``work`` samples to converge. A *planner* turns the still-training members
into running groups (each group shares one producer and advances at one rate); the simulator advances a virtual
clock to the next convergence, drops the converged member and asks the planner again -- the re-formation rule of
algorithms.md §3.3 ("stop when any member converges, resume the others from checkpoints"). A member whose GPU count
or group changed (other than by departures) pays ``restart_s`` of checkpoint reload before it progresses.

The member-level dynamics (members of a flotilla share one rate) live here because the shared driver
(``sim/engine.py``) advances jobs independently. ``sim.ensemble_job.ensemble_job_specs`` turns an ensemble into that driver's jobs --
one ensemble job whose share the policy decides (``sim/ensemble_job.py``), or one job per member trained
separately -- so ensembles can be compared with independent jobs under any registered policy (``sim.engine.run``).
"""
from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Mapping, Sequence

import numpy as np
import pandas as pd

from dlsched.errors import UserError, plain
from dlsched.policy.base import ClusterView
from dlsched.policy.fleet import SEED_EPS, Flotilla, ModelProfile, Preprocessing, flotilla_rate, plan_fleet, producer_core_pool

# Parameter counts of the CIFAR/ImageNet variants in /work/shared/data/h100/throughput.csv (standard definitions:
# He et al. 2016 CIFAR ResNets, torchvision ResNet-18/50, CIFAR VGG-16 and MobileNetV2 heads).
PARAMS = {
    "resnet20": 0.27e6, "resnet32": 0.46e6, "resnet44": 0.66e6, "resnet56": 0.85e6, "resnet18": 11.2e6,
    "vgg16": 14.7e6, "mobilenet_v2": 2.24e6, "resnet50": 25.6e6,
}


@dataclass(frozen=True)
class AllReduce:
    """Ring all-reduce of fp32 gradients inside one node: 2(g-1)/g * bytes / bandwidth + a latency per step."""

    bandwidth_bytes_per_s: float = 100e9   # conservative effective NVLink bus bandwidth on an H100 node
    latency_s: float = 30e-6

    def seconds(self, params: float, gpus: int) -> float:
        if gpus <= 1:
            return 0.0
        return 2 * (gpus - 1) / gpus * 4 * params / self.bandwidth_bytes_per_s + self.latency_s * (gpus - 1)


def h100_profiles(path: Path, max_gpus: int = 4, dataset: str = "cifar10", comm: AllReduce = AllReduce()) -> dict[str, ModelProfile]:
    """r_d(g) for every (model, batch, precision) of the H100 table (weak scaling, one shared batch per GPU per step).

    r_d(g) = g * b / (t_d(b) + allreduce(g)), with t_d(b) the measured median step time on one GPU. Key:
    ``model/b<batch>/<precision>``."""
    df = pd.read_csv(path)
    need = {"model", "dataset", "batch_size", "precision", "step_ms_median"}
    if missing := need - set(df.columns):
        raise UserError(f"{path}: missing column(s) {', '.join(sorted(missing))}")
    out: dict[str, ModelProfile] = {}
    for i, row in df[df["dataset"] == dataset].iterrows():
        step = float(row["step_ms_median"]) / 1e3
        if not step > 0:
            raise UserError(f"{path}: row {i + 2}: step_ms_median must be > 0, got {plain(row['step_ms_median'])!r}")
        if row["model"] not in PARAMS:
            continue
        b = int(row["batch_size"])
        key = f"{row['model']}/b{b}/{row['precision']}"
        rates = tuple(g * b / (step + comm.seconds(PARAMS[row["model"]], g)) for g in range(1, max_gpus + 1))
        out[key] = ModelProfile(key, rates)
    return out


@dataclass(frozen=True)
class Member:
    profile: ModelProfile
    work: float   # samples to convergence (epochs * dataset size)

    @property
    def name(self) -> str:
        return self.profile.name


@dataclass(frozen=True)
class Group:
    """One running group: members -> GPUs, the rate all of them advance at, and (FLEET) its flotilla."""

    gpus: Mapping[str, int]
    rate: float
    flotilla: Flotilla | None = None


Planner = Callable[[Sequence[Member], ClusterView, Preprocessing, Sequence[Group]], list[Group]]


def fleet_planner(eps: float = SEED_EPS, anchor: str = "fastest", reform: str = "incremental", rebalance_idle: float = 0.5) -> Planner:
    """FLEET as a planner. ``reform="event"`` re-plans every member at every convergence (§3.3 literally);
    ``"incremental"`` keeps surviving flotillas where they run and plans only the freed GPUs, unless more than
    ``rebalance_idle`` of the cluster's GPUs would stay idle -- then it re-plans everything (the slow tail)."""
    if reform not in ("event", "incremental"):
        raise ValueError(f"reform must be 'event' or 'incremental', got {reform!r}")

    def plan(members: Sequence[Member], cluster: ClusterView, pre: Preprocessing, previous: Sequence[Group]) -> list[Group]:
        args = ([m.profile for m in members], {n.name: n.num_gpus for n in cluster.nodes}, producer_core_pool(cluster), pre, eps, anchor)
        keep = [g.flotilla for g in previous if g.flotilla is not None] if reform == "incremental" else []
        p = plan_fleet(*args, keep=keep)
        if keep and sum(g for f in p.flotillas for g in f.gpus.values()) < (1 - rebalance_idle) * cluster.total_gpus:
            p = plan_fleet(*args)
        return [Group(dict(f.gpus), f.rate, f) for f in p.flotillas]
    return plan


def independent_planner(members: Sequence[Member], cluster: ClusterView, pre: Preprocessing, previous: Sequence[Group] = ()) -> list[Group]:
    """Default training: each member alone on one GPU with its own pipeline on its GPU's share of the node's cores."""
    slots = [(n.num_cpus - n.num_gpus) // n.num_gpus for n in cluster.nodes for _ in range(n.num_gpus)]
    return [Group({m.name: 1}, min(m.profile.rate(1), pre.rate(c))) for m, c in zip(members, slots)]


def homogeneous_planner(members: Sequence[Member], cluster: ClusterView, pre: Preprocessing, previous: Sequence[Group] = ()) -> list[Group]:
    """SC'18-style homogeneous data sharing: one group, one GPU per member, in submission order."""
    run = list(members[: cluster.total_gpus])
    if not run:
        return []
    gpus = {m.name: 1 for m in run}
    profiles = {m.name: m.profile for m in run}
    cores = min(pre.cores_for(min(m.profile.rate(1) for m in run)), producer_core_pool(cluster))
    return [Group(gpus, flotilla_rate(profiles, gpus, cores, pre))]


@dataclass(frozen=True)
class Segment:
    """Between two convergence events: [start, end) and the groups that ran."""

    start: float
    end: float
    groups: tuple[Group, ...]


@dataclass(frozen=True)
class EnsembleResult:
    makespan: float
    finish: Mapping[str, float]
    timeline: tuple[Segment, ...]


class EnsembleProgress:
    """The members' progress inside whatever share of GPUs the ensemble holds, advanced over virtual time.

    Re-plans the still-training members at every convergence and whenever the share changes (a member whose GPU
    count or group changed, other than by departures, pays ``restart_s`` first; an unmoved member keeps what is
    left of its own restart). Used alone (``simulate_ensemble``: a fixed cluster) and by the shared simulator's
    ensemble jobs (``sim/ensemble_job.py``: the share is whatever the policy grants each decision)."""

    def __init__(self, members: Sequence[Member], planner: Planner, pre: Preprocessing = Preprocessing(),
                 restart_s: float = 0.0):
        self.members = {m.name: m for m in members}
        self.planner, self.pre, self.restart_s = planner, pre, restart_s
        self.done = {m.name: 0.0 for m in members}
        self.finish: dict[str, float] = {}
        self.timeline: list[Segment] = []
        self.groups: list[Group] = []
        self._share: ClusterView | None = None
        self._placed: dict[str, tuple[int, frozenset[str]]] = {}   # member -> (GPUs, group) of the current plan
        self._delay: dict[str, float] = {}                          # member -> restart seconds still to pay

    @property
    def remaining(self) -> list[Member]:
        return [m for m in self.members.values() if m.name not in self.finish]

    def work_left(self) -> float:
        return sum(m.work - self.done[m.name] for m in self.remaining)

    def _speeds(self) -> dict[str, float]:
        return {d: grp.rate for grp in self.groups for d in grp.gpus}

    def next_departure(self, share: ClusterView) -> float:
        """Seconds until the next member converges on ``share`` (inf when none trains there)."""
        if share != self._share:
            self._replan(share)
        speed = self._speeds()
        return min((self._delay[d] + (self.members[d].work - self.done[d]) / speed[d] for d in speed), default=math.inf)

    def advance(self, t: float, seconds: float, share: ClusterView) -> float | None:
        """Train on ``share`` over [t, t + seconds) (``math.inf``: to the end); the time the last member converged,
        or None while some still train."""
        end = t + seconds
        if share != self._share:
            self._replan(share)
        while self.remaining and t < end:
            speed = self._speeds()
            if not speed:
                if share.total_gpus and seconds == math.inf:
                    raise RuntimeError(f"planner left {len(self.remaining)} member(s) with nothing to run")
                break
            dt = min(self._delay[d] + (self.members[d].work - self.done[d]) / speed[d] for d in speed)
            step = min(dt, end - t)
            for d in speed:
                self.done[d] += speed[d] * max(0.0, step - self._delay[d])
                self._delay[d] = max(0.0, self._delay[d] - step)
            self.timeline.append(Segment(t, t + step, tuple(self.groups)))
            t += step
            converged = [d for d in speed if self.done[d] >= self.members[d].work * (1 - 1e-9)]
            for d in converged:
                self.finish[d] = t
            if converged:
                self._replan(share)
        return None if self.remaining else max(self.finish.values(), default=t)

    def _replan(self, share: ClusterView) -> None:
        remaining = self.remaining
        if not remaining or not share.total_gpus:
            self.groups, self._placed, self._share = [], {}, share   # preempted: every member restarts later
            return
        free = {n.name: n.num_gpus for n in share.nodes}
        kept = []   # running flotillas stay where they run while the share still holds their GPUs
        for grp in self.groups:
            spreads = list(grp.flotilla.nodes.values()) if grp.flotilla is not None else []
            need = {n: sum(s.get(n, 0) for s in spreads) for s in spreads for n in s}
            if spreads and all(free.get(n, 0) >= k for n, k in need.items()):
                kept.append(grp)
                for n, k in need.items():
                    free[n] -= k
        self.groups = self.planner(remaining, share, self.pre, kept)
        self._share = share
        placed = {d: (g, frozenset(grp.gpus)) for grp in self.groups for d, g in grp.gpus.items()}
        for d, (g, group) in placed.items():
            old = self._placed.get(d)
            moved = old is None or old[0] != g or not group <= old[1]
            self._delay[d] = self.restart_s if moved else self._delay.get(d, 0.0)
        self._placed = placed


def simulate_ensemble(members: Sequence[Member], cluster: ClusterView, planner: Planner,
                      pre: Preprocessing = Preprocessing(), restart_s: float = 0.0) -> EnsembleResult:
    """Virtual clock from one convergence to the next on a fixed cluster; re-plans the remaining members at each event."""
    progress = EnsembleProgress(members, planner, pre, restart_s)
    end = progress.advance(0.0, math.inf, cluster)
    return EnsembleResult(end or 0.0, dict(progress.finish), tuple(progress.timeline))


# ---------------------------------------------------------------- exhaustive optimum (small instances only)

def _configurations(members: Sequence[Member], cluster: ClusterView, pre: Preprocessing) -> list[list[Group]]:
    """Every way to run a non-empty subset as disjoint groups within the cluster's GPUs (members may span nodes,
    as the greedy's may)."""
    caps = [n.num_gpus for n in cluster.nodes]
    pool = producer_core_pool(cluster)
    profiles = {x.name: x.profile for x in members}
    configs = []
    choices = [[None] + [(g,) for g in range(1, min(sum(caps), x.profile.max_gpus) + 1)] for x in members]
    for pick in itertools.product(*choices):
        running = [(x.name, c[0]) for x, c in zip(members, pick) if c is not None]
        if not running or sum(g for _, g in running) > sum(caps):
            continue
        for labels in _set_partitions(len(running)):
            groups, left = [], pool
            for lab in range(max(labels) + 1):
                gpus = {d: g for (d, g), l in zip(running, labels) if l == lab}
                cores = min(pre.cores_for(min(profiles[d].rate(g) for d, g in gpus.items())), left)
                left -= cores
                if cores <= 0:
                    break
                groups.append(Group(gpus, flotilla_rate(profiles, gpus, cores, pre)))
            else:
                configs.append(groups)
    return configs


def _set_partitions(n: int):
    """Restricted-growth strings: each set partition of range(n) exactly once."""
    def rec(prefix: list[int], top: int):
        if len(prefix) == n:
            yield tuple(prefix)
            return
        for lab in range(top + 2):
            yield from rec(prefix + [lab], max(top, lab))
    yield from rec([], -1)


def exhaustive_makespan(members: Sequence[Member], cluster: ClusterView, pre: Preprocessing = Preprocessing()) -> float:
    """Optimal ensemble makespan when decisions are taken at convergence events (no restart cost).

    Depth-first over every configuration at every event, branch-and-bound on the best makespan found.
    Exponential: meant for <= 4 members on a node or two."""
    best = math.inf

    def rec(state: tuple[tuple[Member, float], ...], t: float) -> None:
        nonlocal best
        if not state:
            best = min(best, t)
            return
        left = [mem for mem, _ in state]
        # Lower bound: every member on its fastest configuration from now on.
        lb = t + max((mem.work - done) / max(mem.profile.rates[: cluster.total_gpus]) for mem, done in state)
        if lb >= best:
            return
        done = dict((mem.name, d) for mem, d in state)
        for groups in _configurations(left, cluster, pre):
            speed = {d: grp.rate for grp in groups for d in grp.gpus}
            dt = min((next(x for x in left if x.name == d).work - done[d]) / s for d, s in speed.items())
            nxt = []
            for mem in left:
                dd = done[mem.name] + speed.get(mem.name, 0.0) * dt
                if dd < mem.work * (1 - 1e-9):
                    nxt.append((mem, dd))
            rec(tuple(nxt), t + dt)

    rec(tuple((m, 0.0) for m in members), 0.0)
    return best


def seeded_ensemble(profiles: Mapping[str, ModelProfile], n: int, seed: int = 0, dataset_size: int = 50_000,
                    epochs: tuple[int, int] = (30, 150)) -> list[Member]:
    """A reproducible heterogeneous ensemble: n profiles drawn with replacement, epochs-to-converge uniform in range."""
    rng = np.random.default_rng(seed)
    keys = sorted(profiles)
    return [
        Member(ModelProfile(f"m{i:03d}:{k}", profiles[k].rates), float(rng.integers(epochs[0], epochs[1] + 1) * dataset_size))
        for i, k in enumerate(rng.choice(keys, size=n, replace=True))
    ]
