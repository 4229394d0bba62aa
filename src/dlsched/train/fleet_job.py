"""An ensemble trained to convergence with FLEET: profile, plan flotillas inside the share, run them, re-form.

``train_ensemble`` is the loop (seed 001 step 3): every convergence, every new share from the scheduler and every
stop request pauses all members at their next step (each checkpoints), and the FLEET greedy re-plans the members
still training on the slots of the share. ``run_job`` runs it as a job of the service under the same job-folder
contract as every other job (``dlsched.train``): ``control.json`` in (the share: ``workers``, ``devices``),
``progress.jsonl`` and ``status.json`` out, SIGTERM = checkpoint and exit 143, a re-run resumes.

Resources: slot i of the share is device i (CUDA where the backend granted GPUs, else a CPU rank; gloo/NCCL
data parallelism for members given several). The share is one pool of slots (the local backend runs on one
machine). Each flotilla's pipeline gets the cores the planner chose (c*), one producer process pinned to each,
taken round-robin from the cores this process may use; on a CPU-only machine producers and trainers share them.
"""
from __future__ import annotations

import itertools
import json
import os
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Mapping, Sequence

from dlsched.policy.fleet import FleetPlan, Flotilla, ModelProfile, Preprocessing, plan_fleet
from dlsched.train import preemption
from dlsched.train.files import ControlWatch, atomic_write_json, write_status
from dlsched.train.launcher import RAY_ADDRESS_ENV, SLOTS_FILE
from dlsched.train.progress_log import ProgressLog
from dlsched.train.fleet_profile import MeasuredProfile, preprocessing_rate, profile_member
from dlsched.train.fleet_spec import FleetOptions, load_data
from dlsched.train.flotilla import (CTX, LEFT, Augment, Convergence, FlotillaRun, LiveFlotilla, MemberLost,
                                    MemberSpec, _build, load_member_checkpoint, run_flotillas)
from dlsched.train.member_cancel import cancelled_members
from dlsched.train.member_heads import check_heads
from dlsched.train.progress_lines import HumanProgress

STATE_FILE = "fleet_state.json"   # converged members and each member's batch index, for a resumed run


# what status shows for a member that left: why it left
LEAVE_LABEL = {"converged": "converged", "max_epochs": "stopped at max_epochs", "cancelled": "cancelled"}

@dataclass
class EnsembleReport:
    epochs: dict[str, int] = field(default_factory=dict)
    best_acc: dict[str, float] = field(default_factory=dict)
    finish_s: dict[str, float] = field(default_factory=dict)   # members that left in this run
    left: dict[str, str] = field(default_factory=dict)         # why each member left: "converged" | "max_epochs"
    flotillas: list[FlotillaRun] = field(default_factory=list)
    profiles: dict[str, MeasuredProfile] = field(default_factory=dict)
    preprocess_per_core: float = 0.0
    steps: dict[str, int] = field(default_factory=dict)        # each member's steps when the run ended

    @property
    def rates(self) -> dict[str, float]:
        return {n: p.profile.rate(1) for n, p in self.profiles.items()}


@dataclass(frozen=True)
class Share:
    """What the scheduler grants: ``slots`` worker slots, their devices ("cuda:<id>" or "cpu" each) and, on Ray,
    where they are: ``nodes`` = (Ray node id, slots there) in the order of the job's slots (empty: one machine)."""

    slots: int
    devices: tuple[str, ...] = ()
    nodes: tuple[tuple[str, int], ...] = ()

    def device(self, i: int) -> str:
        return self.devices[i] if i < len(self.devices) else "cpu"


