"""FLEET (Guan et al., MLSys 2020): flotillas of ensemble members that share one preprocessing pipeline.

A flotilla's members all consume the same preprocessed batches, so it advances at
``R(F) = min(P(c_F), min_d r_d(g_d))``. The greedy (algorithms.md §3.3, a reconstruction) is:

1. *flotilla creation* -- a target rate is chosen (see ``create_flotilla``: §3.3 anchors it at the fastest
   single-GPU member); every waiting model gets the
   fewest GPUs (g <= m, one node) reaching ``(1 - eps) * target``; models are packed cheapest-first until the
   GPUs run out. Models that cannot reach the target within m GPUs wait for a later, slower flotilla.
2. *node-local GPU assignment* -- first-fit-decreasing bin packing of the members' GPU counts into nodes, so a
   multi-GPU member never spans nodes and small ones share a node. A member FFD cannot place waits.
3. *preprocessing cores* -- ``c* = min{c : P(c) >= min_d r_d(g_d)}``; more cores cannot raise R(F).

Documented choices beyond §3.3 (tested in tests/policy/test_fleet.py):
* leftover GPUs are not idle: further flotillas are formed from the still-waiting models, each with its own
  anchor, until GPUs, preprocessing cores or models run out; when nobody waits, the GPUs still free go one at a
  time to a flotilla's slowest member (on its node) while that raises R(F);
* preprocessing cores are a cluster-wide pool (batches are broadcast, as in the SC'18 pipelines), one core per
  GPU in use is reserved for its trainer; a flotilla that gets fewer than c* cores runs at P(c);
* data parallelism is weak scaling: each GPU of a member takes one shared batch of the member's own size per step
  (profiles come from ``dlsched.sim.fleet.h100_profiles`` or real short runs in ``dlsched.train.flotilla``).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping, Sequence

from dlsched.policy.base import Allocation, ClusterView, JobAllocation, JobView, Policy, register

# /work/shared/data/h100/preprocess_cpu.csv: cifar_crop_flip_norm, images/s on one core.
CIFAR_IMAGES_PER_S_PER_CORE = 3519.5


@dataclass(frozen=True)
class ModelProfile:
    """Profiled training rate of one ensemble member: ``rates[g-1]`` = samples/s on g GPUs of one node."""

    name: str
    rates: tuple[float, ...]

    def __post_init__(self) -> None:
        if not self.rates or any(r <= 0 for r in self.rates):
            raise ValueError(f"model {self.name!r}: rates must be positive, got {self.rates}")

    @property
    def max_gpus(self) -> int:
        return len(self.rates)

    def rate(self, gpus: int) -> float:
        return self.rates[gpus - 1]


@dataclass(frozen=True)
class Preprocessing:
    """Shared-pipeline rate P(c) = c * per-core rate: samples are independent, so cores scale linearly."""

    images_per_s_per_core: float = CIFAR_IMAGES_PER_S_PER_CORE

    def rate(self, cores: int) -> float:
        return cores * self.images_per_s_per_core

    def cores_for(self, rate: float) -> int:
        """c* = the fewest cores whose rate meets ``rate``."""
        return max(1, math.ceil(rate / self.images_per_s_per_core - 1e-9))


@dataclass(frozen=True)
class Flotilla:
    """Members sharing one producer: ``gpus`` name -> GPU count, ``nodes`` name -> node, ``cores`` for the producer."""

    gpus: Mapping[str, int]
    nodes: Mapping[str, str]
    cores: int
    rate: float

    @property
    def members(self) -> tuple[str, ...]:
        return tuple(self.gpus)


@dataclass(frozen=True)
class FleetPlan:
    flotillas: tuple[Flotilla, ...]
    waiting: tuple[str, ...]

    def flotilla_of(self, name: str) -> Flotilla | None:
        return next((f for f in self.flotillas if name in f.gpus), None)


def flotilla_rate(profiles: Mapping[str, ModelProfile], gpus: Mapping[str, int], cores: int, pre: Preprocessing) -> float:
    """R(F) = min(P(c), min_d r_d(g_d))."""
    return min(pre.rate(cores), min(profiles[d].rate(g) for d, g in gpus.items()))


def _pack_at(profiles: Sequence[ModelProfile], target: float, free_gpus: int, eps: float) -> dict[str, int]:
    """Fewest GPUs per model reaching ``(1 - eps) * target``; cheapest members first until the GPUs run out."""
    need: dict[str, tuple[int, float]] = {}
    for p in profiles:
        g = next((g for g in range(1, p.max_gpus + 1) if p.rate(g) >= (1 - eps) * target), None)
        if g is not None:
            need[p.name] = (g, p.rate(g))
    chosen: dict[str, int] = {}
    for d in sorted(need, key=lambda d: (need[d][0], -need[d][1], d)):
        if need[d][0] <= free_gpus:
            chosen[d] = need[d][0]
            free_gpus -= need[d][0]
    return chosen


def create_flotilla(profiles: Sequence[ModelProfile], free_gpus: int, eps: float = 0.05, anchor: str = "best") -> dict[str, int]:
    """Step 1: members and GPU counts of one flotilla.

    ``anchor="fastest"`` is §3.3 literally: the target is the fastest single-GPU rate. ``anchor="best"`` (default)
    also tries every profiled rate r_d(g) as the target and keeps the one maximising the flotilla's aggregate
    rate |F| * target (ties: the higher target). It differs when GPUs are plentiful -- e.g. the slow tail of an
    ensemble, where the literal rule runs every member on one GPU and leaves the rest of the cluster idle."""
    if not profiles or free_gpus <= 0:
        return {}
    fastest = max(p.rate(1) for p in profiles)
    if anchor == "fastest":
        return _pack_at(profiles, fastest, free_gpus, eps)
    if anchor != "best":
        raise ValueError(f"anchor must be 'fastest' or 'best', got {anchor!r}")
    targets = sorted({r for p in profiles for r in p.rates} | {fastest}, reverse=True)
    best: tuple[float, dict[str, int]] = (-1.0, {})
    for target in targets:
        chosen = _pack_at(profiles, target, free_gpus, eps)
        score = len(chosen) * target
        if score > best[0] * (1 + 1e-12):
            best = (score, chosen)
    return best[1]


def assign_gpus(gpus: Mapping[str, int], free: dict[str, int]) -> dict[str, str]:
    """Step 2: first-fit-decreasing into nodes (``free`` node -> free GPUs, updated in place).

    Members that fit nowhere are left out of the result (they wait)."""
    placed: dict[str, str] = {}
    for d in sorted(gpus, key=lambda d: (-gpus[d], d)):
        node = next((n for n, f in free.items() if f >= gpus[d]), None)
        if node is not None:
            free[node] -= gpus[d]
            placed[d] = node
    return placed


def plan_fleet(
    profiles: Sequence[ModelProfile],
    free_gpus: Mapping[str, int],
    cpu_pool: int,
    pre: Preprocessing = Preprocessing(),
    eps: float = 0.05,
    anchor: str = "best",
    keep: Sequence[Flotilla] = (),
) -> FleetPlan:
    """The whole greedy for one decision point: flotillas for the waiting models, in order, until resources run out.

    ``free_gpus`` maps node -> GPUs of the cluster; ``cpu_pool`` is the number of cores for producers. ``keep`` are
    running flotillas to leave untouched (incremental re-formation): members no longer in ``profiles`` (converged)
    are dropped from them, the survivors keep their GPUs, and only the rest of the cluster is re-planned."""
    by_name = {p.name: p for p in profiles}
    free = dict(free_gpus)
    flotillas: list[Flotilla] = []
    for f in keep:
        gpus = {d: g for d, g in f.gpus.items() if d in by_name}
        if not gpus:
            continue
        nodes = {d: f.nodes[d] for d in gpus}
        for d, g in gpus.items():
            free[nodes[d]] -= g
        cpu_pool -= f.cores
        flotillas.append(Flotilla(gpus, nodes, f.cores, flotilla_rate(by_name, gpus, f.cores, pre)))
    placed = {d for f in flotillas for d in f.gpus}
    waiting = [p for p in profiles if p.name not in placed]
    while waiting and cpu_pool > 0 and sum(free.values()) > 0:
        # Members are capped at the largest free node: a member never spans nodes.
        m = max(free.values())
        capped = [ModelProfile(p.name, p.rates[:m]) for p in waiting]
        gpus = create_flotilla(capped, sum(free.values()), eps, anchor)
        nodes = assign_gpus(gpus, free)
        gpus = {d: gpus[d] for d in nodes}
        if not gpus:
            break
        slowest = min(by_name[d].rate(g) for d, g in gpus.items())
        cores = min(pre.cores_for(slowest), cpu_pool)
        cpu_pool -= cores
        flotillas.append(Flotilla(gpus, nodes, cores, flotilla_rate(by_name, gpus, cores, pre)))
        waiting = [p for p in waiting if p.name not in gpus]
    if not waiting:
        flotillas = [_give_leftovers(f, by_name, free, pre) for f in flotillas]
    return FleetPlan(tuple(flotillas), tuple(p.name for p in waiting))


def _give_leftovers(f: Flotilla, profiles: Mapping[str, ModelProfile], free: dict[str, int], pre: Preprocessing) -> Flotilla:
    """GPUs nobody waits for go to the flotilla's slowest members (all those at the bottleneck, one more GPU each,
    on their own nodes) while that raises R(F). The producer keeps its cores, so P(c) may become the cap."""
    gpus = dict(f.gpus)
    while True:
        rate = flotilla_rate(profiles, gpus, f.cores, pre)
        slowest = [d for d in gpus if profiles[d].rate(gpus[d]) <= rate]   # every member at the bottleneck
        need: dict[str, int] = {}
        for d in slowest:
            need[f.nodes[d]] = need.get(f.nodes[d], 0) + 1
        if any(gpus[d] >= profiles[d].max_gpus for d in slowest) or any(free[n] < k for n, k in need.items()):
            break
        trial = {**gpus, **{d: gpus[d] + 1 for d in slowest}}
        if flotilla_rate(profiles, trial, f.cores, pre) <= rate:
            break
        gpus = trial
        for n, k in need.items():
            free[n] -= k
    return Flotilla(gpus, f.nodes, f.cores, flotilla_rate(profiles, gpus, f.cores, pre))


UNCOUNTED_CORES = 1 << 20   # a cluster that declares no CPUs does not limit preprocessing


def producer_core_pool(cluster: ClusterView) -> int:
    """Cores left for preprocessing: every node's cores minus one trainer core per GPU. Clusters whose nodes
    declare no CPUs (``num_cpus == 0``, e.g. ``ClusterView.homogeneous``) are not CPU-limited."""
    if all(n.num_cpus == 0 for n in cluster.nodes):
        return UNCOUNTED_CORES
    return sum(max(0, n.num_cpus - n.num_gpus) for n in cluster.nodes)


@register("fleet")
class FleetPolicy(Policy):
    """FLEET for ensemble jobs. Each member is a JobView with ``attrs["fleet_rates"]`` = r(1..m) in samples/s;
    other jobs get a profile from their speed model (see ``_profile``)."""

    name = "fleet"

    def __init__(self, eps: float = 0.05, images_per_s_per_core: float = CIFAR_IMAGES_PER_S_PER_CORE, anchor: str = "best") -> None:
        self.eps = eps
        self.anchor = anchor
        self.pre = Preprocessing(images_per_s_per_core)

    def plan(self, jobs: tuple[JobView, ...], cluster: ClusterView) -> FleetPlan:
        m = max(n.num_gpus for n in cluster.nodes)
        profiles = [self._profile(j, m) for j in sorted(jobs, key=lambda j: (j.submit_time, j.id))]
        return plan_fleet(profiles, {n.name: n.num_gpus for n in cluster.nodes}, producer_core_pool(cluster), self.pre,
                          self.eps, self.anchor)

    @staticmethod
    def _profile(job: JobView, m: int) -> ModelProfile:
        """``attrs["fleet_rates"]`` when profiled; else the job's speed model on 1..m GPUs of one node; else linear
        up to its request (so ordinary jobs are still scheduled, as single-member flotillas or alongside others)."""
        if "fleet_rates" in job.attrs:
            return ModelProfile(job.id, tuple(float(r) for r in job.attrs["fleet_rates"]))  # type: ignore[union-attr]
        top = max(1, min(m, job.max_gpus or job.requested_gpus or 1))
        if job.speed is not None:
            batch = job.current_batch_size or job.batch_size or 1
            rates = tuple(max(job.speed.throughput(g, 1, batch), 1e-9) for g in range(1, top + 1))
            return ModelProfile(job.id, rates)
        return ModelProfile(job.id, tuple(float(g) for g in range(1, top + 1)))

    def decide(self, jobs: tuple[JobView, ...], cluster: ClusterView) -> Allocation:
        plan = self.plan(jobs, cluster)
        return Allocation(
            {d: JobAllocation(g, nodes={f.nodes[d]: g}) for f in plan.flotillas for d, g in f.gpus.items()}
        )
