"""The virtual-clock driver: every ``interval`` seconds it snapshots jobs and cluster, asks a policy for an
``Allocation``, places it, and advances every job's progress to the next decision.

Semantics follow the Pollux OSDI'21 artifact simulator (petuum/adaptdl osdi21-artifact, simulator/simulator.py)
so that our average JCTs can be compared with its published ones:

* decisions at t = interval, 2·interval, …; a job submitted at s is first seen at the first decision >= s;
* a job whose node map changes pays ``restart_penalty`` seconds (30) of no progress, also on its first start;
  GPUs are charged to it (attained service) while it restarts;
* progress of a trace job = statistical gain / seconds per step; epoch boundaries are crossed at whole seconds
  (the peer rounds the time to reach one); the job completes at the end of its last epoch, mid-interval, and its
  GPUs stay idle until the next decision;
* JCT = completion time − submission time.

Duration-driven jobs (Philly, Gavel) are advanced lazily: their finish time is known from their rate, so stretches
of time in which nothing arrives or finishes are skipped when the policy says its decision only changes on such
events (``Policy.event_driven``) and every active job already has its request.
"""
from __future__ import annotations

import heapq
import math
from dataclasses import dataclass, field
from typing import Callable, Iterable, Mapping

import numpy as np

from dlsched.errors import UserError
from dlsched.placement import PlacementError, most_free_first, place
from dlsched.policy.base import Allocation, ClusterView, JobView, NodeView, Policy, make_policy
from dlsched.sim.metrics import SimResult
from dlsched.sim.traces import LinearThroughput, TraceApp, TraceThroughput, load_app
from dlsched.sim.workload import JobSpec, Workload


@dataclass(frozen=True)
class SimConfig:
    """Knobs of one run. ``remaining``: what policies are told of a job's remaining work — ``"oracle"`` (exact),
    ``"predicted"`` (oracle × a seeded log-normal error of ``prediction_error``) or ``"none"``."""

    interval: float = 60.0
    restart_penalty: float = 30.0
    remaining: str = "oracle"
    prediction_error: float = 0.0
    seed: int = 0
    gpu_speed: Mapping[str, float] = field(default_factory=dict)   # GPU type -> speed factor (default 1.0)
    horizon: float | None = None            # stop at this time (jobs unfinished then are reported as such)
    optimus_peer_estimates: bool = True     # 1-GPU estimates accumulate twice, as the peer's Optimus assumes


class _Job:
    """Mutable simulation state of one job (internal; policies only ever see ``JobView``)."""

    __slots__ = ("spec", "idx", "app", "batch", "nodes", "ptuple", "split", "epoch", "progress", "rescale_left",
                 "attained", "run_time", "finish", "start", "restarts", "work_left", "last_t", "version",
                 "noise", "max_gpus")

    def __init__(self, spec: JobSpec, idx: int, app: TraceApp | None, noise: float):
        self.spec, self.idx, self.app = spec, idx, app
        self.batch = spec.batch_size
        self.nodes: dict[str, int] = {}
        self.ptuple: tuple[int, ...] = ()
        self.split = None
        self.epoch = 0
        self.progress = 0.0
        self.rescale_left = 0.0
        self.attained = 0.0
        self.run_time = 0.0
        self.finish: float | None = None
        self.start: float | None = None
        self.restarts = -1
        self.work_left = spec.duration if app is None else None
        self.last_t = 0.0
        self.version = 0
        self.noise = noise
        self.max_gpus = None
        if app is not None:
            by_batch = (spec.batch_size or app.max_batch_size) // app.min_local_bsz
            self.max_gpus = max(1, min(by_batch, app.max_gpus or by_batch))

    @property
    def gpus(self) -> int:
        return sum(self.nodes.values())


