"""The virtual-clock driver: every ``interval`` seconds it snapshots jobs and cluster, asks a policy for an
``Allocation``, places it, and advances every job's progress to the next decision.

Semantics follow the Pollux OSDI'21 artifact simulator (petuum/adaptdl osdi21-artifact, simulator/simulator.py)
so that our average JCTs can be compared with its published ones:

* decisions at t = interval, 2·interval, …; a job submitted at s is first seen at the first decision >= s;
* a job whose node map changes pays ``restart_penalty`` seconds (30) of no progress, also on its first start;
  GPUs are charged to it (attained service) while it restarts; a batch-size-only change is free, and so is an
  unchanged GPU count (placement keeps its node map); a grow or shrink pays the full penalty although our
  runtime resizes stop-free (docs/policies.md, "What a restart costs");
* progress of a trace job = statistical gain / seconds per step; epoch boundaries are crossed at whole seconds
  (the peer rounds the time to reach one); the job completes at the end of its last epoch, mid-interval, and its
  GPUs stay idle until the next decision;
* JCT = completion time − submission time;
* a running job's view says when its node map last changed and when that restart's pause ends
  (``attrs["changed_at"]`` / ``["settled_at"]``, what ``policy.restart_hold`` reads; at the 60 s clock and 30 s
  penalty a job has paid by the next decision, so the hold never binds in the published runs).

Duration-driven jobs (Philly, Gavel) are advanced lazily: their finish time is known from their rate, so stretches
of time in which nothing arrives or finishes are skipped when the policy says its decision only changes on such
events (``Policy.event_driven``) and every active job already has its request.
"""
from __future__ import annotations

import heapq
from collections import deque
import math
from dataclasses import dataclass, field
from typing import Callable, Iterable, Mapping

import numpy as np

from dlsched.errors import UserError
from dlsched.perf.pollux import load_app
from dlsched.perf.profile import POLLUX_APPS
from dlsched.policy.base import FINISHED_SHOWN, ClusterView, JobView, Policy, make_policy
from dlsched.policy.placement import best_fit, consolidated, most_free_first
from dlsched.round import Resize, schedule
from dlsched.sim.ensemble_job import ensemble_speed, share_view
from dlsched.sim.job_state import SimJob
from dlsched.sim.metrics import SimResult
from dlsched.sim.remaining import parse_remaining
from dlsched.sim.throughput import LinearThroughput, TraceThroughput, speed_factor
from dlsched.sim.workload import WorkloadJob, Workload



@dataclass(frozen=True)
class SimConfig:
    """Knobs of one run. ``remaining``: what policies are told of a job's remaining work — ``"oracle"``,
    ``"predicted"``, ``"none"`` or ``"noise:SIGMA"`` (``sim/remaining.py``)."""

    interval: float = 60.0
    restart_penalty: float = 30.0
    remaining: str = "oracle"
    seed: int = 0
    gpu_speed: Mapping[str, float] = field(default_factory=dict)   # "TYPE" or "TYPE/APP" -> speed factor (1.0)
    horizon: float | None = None            # stop at this time (jobs unfinished then are reported as such)
    placement: str = "most-free"            # nodes for jobs a policy did not place: "most-free" (the peer's) or
                                            # "consolidated" (Optimus Theorem 1: fewest nodes, even split)

    def __post_init__(self) -> None:
        """A NaN restart penalty never ended a run; a NaN/inf interval or horizon raised mid-run: refuse them."""
        bad = bad_knob(interval=self.interval, restart_penalty=self.restart_penalty, horizon=self.horizon,
                       seed=self.seed)
        if bad:
            name, value, expected = bad
            raise UserError(f"{name} must be {expected}, got {value}")


_SECONDS_ABOVE_0 = ("a finite number > 0 seconds", lambda v: math.isfinite(v) and v > 0)
# the one rule of each numeric knob of SimConfig: what it must be, and the test of a value
KNOB_RULES = {"interval": _SECONDS_ABOVE_0, "horizon": _SECONDS_ABOVE_0,
              "restart_penalty": ("a finite number >= 0 seconds", lambda v: math.isfinite(v) and v >= 0),
              "seed": ("an integer >= 0", lambda v: v >= 0)}


def bad_knob(**values: float | None) -> tuple[str, float, str] | None:
    """The first of ``SimConfig``'s numeric knobs (None = not set) that breaks its rule, as (name, value, what it
    must be); None when all keep theirs. SimConfig and ``dlsched simulate`` word the error each in its own terms."""
    for name, value in values.items():
        expected, ok = KNOB_RULES[name]
        if value is not None and not ok(value):
            return name, value, expected
    return None