def plan_on_nodes(profiles: Sequence[ModelProfile], nodes: Sequence[tuple[str, int]], cores_per_node: int,
                  pre: Preprocessing, eps: float) -> tuple[FleetPlan, list[str]]:
    """FLEET inside a share spread over nodes: flotillas node-local (their pipeline is shared memory, and the seed's
    "a multi-GPU DNN is kept inside one node"), planned node by node, the node with most slots first, each from the
    members the nodes before left waiting. The plan, and the node of each of its flotillas."""
    flotillas, where, waiting = [], [], list(profiles)
    for node, k in sorted(nodes, key=lambda nk: -nk[1]):
        if not waiting:
            break
        part = plan_fleet([type(p)(p.name, p.rates[:k]) for p in waiting], {node: k}, cpu_pool=cores_per_node,
                          pre=pre, eps=eps)
        flotillas += part.flotillas
        where += [node] * len(part.flotillas)
        waiting = [p for p in waiting if p.name in part.waiting]
    return FleetPlan(tuple(flotillas), tuple(p.name for p in waiting)), where


def assign_cores(plan: FleetPlan, cpus: Sequence[int], start: int = 0) -> list[list[int]]:
    """The planner's c* per flotilla as concrete cores, round-robin over ``cpus`` from ``start`` (wrapping when
    short)."""
    out, k = [], start
    for f in plan.flotillas:
        out.append([cpus[(k + i) % len(cpus)] for i in range(f.cores)])
        k += f.cores
    return out


def assign_devices(plan: FleetPlan, share: Share, taken: Sequence[str] = ()) -> dict[str, list[str]]:
    """Slots of the share to members' ranks, in plan order, past the devices ``taken`` (by flotillas kept running)."""
    free = list((Counter(share.device(i) for i in range(share.slots)) - Counter(taken)).elements())
    free.sort(key=[share.device(i) for i in range(share.slots)].index)   # slot order
    out, i = {}, 0
    for f in plan.flotillas:
        for d, g in f.gpus.items():
            out[d] = [free[i + r] if i + r < len(free) else "cpu" for r in range(g)]
            i += g
    return out


# the simulator's rule (``sim.fleet.fleet_planner``): keep running flotillas unless that leaves over half the share idle
REBALANCE_IDLE = 0.5


@dataclass(frozen=True)
class Placed:
    """A flotilla as it runs: its plan, its pipeline's cores and its members' devices."""

    flotilla: Flotilla
    cores: tuple[int, ...]
    devices: Mapping[str, tuple[str, ...]]


def still_fitting(running: Sequence[Placed], share: Share) -> list[Placed]:
    """The running flotillas a new share still holds, in order, each on the very devices it runs on: those a
    re-formation keeps training (a flotilla re-formed costs a checkpoint and new processes)."""
    free = Counter(share.device(i) for i in range(share.slots))
    kept = []
    for p in running:
        need = Counter(d for ds in p.devices.values() for d in ds)
        if not need - free:
            kept.append(p)
            free -= need
    return kept


def plan_record(plan: FleetPlan, cores: Sequence[Sequence[int]], devices: Mapping[str, Sequence[str]], share: Share,
                where: Sequence[str] = ()) -> dict:
    """The ``flotillas`` event; on several nodes each flotilla names its ``node`` (a Ray node id)."""
    return {"share": share.slots, "waiting": list(plan.waiting),
            "flotillas": [{"members": dict(f.gpus), "cores": list(c), "rate": f.rate,
                           "devices": {d: list(devices[d]) for d in f.gpus}, **({"node": n} if n else {})}
                          for f, c, n in zip(plan.flotillas, cores, [*where] + [None] * len(plan.flotillas))]}


def stream_places(steps: Mapping[str, int], shifts: Mapping[str, int], per_epoch: int) -> tuple[int, dict[str, int]]:
    """Where a flotilla's shared stream starts, and each member's shift (it trains the stream's batch ``step +
    shift``), for members resuming at ``steps`` with the ``shifts`` they had. A member's epochs must be whole
    epochs of the stream (one shuffle of every sample), so a shift is a multiple of ``per_epoch`` and a member
    mid-epoch keeps its own; one at an epoch's start (a member that waited, one paused at its epoch's end) may
    take any later epoch of the stream: it takes the furthest member's epoch, so that the member furthest on waits
    for the others less than an epoch, not for the whole gap between them."""
    places = {m: steps[m] + shifts.get(m, 0) for m in steps}
    mid = [p for m, p in places.items() if steps[m] % per_epoch]
    epoch = max(mid or places.values()) // per_epoch
    shift = {m: max(shifts.get(m, 0), epoch * per_epoch - steps[m]) if steps[m] % per_epoch == 0 else shifts.get(m, 0)
             for m in steps}
    return min(steps[m] + shift[m] for m in steps), shift