class Simulator:
    """One run of one policy over one workload on one cluster. Use ``run()`` unless stepping by hand."""

    def __init__(self, workload: Workload | Iterable[JobSpec], policy: Policy, cluster: ClusterView,
                 config: SimConfig = SimConfig(), on_progress: Callable[[float, int, int], None] | None = None):
        if config.interval <= 0:
            raise UserError(f"interval must be > 0 seconds, got {config.interval}")
        specs = workload.jobs if isinstance(workload, Workload) else list(workload)
        self.policy, self.cluster, self.cfg = policy, cluster, config
        self.on_progress = on_progress
        rng = np.random.default_rng(config.seed)
        noise = (np.exp(rng.normal(0.0, config.prediction_error, len(specs)))
                 if config.remaining == "predicted" and config.prediction_error > 0 else np.ones(len(specs)))
        self.jobs = [_Job(s, i, load_app(s.app) if s.app else None, float(noise[i])) for i, s in enumerate(specs)]
        self.jobs.sort(key=lambda j: j.spec.submit_time)
        for j in self.jobs:
            if j.app is None and not j.spec.duration:
                raise UserError(f"job {j.spec.id}: neither an application nor a duration")
            if j.spec.requested_gpus > cluster.total_gpus:
                raise UserError(f"job {j.spec.id}: requests {j.spec.requested_gpus} GPUs, the cluster has {cluster.total_gpus}")
        self.node_speed = {n.name: float(config.gpu_speed.get(n.gpu_type, 1.0)) for n in cluster.nodes}
        self.gpus_per_node = max(n.num_gpus for n in cluster.nodes)
        self.event_driven = bool(getattr(policy, "event_driven", False))
        self.rigid = bool(getattr(policy, "rigid", False))
        self.t = 0.0
        self.timeline: list[tuple[float, int, int, int]] = []   # (time, GPUs allocated, running, waiting)
        self._finish_heap: list[tuple[float, int, int]] = []      # lazy jobs: (finish time, version, index)

    # --- progress -------------------------------------------------------------------------------
    def _speed(self, job: _Job) -> float:
        return min((self.node_speed[n] for n in job.nodes), default=1.0)

    def _advance_trace(self, job: _Job, seconds: float) -> None:
        """The peer's Job.step: restart delay first, then epochs at the current goodput."""
        gpus = job.gpus
        delay = min(job.rescale_left, seconds)
        cur = self.t + delay
        job.attained += delay * gpus
        job.rescale_left -= delay
        seconds -= delay
        app, last = job.app, job.app.max_epochs - 1
        factor = self._speed(job)
        n = len(job.ptuple) and sum(job.ptuple)
        while seconds > 0 and job.finish is None:
            split = job.split
            batch = split.global_batch(n)
            step, sync = app.step_time(job.ptuple, split.atomic)
            goodput = app.gain(batch, job.epoch) / (step + (step - sync) * split.accum_steps) * factor
            nxt = app.epoch_end[job.epoch + 1]
            if job.progress + goodput * seconds < nxt:
                job.progress += goodput * seconds
                job.attained += seconds * gpus
                seconds = 0
            else:
                job.epoch += 1
                delta = round(float((nxt - job.progress) / goodput))
                if job.epoch > last:
                    job.finish = cur + delta
                job.progress = nxt
                cur += delta
                job.attained += delta * gpus
                seconds -= delta

    def _rate(self, job: _Job) -> float:
        return min(job.gpus, job.spec.requested_gpus) / job.spec.requested_gpus * self._speed(job)

    def _sync_lazy(self, job: _Job, t: float) -> None:
        """Bring a duration job's work/service up to time t."""
        dt = t - job.last_t
        if dt > 0 and job.nodes and job.finish is None:
            gpus = job.gpus
            delay = min(job.rescale_left, dt)
            job.rescale_left -= delay
            job.work_left = max(0.0, job.work_left - (dt - delay) * self._rate(job))
            job.attained += dt * gpus
        job.last_t = t

    def _schedule_finish(self, job: _Job) -> None:
        job.version += 1
        if job.nodes:
            fin = job.last_t + job.rescale_left + job.work_left / self._rate(job)
            heapq.heappush(self._finish_heap, (fin, job.version, job.idx))

    # --- snapshots ------------------------------------------------------------------------------
    def _remaining(self, job: _Job) -> float | None:
        mode = self.cfg.remaining
        if mode == "none":
            return None
        if job.app is None:
            left = job.work_left
        else:
            left = job.app.remaining_iterations(job.batch, job.epoch) * job.batch
        return left * job.noise

    def _view(self, job: _Job) -> JobView:
        app = job.app
        if app is not None:
            speed = TraceThroughput(app, job.epoch, self.gpus_per_node, self.cfg.optimus_peer_estimates)
            attrs = {"app": app.name, "epoch": job.epoch, "min_local_batch": app.min_local_bsz,
                     "progress": job.progress, "target_progress": app.target_progress}
            return JobView(
                id=job.spec.id, submit_time=job.spec.submit_time, requested_gpus=job.spec.requested_gpus,
                batch_size=job.spec.batch_size, min_batch_size=app.init_batch_size, max_batch_size=app.max_batch_size,
                max_local_batch=app.max_local_bsz, max_gpus=job.max_gpus, attained_service=job.attained,
                run_time=job.run_time, placement=job.nodes, current_batch_size=job.batch,
                remaining_samples=self._remaining(job), speed=speed, attrs=attrs)
        return JobView(
            id=job.spec.id, submit_time=job.spec.submit_time, requested_gpus=job.spec.requested_gpus,
            max_gpus=job.spec.requested_gpus, attained_service=job.attained, run_time=job.run_time,
            placement=job.nodes, remaining_samples=self._remaining(job),
            speed=LinearThroughput(job.spec.requested_gpus), attrs={"priority": job.spec.priority})

    # --- decisions ------------------------------------------------------------------------------
    def _reallocate(self, job: _Job, nodes: Mapping[str, int], batch: int | None) -> None:
        if job.app is None:
            self._sync_lazy(job, self.t)
        if batch is not None and job.app is not None:
            job.batch = int(min(max(batch, job.app.init_batch_size), job.app.max_batch_size))
        changed = list(nodes.items()) != list(job.nodes.items())
        if changed:
            job.nodes = dict(nodes)
            job.ptuple = tuple(nodes.values())
            if nodes:
                job.rescale_left = self.cfg.restart_penalty
                job.restarts += 1
                if job.start is None:
                    job.start = self.t
        if job.app is not None and job.nodes:
            job.split = job.app.split_batch(job.batch, sum(job.ptuple))
        if job.app is None and changed:
            self._schedule_finish(job)

    def _fast_allocation(self, active: list[_Job]) -> dict[str, dict[str, int]] | None:
        """Rigid policies give everyone their request when all requests fit: skip the policy call then."""
        if not self.rigid or any(j.app is not None for j in active):
            return None      # trace jobs always go through the policy: its placement order is part of fidelity
        if sum(j.spec.requested_gpus for j in active) > self.cluster.total_gpus:
            return None
        free = {n.name: n.num_gpus for n in self.cluster.nodes}
        out = {}
        for j in active:
            if j.gpus == j.spec.requested_gpus:
                out[j.spec.id] = j.nodes
                for n, k in j.nodes.items():
                    free[n] -= k
        for j in active:
            if j.spec.id not in out:
                nodes = most_free_first(j.spec.requested_gpus, free)
                for n, k in nodes.items():
                    free[n] -= k
                out[j.spec.id] = nodes
        return out

    def _decide(self, active: list[_Job]) -> bool:
        """One scheduling round; returns True when it took the uncontended fast path."""
        nodes_by_job = self._fast_allocation(active)
        batches: dict[str, int | None] = {}
        fast = nodes_by_job is not None
        if not fast:
            cluster = ClusterView(self.cluster.nodes, self.t)
            views = tuple(self._view(j) for j in active)
            alloc = self.policy.decide(views, cluster)
            known = {j.spec.id for j in active}
            unknown = [k for k in alloc.jobs if k not in known]
            if unknown:
                raise ValueError(f"policy {self.policy.name!r} allocated unknown/inactive jobs {unknown[:3]}")
            if alloc.total_gpus > self.cluster.total_gpus:
                raise ValueError(f"policy {self.policy.name!r} allocated {alloc.total_gpus} GPUs of {self.cluster.total_gpus}")
            try:
                nodes_by_job = place(alloc, cluster, {j.spec.id: j.nodes for j in active if j.nodes})
            except PlacementError as e:
                raise ValueError(f"policy {self.policy.name!r}: {e}") from None
            batches = {k: a.batch_size for k, a in alloc.jobs.items()}
        for j in active:
            self._reallocate(j, nodes_by_job.get(j.spec.id, {}), batches.get(j.spec.id))
        return fast

    # --- main loop ------------------------------------------------------------------------------
    def run(self) -> SimResult:
        cfg, jobs = self.cfg, self.jobs
        interval = cfg.interval
        arrivals = 0                         # jobs[:arrivals] have been admitted
        active: list[_Job] = []
        running_trace: list[_Job] = []
        done = 0
        stable = False                       # last decision is known to hold until the next event
        while done < len(jobs):
            # Advance everyone holding GPUs over [t, t + interval) — or further when nothing can change.
            step = interval
            if stable and not running_trace:
                nxt = math.inf
                if arrivals < len(jobs):
                    nxt = jobs[arrivals].spec.submit_time
                if self._finish_heap:
                    nxt = min(nxt, self._finish_heap[0][0])
                if nxt < math.inf:
                    step = max(interval, math.ceil((nxt - self.t) / interval - 1e-9) * interval)
            if cfg.horizon is not None:
                step = min(step, max(interval, cfg.horizon - self.t))
            for j in running_trace:
                self._advance_trace(j, step)
            for j in active:
                if j.nodes:
                    j.run_time += step
            self.t += step
            # Lazy (duration) jobs finishing by now.
            heap = self._finish_heap
            while heap and heap[0][0] <= self.t + 1e-9:
                fin, ver, idx = heapq.heappop(heap)
                j = self._by_idx(idx)
                if ver != j.version or j.finish is not None:
                    continue
                self._sync_lazy(j, fin)
                j.finish = fin
            # Admit arrivals.
            while arrivals < len(jobs) and jobs[arrivals].spec.submit_time <= self.t:
                active.append(jobs[arrivals])
                arrivals += 1
            finished = [j for j in active if j.finish is not None]
            if finished:
                done += len(finished)
                for j in finished:
                    j.nodes, j.ptuple = {}, ()
                active = [j for j in active if j.finish is None]
            if active:
                for j in active:
                    if j.app is None:
                        self._sync_lazy(j, self.t)
                stable = self._decide(active) or self.event_driven
            else:
                stable = True
            running_trace = [j for j in active if j.app is not None and j.nodes]
            used = sum(j.gpus for j in active)
            self.timeline.append((self.t, used, sum(1 for j in active if j.nodes), sum(1 for j in active if not j.nodes)))
            if self.on_progress:
                self.on_progress(self.t, done, len(jobs))
            if cfg.horizon is not None and self.t >= cfg.horizon:
                break
        return SimResult.from_jobs(self.policy.name, self.jobs, self.timeline, self.cluster.total_gpus, self.t,
                                   cfg.horizon)

    def _by_idx(self, idx: int) -> _Job:
        if not hasattr(self, "_index"):
            self._index = {j.idx: j for j in self.jobs}
        return self._index[idx]