PLACEMENTS = {"most-free": most_free_first, "consolidated": consolidated, "best-fit": best_fit}


def check_jobs(jobs: list[SimJob], cluster: ClusterView) -> None:
    """Each job runs here: its kind, its batch within its traces', its GPUs within the cluster's; trace nodes."""
    for j in jobs:
        if j.lazy and not j.spec.duration:
            raise UserError(f"job {j.spec.id}: neither an application, a duration nor ensemble members")
        if j.app is not None and j.spec.batch_size is not None and not (
                j.app.init_batch_size <= j.spec.batch_size <= j.app.max_batch_size):
            raise UserError(f"job {j.spec.id}: field batch_size={j.spec.batch_size} is outside the batch sizes "
                            f"{j.app.init_batch_size}..{j.app.max_batch_size} the {j.app.name} traces validate")
        if j.spec.requested_gpus > cluster.total_gpus:
            raise UserError(f"job {j.spec.id}: requests {j.spec.requested_gpus} GPUs, the cluster has "
                            f"{cluster.total_gpus} (simulate --skip-bad skips such jobs)")
    check_trace_nodes(jobs, cluster)


def check_trace_nodes(jobs: Iterable[SimJob], cluster: ClusterView) -> None:
    """A trace-driven job's step time is known only for nodes of at most as many GPUs as its traces measured per
    node (4 in the Pollux traces): a bigger node is a UserError before the run, not a ValueError in its middle."""
    big = max(cluster.nodes, key=lambda n: n.num_gpus)
    for app in {j.app.name: j.app for j in jobs if j.app is not None}.values():
        if big.num_gpus > app.step_times.max_gpus_per_node:
            raise UserError(f"node {big.name!r} has {big.num_gpus} GPUs: the {app.name} traces measured at most "
                            f"{app.step_times.max_gpus_per_node} GPUs per node, so its step time there is unknown "
                            f"(use nodes of at most that many GPUs for trace-driven jobs)")