def _by_node(where: Sequence[str]) -> list[int]:
    """The flotillas' indices grouped by node, nodes in first-seen order (``run_on_nodes``'s order)."""
    return [i for n in dict.fromkeys(where) for i, w in enumerate(where) if w == n]


def _load_state(ckpt_dir: Path) -> dict:
    try:
        return json.loads((ckpt_dir / STATE_FILE).read_text())
    except (OSError, ValueError):
        return {"converged": {}, "progress": {}}


def left_earlier(ckpt_dir: Path) -> dict[str, dict]:
    """The members that left in an earlier run into this folder: name -> {epoch, best_acc, reason}."""
    left = _load_state(ckpt_dir).get("converged")
    return {n: d for n, d in left.items() if isinstance(d, dict)} if isinstance(left, dict) else {}


def _standing(ckpt_dir: Path, name: str) -> tuple[int, float | None]:
    """A member's epochs and best validation accuracy as its checkpoint has them (0, None before its first or from a
    file not of its shape); read as the member resumes it, tensors and plain data only."""
    import pickle

    try:
        st = load_member_checkpoint(ckpt_dir / f"{name}.pt")["state"]
        return int(st["epoch"]), (float(st["best"]) if st["best"] >= 0 else None)
    except (OSError, KeyError, TypeError, ValueError, RuntimeError, EOFError, pickle.UnpicklingError):
        return 0, None


