"""The live driver of the scheduling loop: admit -> one round (``dlsched.round``, shared with the simulator and
the forecast) -> act -> observe -> refit.

The simulator drives the same ``policy.decide`` on a virtual clock; here time is the wall clock, progress
comes from real workers through the backend, and every state change goes through the store first, so a
SIGKILL between any two steps is recovered by ``recover()`` on the next start: jobs whose coordinator is
still alive are re-attached, the others are re-queued and resume from their checkpoint when restarted.
"""
from __future__ import annotations

import collections
import copy
import dataclasses
import logging
import statistics
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping

from dlsched.backends.base import Backend, Launch, read_progress
from dlsched.policy.base import ClusterView, JobView, NodeView, Policy, ThroughputModel, make_policy
from dlsched.policy.placement import consolidated
from dlsched.round import Action, Move, Preempt, Resize, Start, schedule
from dlsched.service import refit
from dlsched.service.forecast import RESIZE_S, START_S, Forecast, forecast
from dlsched.service.nodes import LOST, NodeWatch
from dlsched.service.store import (ACTIVE, CANCELLED, FAILED, FINISHED, QUEUED, RESCALING, RUNNING, JobRecord,
                                   Store)
from dlsched.errors import UserError
from dlsched.spec import ClusterSpec, JobSpec, SpecError

log = logging.getLogger("dlsched.service")

INLINE_FORECAST_S = 0.05   # a forecast that took less is remade inside the round, with the rates just refitted
SPEED_REFIT_S = 30.0       # a job's speed model is refitted on a new (workers, batch), else at most this often
FORECAST_EVERY_S = 2.0     # wall seconds between policy forecasts, at least twice what the last one took
FORECAST_BUDGET_S = 2.0    # wall time one forecast may take (its own thread, never in a scheduling round);
                           # jobs it did not reach show no forecast finish


@dataclass(frozen=True)
class RoundStats:
    now: float
    decide_s: float                # snapshots + policy + placement + diff (what the latency target is about)
    act_s: float                   # backend actions
    observe_s: float
    active_jobs: int
    actions: tuple[Action, ...]
    predict_s: float = 0.0         # writing the round's predictions (the forecast runs on its own thread)


def cluster_view(spec: ClusterSpec, now: float) -> ClusterView:
    return ClusterView(tuple(NodeView(n.name, n.gpus, n.gpu_type, n.cpus) for n in spec.nodes), now)