class Simulator:
    """One run of one policy over one workload on one cluster. Use ``run()`` unless stepping by hand."""

    def __init__(self, workload: Workload | Iterable[WorkloadJob], policy: Policy, cluster: ClusterView,
                 config: SimConfig = SimConfig(), on_progress: Callable[[float, int, int], None] | None = None):
        self.remaining = parse_remaining(config.remaining)
        if config.placement not in PLACEMENTS:
            raise UserError(f"placement must be one of {', '.join(PLACEMENTS)}, got {config.placement!r}")
        # A policy that places its own jobs (FIFO/SRTF/Tiresias: most free first) keeps that placement on the
        # uncontended fast path too, so that config.placement never changes its schedule halfway.
        self.strategy = most_free_first if getattr(policy, "places_own", False) else PLACEMENTS[config.placement]
        specs = workload.jobs if isinstance(workload, Workload) else list(workload)
        self.policy, self.cluster, self.cfg = policy, cluster, config
        self.on_progress = on_progress
        rng = np.random.default_rng(config.seed)
        noise = (np.exp(rng.normal(0.0, self.remaining.sigma, len(specs)))
                 if self.remaining.kind == "noise" and self.remaining.sigma > 0 else np.ones(len(specs)))
        self.jobs = [SimJob(s, i, load_app(s.app) if s.app else None, float(noise[i])) for i, s in enumerate(specs)]
        self.jobs.sort(key=lambda j: j.spec.submit_time)   # stable: input order on ties
        self._by_idx = {j.idx: j for j in self.jobs}
        check_jobs(self.jobs, cluster)
        self.node_type = {n.name: n.gpu_type for n in cluster.nodes}
        for key, factor in config.gpu_speed.items():
            gpu_type, per_app, app = key.partition("/")
            if gpu_type not in cluster.gpu_types or not factor > 0 or (per_app and app not in POLLUX_APPS):
                raise UserError(f"gpu_speed: entry {key}={factor} needs a GPU type of the cluster "
                                f"({', '.join(cluster.gpu_types)}), an optional /APP ({', '.join(POLLUX_APPS)}) "
                                f"and a factor > 0")
        self.gpu_speed = tuple(sorted(config.gpu_speed.items()))
        self.total_gpus = cluster.total_gpus
        self.gpus_per_node = max(n.num_gpus for n in cluster.nodes)
        self.t = 0.0
        self.timeline: list[tuple[float, int, int, int]] = []   # (time, GPUs allocated, active jobs, finished jobs)
        self._finish_heap: list[tuple[float, int, int]] = []      # lazy jobs: (finish time, version, index)
        # Incremental cluster state, so an uncontended decision costs O(changes), not O(active jobs).
        self.active: dict[int, SimJob] = {}
        self.free = {n.name: n.num_gpus for n in cluster.nodes}
        self.used = 0
        self.requested = 0          # GPUs requested by active jobs
        self.stepped_active = 0     # active trace-driven and ensemble jobs (advanced every interval)
        self.short = 0              # running jobs holding fewer/more GPUs than requested
        self.running: dict[int, SimJob] = {}   # by idx, the jobs holding GPUs
        self.waiting = 0            # active jobs the last decision left without GPUs
        self.finished: deque[JobView] = deque(maxlen=FINISHED_SHOWN)
        validate_at_submit(self.policy, self.jobs, self._make_view, ClusterView(self.cluster.nodes, 0.0))

    # --- progress ---------------------------------------------------------------------------------
    def _schedule_finish(self, job: SimJob) -> None:
        job.version += 1
        if job.ngpus:
            fin = job.last_t + job.rescale_left + job.work_left / job.rate()
            heapq.heappush(self._finish_heap, (fin, job.version, job.idx))

    # --- snapshots ------------------------------------------------------------------------------
    def _view(self, job: SimJob) -> JobView:
        if job.view is None or job.ngpus:
            job.view = self._make_view(job)
        return job.view

    def _make_view(self, job: SimJob) -> JobView:
        app = job.app
        # every kind of job, as the live service counts them (service/job_models.py): Pollux's restart budget reads
        # them, and duration and ensemble jobs were shown none, so ``goodput`` simulated them without it
        common = {"restart_s": self.cfg.restart_penalty, "restarts": max(job.restarts, 0), **job.hold_attrs()}
        if app is not None:
            speed = TraceThroughput(app, job.epoch, self.gpus_per_node, self.gpu_speed)
            attrs = {"app": app.name, "epoch": job.epoch, "progress": job.progress,
                     "target_progress": app.target_progress, **common}
            return JobView(
                id=job.spec.id, submit_time=job.spec.submit_time, requested_gpus=job.spec.requested_gpus,
                batch_size=job.spec.batch_size, min_batch_size=app.init_batch_size, max_batch_size=app.max_batch_size,
                max_local_batch=app.max_local_bsz, min_local_batch=app.min_local_bsz, max_gpus=job.max_gpus,
                attained_service=job.attained, run_time=job.run_time, placement=job.nodes, current_batch_size=job.batch,
                remaining_samples=job.remaining(self.remaining, self.t, speed), speed=speed, attrs=attrs)
        if job.ensemble is not None:
            work = job.spec.ensemble
            speed = ensemble_speed(job.ensemble.remaining, work.pre, self.cluster)
            useful = min(work.max_gpus or self.total_gpus, max(1, speed.useful_gpus(self.total_gpus)))
            return JobView(
                id=job.spec.id, submit_time=job.spec.submit_time, requested_gpus=min(job.spec.requested_gpus, useful),
                max_gpus=useful, attained_service=job.attained, run_time=job.run_time, placement=job.nodes,
                remaining_samples=job.remaining(self.remaining, self.t), speed=speed, kind="ensemble",
                attrs={"priority": job.spec.priority, **common})
        return JobView(
            id=job.spec.id, submit_time=job.spec.submit_time, requested_gpus=job.spec.requested_gpus,
            max_gpus=job.spec.requested_gpus, attained_service=job.attained, run_time=job.run_time,
            placement=job.nodes, remaining_samples=job.remaining(self.remaining, self.t),
            speed=LinearThroughput(job.spec.requested_gpus, self.gpu_speed),
            attrs={"priority": job.spec.priority, **common})

    # --- state changes --------------------------------------------------------------------------
    def _set_nodes(self, job: SimJob, nodes: Mapping[str, int]) -> None:
        req = job.spec.requested_gpus
        self.short -= bool(job.ngpus) and job.ngpus != req
        for n, k in job.nodes.items():
            self.free[n] += k
        for n, k in nodes.items():
            self.free[n] -= k
        self.used += sum(nodes.values()) - job.ngpus
        job.view = None
        job.nodes = dict(nodes)
        job.ptuple = tuple(nodes.values())
        job.ngpus = sum(job.ptuple)
        app = job.app.name if job.app is not None else None
        job.speed = min((speed_factor(self.cfg.gpu_speed, self.node_type[n], app) for n in nodes), default=1.0)
        self.short += bool(job.ngpus) and job.ngpus != req
        self.running.pop(job.idx, None)
        if job.ngpus:
            self.running[job.idx] = job

    def _reallocate(self, job: SimJob, nodes: Mapping[str, int], batch: int | None, changed: bool | None = None) -> None:
        """Give ``job`` these nodes (and batch size); a changed node map costs a restart."""
        if job.lazy:
            job.sync_lazy(self.t)
        if batch is not None and job.app is not None:
            job.batch = int(min(max(batch, job.app.init_batch_size), job.app.max_batch_size))
        if changed is None:
            changed = list(nodes.items()) != list(job.nodes.items())
        if changed:
            self._set_nodes(job, nodes)
            if nodes:
                # an ensemble's members pay their own restarts when FLEET re-plans them on the new share
                job.rescale_left = self.cfg.restart_penalty if job.ensemble is None else 0.0
                job.changed = (self.t, job.rescale_left)
                job.restarts += 1
                if job.start is None:
                    job.start = self.t
        if job.app is not None and job.ngpus:
            job.split = job.app.split_batch(job.batch, job.ngpus)
        if job.lazy and changed:
            self._schedule_finish(job)

    def _admit(self, job: SimJob) -> None:
        self.active[job.idx] = job
        self.requested += job.spec.requested_gpus
        self.stepped_active += not job.lazy
        job.last_t = self.t

    def _complete(self, job: SimJob) -> None:
        # what the policy may learn sizes from (ClusterView.finished): how long and on what it ran, nothing more
        self.finished.append(JobView(id=job.spec.id, submit_time=job.spec.submit_time,
                                     requested_gpus=job.spec.requested_gpus, attained_service=job.attained,
                                     run_time=job.run_time, max_gpus=job.max_gpus,
                                     speed=None if job.app or job.ensemble else
                                     LinearThroughput(job.spec.requested_gpus, self.gpu_speed)))
        self._set_nodes(job, {})
        del self.active[job.idx]
        self.requested -= job.spec.requested_gpus
        self.stepped_active -= not job.lazy

    # --- decisions ------------------------------------------------------------------------------
    def _fast_path(self) -> bool:
        """Rigid policies give everyone their request when all requests fit: place newcomers, skip the policy.

        Trace jobs always go through the policy (its placement order is part of the peer's semantics)."""
        if not self.policy.rigid or self.stepped_active or self.short or self.requested > self.total_gpus:
            return False
        for j in list(self.active.values()):
            if not j.ngpus:
                self._reallocate(j, self.strategy(j.spec.requested_gpus, self.free), None)
        return True

    def _decide(self) -> bool:
        """One scheduling round; returns True when it took the uncontended fast path."""
        self.waiting = 0
        if self._fast_path():
            return True
        cluster = ClusterView(self.cluster.nodes, self.t, tuple(self.finished))
        # a strict FIFO queue of tens of thousands (the Philly trace, overloaded) was viewed, sorted and diffed at
        # every completion, for the few at its head that can start: the others are neither shown nor visited
        window = self.policy.queue_window_gpus(cluster)
        active = queue_window(self.active.values(), self.running, window)
        for j in active:
            if j.ngpus and j.lazy:
                j.sync_lazy(self.t)
        decision = schedule(self.policy, [self._view(j) for j in active], cluster, self.strategy)
        # any change of node map (order included) is a restart; a batch-only resize is not
        moved = {a.job_id for a in decision.actions if not isinstance(a, Resize) or a.moved}
        # Release first, then grant, so that the free-GPU bookkeeping never goes negative midway.
        for j in active:
            if j.spec.id in moved and j.ngpus:
                if j.lazy:
                    j.sync_lazy(self.t)
                self._set_nodes(j, {})
        for j in active:
            a = decision.allocation.jobs.get(j.spec.id)
            batch = a.batch_size if a else None
            if j.spec.id in moved or batch is not None or j.app is not None:
                self._reallocate(j, decision.nodes(j.spec.id), batch, j.spec.id in moved)
        self.waiting = len(self.active) - len(self.running)
        return False


    # --- main loop ------------------------------------------------------------------------------
    def run(self) -> SimResult:
        cfg, jobs = self.cfg, self.jobs
        interval = cfg.interval
        arrivals = 0                         # jobs[:arrivals] have been admitted
        running_trace: list[SimJob] = []
        done = 0
        stable = False                       # the last decision holds until a job arrives or finishes
        while done < len(jobs):
            # Advance everyone holding GPUs over [t, t + step): one interval, or more when nothing can change.
            step = interval
            if stable and not running_trace:
                nxt = jobs[arrivals].spec.submit_time if arrivals < len(jobs) else math.inf
                if self._finish_heap:
                    nxt = min(nxt, self._finish_heap[0][0])
                if nxt < math.inf:
                    step = max(interval, math.ceil((nxt - self.t) / interval - 1e-9) * interval)
            if cfg.horizon is not None:   # never past it: a job finishing after the horizon is unfinished
                step = min(step, cfg.horizon - self.t)
            events = False
            for j in running_trace:
                if j.ensemble is None:
                    j.advance_trace(self.t, step)
                else:
                    left = len(j.ensemble.finish)
                    j.advance_ensemble(self.t, step, share_view(j.nodes, self.cluster))
                    events |= len(j.ensemble.finish) != left   # a member left: the ensemble's demand changed
            self.t += step
            for j in running_trace:
                if j.finish is not None:
                    self._complete(j)
                    done += 1
                    events = True
            heap = self._finish_heap
            while heap and heap[0][0] <= self.t + 1e-9:
                fin, ver, idx = heapq.heappop(heap)
                j = self._by_idx[idx]
                if ver != j.version or j.finish is not None:
                    continue
                j.sync_lazy(fin)
                j.finish = fin
                self._complete(j)
                done += 1
                events = True
            arrived = False
            while arrivals < len(jobs) and jobs[arrivals].spec.submit_time <= self.t:
                self._admit(jobs[arrivals])
                arrivals += 1
                arrived = True
            # under strict FIFO a job arriving behind a waiting one changes nothing: an overloaded cluster's queue
            # of thousands was sorted and diffed again at every arrival (full Philly on 512 GPUs: most of 52 min)
            events |= arrived and not (self.waiting and self.policy.arrival_queues_behind)
            if self.active:
                if events or not stable:
                    stable = self._decide() or self.policy.event_driven
            else:
                stable = True
            running_trace = ([j for j in self.active.values() if not j.lazy and j.ngpus]
                             if self.stepped_active else [])
            self.timeline.append((self.t, self.used, len(self.active), done))
            if self.on_progress:
                self.on_progress(self.t, done, len(jobs))
            if cfg.horizon is not None and self.t >= cfg.horizon:
                break
        for j in self.active.values():
            if j.lazy:
                j.sync_lazy(self.t)
        return SimResult.from_jobs(self.policy.name, self.jobs, self.timeline, self.total_gpus, self.t, cfg.horizon)