def run(workload, policy: str | Policy, cluster: ClusterView | None = None, *, nodes: int = 16,
        gpus_per_node: int = 4, interval: float = 60.0, restart_penalty: float = 30.0, remaining: str = "oracle",
        prediction_error: float = 0.0, seed: int = 0, gpu_speed: Mapping[str, float] | None = None,
        horizon: float | None = None, policy_args: Mapping | None = None,
        on_progress: Callable[[float, int, int], None] | None = None, **config) -> SimResult:
    """Simulate ``workload`` (a path, a ``Workload`` or ``JobSpec`` list) under ``policy`` (a registered name or an
    object) on ``cluster`` (default: ``nodes`` × ``gpus_per_node`` identical GPUs)."""
    from dlsched.sim.workload import read_workload

    if isinstance(workload, (str, bytes)) or hasattr(workload, "__fspath__"):
        workload = read_workload(workload)
    if isinstance(policy, str):
        policy = make_policy(policy, **dict(policy_args or {}))
    cluster = cluster or ClusterView.homogeneous(nodes, gpus_per_node)
    cfg = SimConfig(interval=interval, restart_penalty=restart_penalty, remaining=remaining,
                    prediction_error=prediction_error, seed=seed, gpu_speed=dict(gpu_speed or {}), horizon=horizon,
                    **config)
    return Simulator(workload, policy, cluster, cfg, on_progress).run()