class LiveLoop:
    """One scheduler instance over a store and a backend. ``round()`` is one pass of the loop."""

    def __init__(self, store: Store, backend: Backend, cluster: ClusterSpec, state_dir: str | Path,
                 policy: Policy | None = None, clock=time.time, forecast_every_s: float = FORECAST_EVERY_S):
        self.store = store
        self.backend = backend
        self.cluster = cluster
        self.state_dir = Path(state_dir)
        self.policy = policy or make_policy(cluster.policy, **dict(cluster.policy_args))
        # the forecast thread gets its own instance: policies keep caches that are not meant to be shared
        self._forecast_policy = copy.deepcopy(self.policy)
        self.clock = clock
        self.capacity = {n.name: n.gpus for n in cluster.nodes}
        self.gpu_types = tuple(sorted({n.gpu_type for n in cluster.nodes}))
        self.nodes = NodeWatch(cluster_view(cluster, 0.0).nodes)
        self._speeds: dict[int, ThroughputModel] = {}
        self._speed_fits: dict[int, tuple[frozenset, float]] = {}   # job -> (configurations seen, when) of its fit
        self._seen_progress: dict[int, int] = {}
        self._views: dict[int, tuple] = {}
        self._last_now: float | None = None
        self._pending: dict[int, tuple] = {}              # refits of this round: (time, Prediction)
        # how long a (re)start and a resize really take here, from the newest ones: the forecast charges them
        self._changed_at: dict[int, tuple[str, float, int]] = {}   # job -> (start|resize, when, workers)
        self._delays: dict[str, collections.deque] = {"start": collections.deque(maxlen=20),
                                                      "resize": collections.deque(maxlen=20)}
        self._rates: dict[int, float] = {}                # observed samples/s per running job
        self._totals: dict[int, float] = {}               # predicted total samples (target-loss jobs)
        self._forecast: Forecast | None = None
        self._forecast_at: float | None = None
        self._forecast_took: float | None = None          # wall seconds of the last forecast
        self._forecast_lock = threading.Lock()
        self.forecast_every_s = forecast_every_s

    def validate(self, spec: JobSpec, source: str = "job spec") -> None:
        """Submit-time check against this cluster and policy, so a job that can never run is refused with one
        line instead of waiting forever (or failing every round): the cluster must hold ``min_gpus``, and a
        policy with a ``validate(job, cluster)`` hook (the elastic ones) must accept its ranges."""
        total = sum(self.capacity.values())
        lo = spec.gpu_range[0]
        if lo > total:
            raise SpecError(f"{source}: field {'min_gpus' if spec.min_gpus else 'gpus'}: needs {lo} GPUs, "
                            f"the cluster has {total}")
        view = JobView(id=spec.name, submit_time=0.0, requested_gpus=spec.gpus, batch_size=spec.batch_size,
                       min_batch_size=spec.min_batch_size, max_batch_size=spec.max_batch_size,
                       max_local_batch=spec.max_local_batch, min_gpus=lo, max_gpus=spec.gpu_range[1],
                       kind=spec.kind, preemptible=spec.preemptible)
        try:
            self.policy.validate(view, cluster_view(self.cluster, 0.0))
        except (UserError, ValueError) as e:
            raise SpecError(f"{source}: policy {self.cluster.policy}: {e}") from None

    def job_dir(self, job_id: int) -> Path:
        return self.state_dir / "jobs" / str(job_id)

    # -- restart -----------------------------------------------------------------------------------
    def recover(self) -> None:
        """Re-attach live coordinators; re-queue the rest (they resume from their checkpoint)."""
        now = self.clock()
        for job in self.store.jobs(states=(RUNNING, RESCALING)):
            d = self.job_dir(job.id)
            if self.backend.attach(job.id, d):
                self.store.event("reattached", job.id, now)
                continue
            self._ingest(job, now)
            res = self.backend.poll(job.id, d)
            if res.state == "finished":
                self.store.transition(job.id, FINISHED, now)
            else:
                self.store.transition(job.id, QUEUED, now, {"reason": "service restart: resume from checkpoint"},
                                      num_gpus=0, placement={})
                self.store.record_allocation(job.id, now, 0, job.batch_size, {})
        self.store.event("service_started", None, now, policy=self.cluster.policy,
                         gpus=sum(self.capacity.values()))

    # -- one round ---------------------------------------------------------------------------------
    def round(self) -> RoundStats:
        now = self.clock()
        t0 = time.perf_counter()
        self.observe(now)
        t1 = time.perf_counter()
        jobs = self.store.jobs(states=ACTIVE)
        self.watch_nodes(now, jobs)
        actions = self.decide(jobs, now)
        t2 = time.perf_counter()
        self.act(actions, {j.id: j for j in jobs}, now)
        t3 = time.perf_counter()
        self.publish_predictions(now)
        return RoundStats(now, t2 - t1, t3 - t2, t1 - t0, len(jobs), tuple(actions), time.perf_counter() - t3)

    def snapshot(self, job: JobRecord) -> JobView:
        """The policy's view of a job; reused while neither the record nor its speed model changed."""
        speed = self._speeds.get(job.id)
        hit = self._views.get(job.id)
        if hit is not None and hit[0] is job and hit[1] is speed:
            return hit[2]
        view = self._make_view(job, speed)
        self._views[job.id] = (job, speed, view)
        return view

    def _make_view(self, job: JobRecord, speed) -> JobView:
        s = job.spec
        lo, hi = s.gpu_range
        blo, bhi = s.min_batch_size, s.max_batch_size
        if job.state == RESCALING:
            # mid-resize the runtime is still moving to the last decision: no further growth until it confirms
            # (a noisy early speed estimate must not bounce it), but it may still shrink
            hi = max(lo, min(hi, job.num_gpus))
        remaining = max(0.0, job.total_samples - job.samples) if job.total_samples else None
        return JobView(
            id=str(job.id), submit_time=job.submit_time, requested_gpus=min(s.gpus, hi), batch_size=s.batch_size,
            min_batch_size=blo, max_batch_size=bhi, max_local_batch=s.max_local_batch,
            max_gpus=hi, min_gpus=lo, attained_service=job.attained_service, run_time=job.run_time,
            placement=job.placement, current_batch_size=job.batch_size, remaining_samples=remaining,
            speed=speed, kind=s.kind, preemptible=s.preemptible,
            attrs={"name": job.name, "elastic": s.elastic, "samples_done": job.samples, "loss": job.last_loss,
                   "state": job.state})

    def watch_nodes(self, now: float, jobs: list[JobRecord]) -> None:
        """Refresh the node table (``dlsched nodes``); a node lost or back is an event."""
        addresses = getattr(self.backend, "addresses", None)   # where a backend knows its nodes' addresses (Ray)
        changes = self.nodes.update(self._cluster_view(now).nodes,
                                    addresses() if addresses else {n.name: "localhost" for n in self.cluster.nodes},
                                    [(j.id, j.placement) for j in jobs if j.num_gpus], now)
        for node, health in changes:
            self.store.event("node_lost" if health == LOST else "node_up", None, now, node=node)

    def _cluster_view(self, now: float) -> ClusterView:
        live = getattr(self.backend, "nodes", None)   # a backend that knows its live nodes (Ray) says so: lost nodes vanish
        return ClusterView(live(), now) if live else cluster_view(self.cluster, now)

    def decide(self, jobs: list[JobRecord], now: float) -> list[Action]:
        """Snapshots -> one round (policy, check, placement: Optimus consolidation) -> the actions to take."""
        eligible = [j for j in jobs if not j.cancel_requested]
        decision = schedule(self.policy, [self.snapshot(j) for j in eligible], self._cluster_view(now), consolidated)
        return list(decision.actions)

    def act(self, actions: list[Action], jobs: Mapping[int, JobRecord], now: float) -> None:
        """Backend actions first (GPUs are freed before they are taken), then every resulting store write in ONE
        transaction. A crash in between leaves coordinators the store does not know about; ``LocalBackend.start``
        adopts a live coordinator of the same job instead of starting a second one, so that is safe."""
        writes = []
        for act in sorted(actions, key=lambda a: self._act_order(a, jobs)):
            job = jobs[int(act.job_id)]
            if isinstance(act, Move):   # same GPUs and batch elsewhere: only the record follows
                self.store.update(job.id, placement=dict(act.nodes))
                continue
            d = self.job_dir(job.id)
            gen = job.generation + 1
            try:
                if isinstance(act, Preempt):
                    self.backend.stop(job.id, d)
                    writes.append((job.id, QUEUED, {"reason": "preempted"}, {"num_gpus": 0, "placement": {}}))
                elif isinstance(act, Start):
                    self.backend.start(Launch(job.id, job.spec, d, act.num_gpus, act.batch_size, act.nodes, gen))
                    self._changed_at[job.id] = ("start", now, act.num_gpus)
                    writes.append((job.id, RUNNING, {"gpus": act.num_gpus, "batch_size": act.batch_size},
                                   {"num_gpus": act.num_gpus, "placement": act.nodes, "batch_size": act.batch_size,
                                    "generation": gen, "job_dir": str(d)}))
                else:
                    self.backend.resize(Launch(job.id, job.spec, d, act.num_gpus, act.batch_size, act.nodes, gen))
                    self._changed_at[job.id] = ("resize", now, act.num_gpus)
                    writes.append((job.id, RESCALING,
                                   {"gpus_from": job.num_gpus, "gpus": act.num_gpus, "batch_size": act.batch_size},
                                   {"num_gpus": act.num_gpus, "placement": act.nodes, "batch_size": act.batch_size,
                                    "generation": gen}))
            except Exception as e:   # one job's launch failure must not stop the service
                kind = type(act).__name__.lower()
                log.exception("job %s: %s failed", job.id, kind)
                self.backend.stop(job.id, d)
                writes.append((job.id, FAILED, {"reason": f"{kind} failed: {e}"}, {"error": str(e)[:500]}))
        with self.store.batch():
            for job_id, state, detail, fields in writes:
                self.store.transition(job_id, state, now, detail, **fields)
                rec_gpus = fields.get("num_gpus", 0) if state != FAILED else 0
                self.store.record_allocation(job_id, now, rec_gpus, fields.get("batch_size", jobs[job_id].batch_size),
                                             dict(fields.get("placement", {})))

    @staticmethod
    def _act_order(act: Action, jobs: Mapping[int, JobRecord]) -> tuple[int, int]:
        """Preemptions, then resizes shrinking first (a grow takes GPU slots another job's shrink gives back),
        then starts."""
        if isinstance(act, Resize):
            return 1, act.num_gpus - jobs[int(act.job_id)].num_gpus
        return {Move: 0, Preempt: 0, Start: 2}[type(act)], 0

    # -- observation -------------------------------------------------------------------------------
    def observe(self, now: float) -> None:
        """Cancellations, progress ingestion, process state, GPU-service accounting, prediction refit."""
        dt = 0.0 if self._last_now is None else max(0.0, now - self._last_now)
        self._last_now = now
        running = self.store.jobs(states=(RUNNING, RESCALING))
        for job in [j for j in running if j.cancel_requested]:
            self.backend.stop(job.id, self.job_dir(job.id))      # slow (grace period): outside any transaction
            with self.store.batch():
                self._ingest(job, now)
                self.store.transition(job.id, CANCELLED, now)
                self.store.record_allocation(job.id, now, 0, job.batch_size, {})
        with self.store.batch():     # one fsync for the whole pass, however many jobs run
            for job in [j for j in running if not j.cancel_requested]:
                self._observe_one(job, now, dt)

    def _observe_one(self, job: JobRecord, now: float, dt: float) -> None:
        d = self.job_dir(job.id)
        job = self._ingest(job, now)
        self.store.update(job.id, attained_service=job.attained_service + dt * job.num_gpus,
                          run_time=job.run_time + dt)
        res = self.backend.poll(job.id, d)
        if res.state == "finished":
            self.store.transition(job.id, FINISHED, now)
        elif res.state == "failed":
            self.store.transition(job.id, FAILED, now, {"error": res.error}, error=(res.error or "")[:500])
        elif res.state == "gone":
            self.store.transition(job.id, QUEUED, now, {"reason": "coordinator vanished: resume from checkpoint"},
                                  num_gpus=0, placement={})
        else:
            if res.nodes is not None:   # workers lost with their node: the job trains on the rest; re-plan
                self._shrunk_by_loss(job, dict(res.nodes), now)
            return
        self.store.record_allocation(job.id, now, 0, job.batch_size, {})
        for per_job in (self._speeds, self._speed_fits, self._views, self._rates, self._totals, self._changed_at):
            per_job.pop(job.id, None)

    def _shrunk_by_loss(self, job: JobRecord, nodes: dict[str, int], now: float) -> None:
        gpus = sum(nodes.values())
        self.store.update(job.id, num_gpus=gpus, placement=nodes)
        self.store.record_allocation(job.id, now, gpus, job.batch_size, nodes)
        self.store.event("workers_lost", job.id, now, gpus_from=job.num_gpus, gpus=gpus,
                         lost={n: k - nodes.get(n, 0) for n, k in job.placement.items() if k > nodes.get(n, 0)})
        self._views.pop(job.id, None)

    def _ingest(self, job: JobRecord, now: float) -> JobRecord:
        records, offset = read_progress(self.job_dir(job.id), job.progress_offset)
        if not records:
            return job
        samples = [r for r in records if "event" not in r]
        fields: dict = {}
        changed = self._changed_at.get(job.id)
        if changed:
            first = next((r for r in samples if r.get("workers") == changed[2] and r.get("time")), None)
            if first is not None:
                self._delays[changed[0]].append(max(0.0, first["time"] - changed[1]))
                del self._changed_at[job.id]
        if samples:
            last = samples[-1]
            fields = {"samples": float(last.get("samples") or job.samples),
                      "last_loss": last.get("loss"), "samples_per_s": last.get("samples_per_s")}
            if last.get("total_samples"):
                fields["total_samples"] = float(last["total_samples"])
            if job.state == RESCALING and last.get("workers") == job.num_gpus:
                self.store.transition(job.id, RUNNING, now, {"reason": "resize done", "workers": job.num_gpus})
        self.store.add_progress(job.id, samples, offset, **fields)
        for r in records:
            if "event" in r:
                self.store.event(f"job_{r['event']}", job.id, now, **{k: v for k, v in r.items() if k != "event"})
        job = self.store.get(job.id)
        self._refit(job, now)
        return job

    def _refit(self, job: JobRecord, now: float) -> None:
        prog = self.store.progress(job.id)
        if len(prog) == self._seen_progress.get(job.id):
            return
        self._seen_progress[job.id] = len(prog)
        target = job.spec.params.get("target_loss")
        configs = frozenset((p.get("workers"), p.get("batch_size")) for p in prog[-refit.RECENT:])
        last = self._speed_fits.get(job.id)
        refit_speed = last is None or last[0] != configs or now - last[1] >= SPEED_REFIT_S
        pred, speed = refit.predict(prog, now, job.num_gpus, job.batch_size, job.total_samples, job.samples,
                                    target_loss=float(target) if isinstance(target, (int, float)) else None,
                                    gpu_types=self.gpu_types, max_local_batch=job.spec.max_local_batch,
                                    speed=self._speeds.get(job.id), refit_speed=refit_speed)
        if refit_speed:
            self._speed_fits[job.id] = (configs, now)
        if speed is not None:
            self._speeds[job.id] = speed
        if pred.rate:
            self._rates[job.id] = pred.rate
        if pred.total_samples:
            self._totals[job.id] = pred.total_samples
        self._pending[job.id] = (now, pred)

    # -- predictions -------------------------------------------------------------------------------
    def refresh_forecast(self, now: float, budget_s: float | None = FORECAST_BUDGET_S) -> Forecast:
        """Roll the policy forward from the store's current state (``service/forecast.py``) and store it as the
        current forecast. Runs on its own thread (``LoopThread``), and inline when it is cheap (see
        ``publish_predictions``); one at a time: it reads the loop's models, never its caches."""
        with self._forecast_lock:
            return self._refresh_forecast(now, budget_s)

    def _refresh_forecast(self, now: float, budget_s: float | None) -> Forecast:
        t0 = time.perf_counter()
        speeds, rates, totals = dict(self._speeds), dict(self._rates), dict(self._totals)
        views = []
        for j in self.store.jobs(states=ACTIVE):
            if j.cancel_requested:
                continue
            v = self._make_view(j, speeds.get(j.id))
            if v.remaining_samples is None and j.id in totals:
                v = dataclasses.replace(v, remaining_samples=max(0.0, totals[j.id] - j.samples))
            views.append(v)
        f = forecast(views, self._cluster_view(now), self._forecast_policy, now,
                     observed={str(k): r for k, r in rates.items()}, step_s=max(10.0, 5 * self.cluster.interval_s),
                     budget_s=budget_s, start_s=self.typical_delay("start", START_S),
                     resize_s=self.typical_delay("resize", RESIZE_S))
        self.store.set_forecast(now, {int(k): (f.start[k], f.finish[k]) for k in f.finish})
        self._forecast, self._forecast_at = f, now
        self._forecast_took = time.perf_counter() - t0
        return f

    def typical_delay(self, kind: str, default: float) -> float:
        """Median seconds from a start/resize decision to the first step at the new size, over the newest ones
        measured here (``default`` until one is): what the forecast charges a job for changing allocation."""
        seen = list(self._delays[kind])
        return float(statistics.median(seen)) if seen else default

    def publish_predictions(self, now: float) -> None:
        """Write this round's refits, each with what the newest policy forecast said of the job (the store keeps
        the current forecast of every active job apart; the refits keep what was forecast at the time).

        Where the last forecast was cheap (a small queue), it is remade here first, so it uses the rates just
        refitted: one made a period earlier lags a job whose speed changes (a demo job sped up as others
        finished, and the lagging forecast was off by twice as much). A large queue keeps the forecast thread's."""
        if (self._pending and self._forecast_took is not None and self._forecast_took < INLINE_FORECAST_S
                and self._forecast_lock.acquire(blocking=False)):
            try:
                self._refresh_forecast(now, budget_s=2 * INLINE_FORECAST_S)
            except Exception:
                log.exception("policy forecast failed")
            finally:
                self._forecast_lock.release()
        f, at = self._forecast, self._forecast_at
        with self.store.batch():
            for job_id, (t, pred) in self._pending.items():
                fields = {}
                if f is not None and str(job_id) in f.finish:
                    fields = {"forecast_time": at, "predicted_start": f.start[str(job_id)],
                              "policy_finish": f.finish[str(job_id)]}
                self.store.add_prediction(job_id, t, pred.fraction_done, pred.total_samples,
                                          pred.remaining_s, pred.predicted_finish, pred.loss_fit, **fields)
        self._pending.clear()