def train_ensemble(members: Sequence[MemberSpec], data, val, batch: int, conv: Convergence, ckpt_dir: Path, *,
                   share: Callable[[], Share], eps: float = 0.9, seed: int = 0,
                   stop_requested: Callable[[], bool] = lambda: False,
                   on_report: Callable[[tuple], None] | None = None,
                   on_plan: Callable[[dict], None] | None = None,
                   on_event: Callable[[dict], None] | None = None,
                   augment: Augment = Augment(), max_restarts: int = 3,
                   cancelled: Callable[[], frozenset[str]] = frozenset,
                   spread: Callable | None = None) -> tuple[EnsembleReport, bool]:
    """Train every member to convergence (or until ``stop_requested``). Returns (report, all converged). A run whose
    process was killed by a signal resumes every member from its checkpoint, at most ``max_restarts`` times; a member
    in ``cancelled()`` leaves at its next step (``train/member_cancel.py``). ``spread``: how flotillas run on a share
    that names its nodes (``flotilla_nodes.run_on_nodes`` with the job's launcher bound; ``run_job`` on Ray)."""
    for m in members:   # a bad model reference is one clear line here, not a failed profiling process
        _build(m)
    check_heads(members, data, val)   # a head too narrow for the labels: one line, not a crash deep in training
    ckpt_dir.mkdir(parents=True, exist_ok=True)
    emit = on_event or (lambda e: None)
    state = _load_state(ckpt_dir)
    report = EnsembleReport()
    shape = tuple(data[0].shape[1:])
    grant = share()
    cpus = sorted(os.sched_getaffinity(0))
    report.preprocess_per_core = preprocessing_rate(data[0], batch, augment=augment)
    for m in members:
        report.profiles[m.name] = profile_member(m, batch, shape, m.max_workers, grant.devices, scratch=ckpt_dir)
    per_epoch = len(data[0]) // batch * batch   # samples a member trains per epoch (one shared batch a step)
    emit({"event": "profiled", "preprocess_images_per_s_per_core": report.preprocess_per_core,
          "profiles": [p.as_record() for p in report.profiles.values()],
          # the most samples each member can train (its epoch cap): what the service's forecast runs members to
          "max_samples": {m.name: (m.max_epochs or conv.max_epochs) * per_epoch for m in members}})
    pre = Preprocessing(report.preprocess_per_core)
    by_name = {m.name: m for m in members}
    reports = CTX.Queue()
    t0 = time.time()
    remaining = [m.name for m in members if m.name not in state["converged"]]
    progress = {m.name: int(state["progress"].get(m.name, 0)) for m in members}
    shifts = {m.name: int(state.get("shift", {}).get(m.name, 0)) for m in members}
    saved = dict(progress)   # each member's step as its checkpoint has it: where a restarted run resumes it
    losses = 0   # runs whose processes were killed (``MemberLost``)

    def leave(name: str, epoch: int, best_acc: float | None, reason: str) -> None:
        report.epochs[name], report.best_acc[name] = epoch, best_acc
        report.finish_s[name] = time.time() - t0
        report.left[name] = reason
        state["converged"][name] = {"epoch": epoch, "best_acc": best_acc, "reason": reason}
        best = (ckpt_dir / f"{name}.best.pt").resolve()   # where the user finds the member's result
        emit({"event": "member_converged", "member": name, "epoch": epoch, "best_acc": best_acc, "reason": reason,
              **({"best_checkpoint": str(best)} if best.exists() else {})})

    def relay(msg: tuple) -> None:
        name, status, epoch, step = msg[:4]
        progress[name] = step
        if status in LEFT and msg[4] is None:
            leave(name, epoch, msg[5], status)
        if msg[4] is None or (msg[5] is not None and msg[5] >= 0):   # its last report or an epoch's end: checkpointed
            saved[name] = step
            atomic_write_json(ckpt_dir / STATE_FILE, {**state, "progress": saved, "shift": shifts})
        if on_report:
            on_report(msg)

    def planned(grant: Share) -> tuple[FleetPlan, list[list[int]], dict[str, list[str]], dict, list[str], int]:
        """The plan on ``grant``, its cores, devices, record and nodes, and how many of its flotillas (its first)
        are ones running now, kept as they run."""
        profiles = [report.profiles[n].profile for n in remaining]
        if grant.nodes and spread is not None:   # each node's cores as many as this one's (nodes alike)
            plan, where = plan_on_nodes(profiles, grant.nodes, len(cpus), pre, eps)
            cores, devices, kept = assign_cores(plan, cpus), assign_devices(plan, share=grant), []
        else:
            profiles = [type(p)(p.name, p.rates[: max(1, grant.slots)]) for p in profiles]
            args = (profiles, {"share": grant.slots}, len(cpus), pre, eps)
            # one told to stop already is not kept: it ends before the plan's new flotillas start
            kept = still_fitting([placed[f.names] for f in live if not f.stop.is_set()], grant)
            plan, where = plan_fleet(*args, keep=[p.flotilla for p in kept]), []
            if sum(g for f in plan.flotillas for g in f.gpus.values()) < (1 - REBALANCE_IDLE) * grant.slots:
                plan, kept = plan_fleet(*args), []
            # plan_fleet lists the kept flotillas first; one given leftover slots is re-formed, as are those after it
            kept = list(itertools.takewhile(lambda kp: dict(kp[0].flotilla.gpus) == dict(kp[1].gpus),
                                            zip(kept, plan.flotillas)))
            kept = [k for k, _ in kept]
            rest = FleetPlan(plan.flotillas[len(kept):], plan.waiting)
            cores = [list(k.cores) for k in kept] + assign_cores(rest, cpus, sum(len(k.cores) for k in kept))
            devices = {**{d: list(ds) for k in kept for d, ds in k.devices.items()},
                       **assign_devices(rest, grant, [d for k in kept for ds in k.devices.values() for d in ds])}
        return plan, cores, devices, plan_record(plan, cores, devices, grant, where), where, len(kept)

    def replan(running: dict) -> bool | frozenset[str]:
        """A new share re-forms only the flotillas it does not still hold as they run (``still_fitting``): the
        members of those, to stop; an empty set when it only adds flotillas (a grow for members left waiting);
        False when the plan stays as it is (a shrink that takes only slots no member uses is answered by
        recording the same plan on it). A re-formation costs a checkpoint and new processes (a DDP rank's
        teardown has taken 30 s), so the flotillas that keep their slots train on. On several nodes (Ray) any
        change of plan re-forms every flotilla (True)."""
        now = share()
        if now == running["grant"]:
            return False
        plan, _, _, record, where, kept = planned(now)
        stopping = any(f.stop.is_set() for f in live)   # the record no longer says what runs
        if not stopping and {**record, "share": None} == {**running["record"], "share": None}:
            running.update(grant=now, record=record)
            emit({"event": "flotillas", **record, "samples_done": {n: progress[n] * batch for n in remaining}})
            return False
        if where or not live:
            return True
        keep = {f.members for f in plan.flotillas[:kept]}
        return frozenset(n for f in live if f.names not in keep for n in f.names)

    live: list[LiveFlotilla] = []   # flotillas running across re-formations that keep them
    placed: dict[tuple[str, ...], Placed] = {}   # how each of them runs

    def run_here(groups, start_batch, should_stop) -> tuple[set[str], list[FlotillaRun]]:
        return run_flotillas(groups, data, val, batch, conv, ckpt_dir, reports, seed=seed, workers=workers,
                             cores=[c for c, _ in start_batch], devices=devices,
                             start_batch=[s for _, s in start_batch], shift=shifts, on_report=relay,
                             augment=augment, should_stop=should_stop, running=live)

    while remaining and not stop_requested():
        training = {n for f in live for n in f.names}   # a live member cancelled is stopped by should_stop first
        for name in sorted(cancelled() & set(remaining) - training):   # paused and checkpointed: it leaves where it stands
            leave(name, *_standing(ckpt_dir, name), "cancelled")
            atomic_write_json(ckpt_dir / STATE_FILE, {**state, "progress": saved, "shift": shifts})
        remaining = [n for n in remaining if n not in state["converged"]]
        if not remaining:
            break
        grant = share()
        # after a partial re-formation the same plan replan made (it keeps the same flotillas), or a newer one
        plan, cores, devices, record, where, kept = planned(grant)
        gone = frozenset(n for f in live if f.names not in {g.members for g in plan.flotillas[:kept]} for n in f.names)
        if gone:   # a flotilla still running that this plan does not keep stops before any flotilla starts
            groups, places = [], []

            def should_stop(running=None) -> bool | frozenset[str]:
                return True if stop_requested() else gone
        else:
            emit({"event": "flotillas", **record, "samples_done": {n: progress[n] * batch for n in remaining}})
            if on_plan:
                on_plan(record)
            placed = {f.members: Placed(f, tuple(c), {d: tuple(devices[d]) for d in f.gpus})
                      for f, c in zip(plan.flotillas, cores)}
            groups = [[by_name[n] for n in f.gpus] for f in plan.flotillas[kept:]]   # the kept ones train on
            workers = {d: g for f in plan.flotillas for d, g in f.gpus.items()}
            places = [stream_places({m.name: progress[m.name] for m in g}, shifts, len(data[0]) // batch)
                      for g in groups]
            shifts.update({m: k for _, shift in places for m, k in shift.items()})
            # a member further on in its stream waits for the stream to reach it (it idles meanwhile): a member's
            # epoch must be one shuffle of every sample, never part of two

            def should_stop(running={"grant": grant, "record": record}) -> bool | frozenset[str]:
                # replan's empty set (start flotillas, stop none) is an answer too: not "nothing"
                return stop_requested() or bool(cancelled() & set(remaining)) or replan(running)

        try:
            if where:   # on several Ray nodes: one runner per node, in the job's bundles there
                converged, runs = spread([(n, [f.members for f, w in zip(plan.flotillas, where) if w == n])
                                          for n in dict.fromkeys(where)],
                                         workers, [cores[i] for i in _by_node(where)],
                                         [places[i][0] for i in _by_node(where)], shifts, should_stop, relay)
            else:
                converged, runs = run_here(groups, list(zip(cores[kept:], [start for start, _ in places])),
                                           should_stop)
        except MemberLost as e:   # every member of the run was killed with it: each goes back to its checkpoint
            losses += 1
            if losses > max_restarts:
                raise RuntimeError(f"{e}; {max_restarts} restart(s) spent") from None
            emit({"event": "worker_lost", "workers_lost": [o for o, _ in e.lost], "exit_codes": [c for _, c in e.lost],
                  "checkpoint": str(ckpt_dir), "restored_step": sum(saved.values()),
                  "lost_steps": sum(progress.values()) - sum(saved.values()), "restored": dict(saved)})
            progress.update(saved)
            continue
        report.flotillas += [FlotillaRun(r.members, r.start - t0, r.end - t0, r.workers, r.producer_cpu_s) for r in runs]
        remaining = [n for n in remaining if n not in converged]
        # a member still training is where its checkpoint is, for a run that resumes it
        state["progress"] = {**progress, **{n: saved[n] for f in live for n in f.names}}
        state["shift"] = shifts
        atomic_write_json(ckpt_dir / STATE_FILE, state)
    if live:   # stopped between two re-formations: the flotillas kept running checkpoint and stop too
        report.flotillas += [FlotillaRun(r.members, r.start - t0, r.end - t0, r.workers, r.producer_cpu_s)
                             for r in run_here([], [], lambda: True)[1]]
    report.steps = dict(progress)
    for name, done in state["converged"].items():
        report.epochs.setdefault(name, done["epoch"])
        report.best_acc.setdefault(name, done["best_acc"])
        report.left.setdefault(name, done.get("reason", "converged"))   # in an earlier run into the same folder
    return report, not remaining


class _Contract:
    """The job folder: the share from control.json, progress records and status.json."""

    def __init__(self, job_dir: Path, slots: int, batch: int, names: Sequence[str], on_ray: bool = False) -> None:
        self.dir, self.batch, self.on_ray = job_dir, batch, on_ray
        self.granted = Share(slots, _visible_devices())
        self.log = ProgressLog(job_dir, echo=HumanProgress(), first=True)   # output.log: what `dlsched logs` shows
        self.control = ControlWatch(job_dir, lambda error: self.event({"event": "control_rejected", "error": error}))
        self.steps = {n: 0 for n in names}
        self.rates: dict[str, float] = {}
        self.members = {n: "waiting" for n in names}
        self.flotillas: list[dict] = []
        self.planned = (-1, self.granted)   # the control request the running flotillas answer, and its share

    def share(self) -> Share:
        c = self.control.poll()
        nodes = self._nodes()
        if c is not None or nodes != self.granted.nodes:
            workers = c.workers if c is not None else self.granted.slots
            devices = tuple(f"cuda:{d}" for d in c.devices) if c is not None and c.devices else self.granted.devices
            self.granted = Share(sum(k for _, k in nodes) if nodes else workers, devices, nodes)
            if self.granted == self.planned[1]:   # nothing for the flotillas to change: they answer it as they run
                self.planned = (self.control.generation, self.granted)
        return self.granted

    def _nodes(self) -> tuple[tuple[str, int], ...]:
        """On Ray, where the slots of the control request in force are (``ray-slots.json`` of its generation, written
        before its ``control.json``; rewritten without a new one when a node is lost); () on one machine."""
        if not self.on_ray:
            return ()
        try:
            spec = json.loads((self.dir / SLOTS_FILE).read_text())
            if spec["generation"] != self.control.generation:
                return self.granted.nodes
            return tuple(Counter(s["node"] for s in spec["slots"]).items())
        except (OSError, ValueError, KeyError, TypeError):
            return self.granted.nodes

    def event(self, e: dict) -> None:
        if e.get("event") == "flotillas":   # planned on the share read last: the old flotillas have stopped
            self.flotillas, self.planned = e["flotillas"], (self.control.generation, self.granted)
            running = {d for f in e["flotillas"] for d in f["members"]}
            # a member left waiting trains nothing now: its last rate stayed in the ensemble's samples/s
            self.rates = {d: r for d, r in self.rates.items() if d in running}
            self.members.update({d: "training" if d in running else "waiting"
                                 for d, s in self.members.items() if s not in LEAVE_LABEL.values()})
        if e.get("event") == "member_converged":
            self.members[e["member"]] = LEAVE_LABEL[e.get("reason", "converged")]
            self.rates.pop(e["member"], None)
        self.log.write({"time": time.time(), **e})
        self.status("running")

    def report(self, msg: tuple) -> None:
        name, status, epoch, step, loss, _acc, rate = msg
        self.steps[name] = step
        if rate is not None and status == "training":
            self.rates[name] = rate
        if loss is None:
            return
        total = sum(self.steps.values())
        # the flotillas' own request and slots: a step reported while they stop for a new share is not the new one's
        answers, planned = self.planned
        self.log.write({"time": time.time(), "step": total, "epoch": epoch, "samples": total * self.batch,
                        "loss": loss, "samples_per_s": sum(self.rates.values()), "workers": planned.slots,
                        "batch_size": self.batch, "total_samples": None, "member": name, "member_step": step,
                        "generation": self.control.generation, "control_generation": answers})

    def status(self, state: str, error: str | None = None) -> None:
        write_status(self.dir, state, os.getpid(), self.granted.slots, error, generation=self.control.generation,
                     members=self.members, flotillas=self.flotillas)


def _spread(job_dir: Path, address: str, opts: FleetOptions, seed: int, ckpt: Path) -> Callable:
    """``train_ensemble``'s ``spread``: ``flotilla_nodes.run_on_nodes`` in the job's Ray bundles (the launcher, a Ray
    driver, is made at the first run: profiling forks before it)."""
    from dlsched.train.flotilla_nodes import run_on_nodes

    made: list = []

    def spread(placed, workers, cores, start_batch, shift, should_stop, on_report):
        if not made:
            from dlsched.train.launcher import RayLauncher

            made.append(RayLauncher(job_dir, address))
        ensemble = {"entry": opts.entry, "params": opts.params, "seed": seed, "ckpt_dir": str(ckpt)}
        return run_on_nodes(made[0], job_dir, ensemble, placed, workers, cores, start_batch, shift, should_stop,
                            on_report)
    return spread


def _visible_devices() -> tuple[str, ...]:
    ids = [d for d in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if d.strip()]
    return tuple(f"cuda:{d}" for d in ids)


def run_job(opts: FleetOptions) -> int:
    """The ensemble as a service job (contract in ``dlsched.train``); exit 0 finished, 143 stopped."""
    job_dir, workers, spec = opts.job_dir, opts.workers, opts.ensemble()
    base = Path(spec.base_dir or ".")
    job_dir.mkdir(parents=True, exist_ok=True)
    members = spec.members(base)
    ray_address = os.environ.get(RAY_ADDRESS_ENV)
    io = _Contract(job_dir, workers, spec.batch_size, [m.name for m in members], on_ray=bool(ray_address))
    io.share()
    ckpt = job_dir / "ckpt"
    state = _load_state(ckpt)
    io.members.update({n: LEAVE_LABEL[d.get("reason", "converged")] for n, d in state["converged"].items()})
    # each member's steps as its checkpoint has them: a member that left in an earlier run reports none in this one,
    # and the job's step (their sum) went backwards across a restart (job_stopped step 1101, then job_finished 473)
    io.steps.update({n: int(k) for n, k in state.get("progress", {}).items() if n in io.steps})
    io.status("running")
    data, val = load_data(spec, base)
    report, done = train_ensemble(members, data, val, spec.batch_size, spec.convergence_rule(), ckpt,
                             share=io.share, eps=spec.rate_tolerance, seed=spec.dataset.seed,
                             stop_requested=preemption.requested, on_report=io.report, on_event=io.event,
                             augment=spec.augment(), max_restarts=opts.max_restarts,
                             cancelled=lambda: cancelled_members(job_dir),
                             spread=_spread(job_dir, ray_address, opts, spec.dataset.seed, ckpt) if ray_address else None)
    if done:
        io.event({"event": "finished", "step": sum(io.steps.values())})
        io.status("finished")
        return 0
    # where each member still training stands (a cancelled ensemble showed 0 % done: the last plan's count)
    io.event({"event": "stopped", "step": sum(io.steps.values()), "checkpoint": str(ckpt),
              "samples_done": {n: k * spec.batch_size for n, k in report.steps.items() if n not in report.left}})
    io.status("stopped")
    return 143