def validate_at_submit(policy: Policy, jobs, view_of: Callable[[SimJob], JobView], cluster: ClusterView) -> None:
    """Ask the policy (when it can) whether each job is feasible, so a bad batch range is a one-line UserError
    before any simulated time passes, never a crash or a silently starved job mid-run."""
    if type(policy).validate is Policy.validate:   # the default accepts every job: skip the snapshots
        return
    for j in jobs:
        policy.validate(view_of(j), cluster)


def queue_window(active: Iterable[SimJob], running: Mapping[int, SimJob], gpus: int | None) -> list[SimJob]:
    """The ``running`` jobs, and the queued ones of ``active`` (in submission order) asking for at most ``gpus``
    together and the next (``Policy.queue_window_gpus``; None: every one), in submission order; an ensemble's ask
    counts as none (it may ask for fewer than its spec: kept)."""
    if gpus is None:
        return list(active)
    queued, asked = [], 0
    for j in active:
        if asked > gpus:
            break
        if not j.ngpus:
            queued.append(j)
            asked += j.spec.requested_gpus if j.ensemble is None else 0
    return sorted([*running.values(), *queued], key=lambda j: (j.spec.submit_time, j.idx))   # as admitted


def run(workload, policy: str | Policy, cluster: ClusterView | None = None, *, nodes: int = 16,
        gpus_per_node: int = 4, interval: float = 60.0, restart_penalty: float = 30.0, remaining: str = "oracle",
        seed: int = 0, gpu_speed: Mapping[str, float] | None = None,
        horizon: float | None = None, policy_args: Mapping | None = None,
        on_progress: Callable[[float, int, int], None] | None = None, **config) -> SimResult:
    """Simulate ``workload`` (a path, a ``Workload`` or ``WorkloadJob`` list) under ``policy`` (a registered name or an
    object) on ``cluster`` (default: ``nodes`` × ``gpus_per_node`` identical GPUs)."""
    from dlsched.sim.workload import read_workload

    if isinstance(workload, (str, bytes)) or hasattr(workload, "__fspath__"):
        workload = read_workload(workload)
    if isinstance(policy, str):
        policy = make_policy(policy, **dict(policy_args or {}))
    cluster = cluster or ClusterView.homogeneous(nodes, gpus_per_node)
    cfg = SimConfig(interval=interval, restart_penalty=restart_penalty, remaining=remaining, seed=seed, gpu_speed=dict(gpu_speed or {}), horizon=horizon,
                    **config)
    return Simulator(workload, policy, cluster, cfg, on_progress).run()