class LoopThread(threading.Thread):
    """Runs ``round()`` every ``interval_s`` until stopped; a failing round is logged, never fatal."""

    def __init__(self, loop: LiveLoop, interval_s: float):
        super().__init__(name="dlsched-loop", daemon=True)
        self.loop = loop
        self.interval_s = interval_s
        self.stopping = threading.Event()
        self.rounds = 0
        self.last_stats: RoundStats | None = None

    def run(self) -> None:
        try:
            self.loop.recover()
        except Exception:
            log.exception("recovery after restart failed; scheduling continues with the store as it is")
        forecaster = threading.Thread(target=self._forecasts, name="dlsched-forecast", daemon=True)
        forecaster.start()
        while not self.stopping.is_set():
            t0 = time.monotonic()
            try:
                self.last_stats = self.loop.round()
                self.rounds += 1
            except Exception:
                log.exception("scheduling round failed")
            self.stopping.wait(max(0.0, self.interval_s - (time.monotonic() - t0)))
        forecaster.join(timeout=FORECAST_BUDGET_S + 5)
        self.loop.store.close()

    def _forecasts(self) -> None:
        """The policy forecast every ``forecast_every_s``, or twice as long as the last one took, so a large
        queue's forecast takes at most a third of a core from the scheduler; a failure is logged, never fatal."""
        took = 0.0
        while not self.stopping.wait(max(self.loop.forecast_every_s, 2 * took)):
            t0 = time.perf_counter()
            try:
                self.loop.refresh_forecast(self.loop.clock())
            except Exception:
                log.exception("policy forecast failed")
            took = time.perf_counter() - t0
        self.loop.store.close()

    def stop(self) -> None:
        self.stopping.set()
