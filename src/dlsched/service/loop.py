"""The live driver of the scheduling loop: observe -> one round (``dlsched.round``, shared with the simulator and
the forecast) -> act -> publish predictions. Time is the wall clock, progress comes from real workers through the
backend, and every state change goes through the store first (``service/recovery.py`` picks up after a crash).
"""
from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator, Mapping

from prometheus_client import Histogram

from dlsched.backends.base import Backend, Launch, PollResult, read_progress
from dlsched.errors import UserError
from dlsched.policy.base import ClusterView, JobView, NodeView, Policy, make_policy
from dlsched.policy.placement import consolidated
from dlsched.round import Action, Move, Preempt, Resize, Start, schedule
from dlsched.service import recovery
from dlsched.service.abandoned_resize import ResizeNotices, return_to_held
from dlsched.service.accounting import RoundGap, counted_to_end, since_counted
from dlsched.service.coordinator_loss import resume_or_fail
from dlsched.service.ensemble_view import ensemble_view_of
from dlsched.service.failed_actions import after_failed_action
from dlsched.service.failure_log import RepeatedFailures
from dlsched.service.forecast import RESIZE_S
from dlsched.service.forecaster import FORECAST_BUDGET_S, FORECAST_EVERY_S, Forecaster
from dlsched.service.job_events import JobEvents
from dlsched.service.job_folders import job_folder
from dlsched.service.job_models import JobModels
from dlsched.service.member_losses import MemberLosses
from dlsched.service.nodes import LOST, NodeWatch
from dlsched.service.off_cluster import HeldOut
from dlsched.service.resize_backoff import ResizeBackoff
from dlsched.service.resize_deadline import ResizeDeadline
from dlsched.service.round_writes import preempt_write, record_round, resize_write, start_write, stopped_finished
from dlsched.service.slot_holds import (answers, clear_of_holds, extra_slots, held_after, in_slots, release_confirmed,
                                        released, waits_for_hold, without_held)
from dlsched.service.progress_segments import SegmentRetention
from dlsched.service.retention import Retention
from dlsched.service.stalls import StallWatch
from dlsched.service.store import (ACTIVE, CANCELLED, FAILED, FINISHED, RESCALING, RUNNING, JobRecord,
                                   Store)
from dlsched.service.target_events import TargetReached
from dlsched.spec import ClusterSpec, JobSpec, SpecError
from dlsched.train.files import read_lr_plan

log = logging.getLogger("dlsched.service")



@dataclass(frozen=True)
class RoundStats:
    now: float
    decide_s: float                # snapshots + policy + placement + diff (what the latency target is about)
    act_s: float                   # backend actions
    observe_s: float
    active_jobs: int
    actions: tuple[Action, ...]
    predict_s: float = 0.0         # writing the round's predictions (the forecast runs on its own thread)


def cluster_view(spec: ClusterSpec, now: float, finished: tuple[JobView, ...] = ()) -> ClusterView:
    return ClusterView(tuple(NodeView(n.name, n.gpus, n.gpu_type, n.cpus) for n in spec.nodes), now, finished)


def act_order(act: Action, jobs: Mapping[int, JobRecord]) -> tuple[int, int]:
    """Preemptions (stopped: their slots are free), then resizes shrinking first, then starts. A shrink's slots
    stay held until it is confirmed (``clear_of_holds`` keeps the round's starts and grows off them)."""
    if isinstance(act, Resize):
        return 1, act.num_gpus - jobs[int(act.job_id)].num_gpus
    return {Move: 0, Preempt: 0, Start: 2}[type(act)], 0


def cancel_now(backend: Backend, job_dir: Callable[[JobRecord], Path], running: list[JobRecord]
               ) -> Iterator[JobRecord]:
    """Stop, one at a time, the ``running`` jobs whose cancel is to be carried out; yield each stopped to be recorded
    cancelled. Not one whose runtime finished before the cancel, or during its stop (``stopped_finished``: it wrote
    ``finished`` and was tearing down): all of it trained, it was recorded cancelled and ``history`` sent its user to
    run it again. That one is left to the poll, which records it finished."""
    for j in running:
        if j.cancel_requested and backend.poll(j.id, job_dir(j)).state != "finished" and \
                not stopped_finished(backend, j.id, job_dir(j)):   # slow (grace period): outside any transaction
            yield j


def count_to_end(store: Store, before: JobRecord, counted: dict, res: PollResult, job_dir: Path, now: float) -> float:
    """When a job that ``res`` says ended did (its folder says: ``recovery.ended_at``), its time counted only up to
    then, not to this poll, which came late (``accounting.counted_to_end``); ``now`` for a job still running. A
    coordinator gone (killed) is counted to its last record or to the last round that counted it, whichever is later:
    one killed while the store could not be written (a full disk, a lock) was charged until rounds worked again."""
    ended = res.state in ("finished", "failed") or (res.state == "gone" and not res.fenced)
    end = recovery.ended_at(job_dir, now) if ended else None
    ended = counted_to_end(before, counted, end, now)
    store.update(before.id, **ended)
    return ended.get("accounted_until", now)


def trained_batch(job: JobRecord, last: dict) -> int | None:
    """The global batch ``last`` (a step record) ran at, else the one stored before; an ensemble's records are its
    members' (no one batch is the job's)."""
    if job.spec.kind == "ensemble":
        return None
    b = last.get("batch_size")
    return b if isinstance(b, int) and not isinstance(b, bool) and b > 0 else job.trained_batch


def policy_views(models: JobModels, store: Store, jobs: list[JobRecord], now: float) -> list[JobView]:
    """The jobs as the policy sees them; an ensemble as its members' profiles give it (``ensemble_view``: capped to
    what its still-training members can use, so a member that left frees its slots for the other jobs, at their
    speed), as the forecast rolls it forward."""
    return [ensemble_view_of(store, j.id, models.snapshot(j), now) if j.spec.kind == "ensemble"
            else models.snapshot(j) for j in jobs]


def checked_start(backend: Backend, launch: Launch, code_check: Callable[[JobSpec, str], None] | None) -> None:
    """``backend.start(launch)`` once ``code_check`` passes its spec: the runtime imports what an entry's path names
    now, and a link in an allowed directory re-pointed since the submission ran code from outside them."""
    if code_check is not None:
        code_check(launch.spec, f"job {launch.job_id} (its code checked again at its start)")
    backend.start(launch)


class LiveLoop:
    """One scheduler instance over a store and a backend. ``round()`` is one pass of the loop."""

    def __init__(self, store: Store, backend: Backend, cluster: ClusterSpec, state_dir: str | Path,
                 policy: Policy | None = None, clock=time.time, forecast_every_s: float = FORECAST_EVERY_S,
                 jobs_dir: str | Path | None = None, monotonic=None):
        self.store, self.backend, self.cluster = store, backend, cluster
        # the submission's rules on which code a job may run (``entries.py``), again before each start: a SpecError
        self.code_check: Callable[[JobSpec, str], None] | None = None
        self.state_dir = Path(state_dir).absolute()
        # where jobs never started get their folder; a started one keeps its own (``job_folders``)
        self.jobs_dir = Path(jobs_dir).absolute() if jobs_dir is not None else self.state_dir / "jobs"
        self.policy = policy or make_policy(cluster.policy, **dict(cluster.policy_args))
        self.clock = clock
        # how much time really passed between rounds (``accounting``): the wall clock can jump; a test's own clock
        # cannot, and is both
        self.round_gap = RoundGap(monotonic or (time.monotonic if clock is time.time else clock))
        self.capacity = {n.name: n.gpus for n in cluster.nodes}
        self.models = JobModels(tuple(sorted({n.gpu_type for n in cluster.nodes})), store)
        self.forecaster = Forecaster(store, self.policy, self.models, self._cluster_view,
                                     step_s=max(10.0, 5 * cluster.interval_s), every_s=forecast_every_s)
        self.nodes = NodeWatch(cluster_view(cluster, 0.0).nodes)
        self._pending: dict[int, tuple] = {}               # refits of this round: (time, Prediction)
        self.reached = TargetReached(store)                # each job's target_reached event, once
        self._to_refit: dict[int, JobRecord] = {}          # jobs whose progress arrived this pass
        self._ended: list[tuple[int, bool]] = []           # (job, finished) that ended this pass
        self.job_events = JobEvents(store)   # what a job's processes write, bounded
        self.notices = ResizeNotices(store)                # why the runtime abandoned a job's resize
        self._confirmed: list[int] = []                    # jobs whose held slots the store released this pass
        self.backoff = ResizeBackoff()                     # no grow storm after abandoned ones
        self.deadline = ResizeDeadline(cluster.resize_timeout_s, store)   # a hanging newcomer holds no grow for good
        # alive but no progress: said, never acted on
        self.stalls = StallWatch(cluster.stall_after_s, store, first_step_s=cluster.first_step_after_s)
        # an ended job's step rows do not stay for good, nor an active one's rotated progress segments once stored
        self.retention = Retention(store, cluster.retain_ended_days,
                                   SegmentRetention(store, self.job_dir, cluster.progress_keep_days))
        self.held_out = HeldOut()                          # jobs placed on nodes the round's view lacks
        self.member_losses = MemberLosses(store)           # an ensemble's LOSS: its best member's newest

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

    def job_dir(self, job: JobRecord | int) -> Path:
        """The job's folder: the one it was started in, else a new one under ``jobs_dir`` (``job_folders``)."""
        return job_folder(job if isinstance(job, JobRecord) else self.store.get(job), self.jobs_dir)

    # -- restart -----------------------------------------------------------------------------------
    def recover(self) -> None:
        """Re-attach live coordinators; re-queue the rest (``service/recovery.py``), and those placed on nodes the
        cluster declaration no longer has (where the backend has no live view of its own: Ray's decides each round)."""
        now = self.clock()
        recovery.recover(self.store, self.backend, self.job_dir, self._ingest, now, known_nodes=None
                         if self.backend.nodes() is not None else {n.name: n.gpus for n in self.cluster.nodes})
        self.store.event("service_started", None, now, policy=self.cluster.policy,
                         gpus=sum(self.capacity.values()))

    # -- one round ---------------------------------------------------------------------------------
    def round(self) -> RoundStats:
        now = self.clock()
        t0 = time.perf_counter()
        # the nodes, read before the polls: a node that dies between them is seen by the next round's poll first
        # (the job's books shrink onto the nodes left), never by the policy while a job still counts GPUs on it
        # (it would no longer fit and be preempted instead of training on)
        view = self._cluster_view(now)
        self.observe(now)
        t1 = time.perf_counter()
        jobs = self.store.jobs(states=ACTIVE)
        self.watch_nodes(now, jobs, view)
        actions = self.decide(jobs, now, view)
        t2 = time.perf_counter()
        self.act(actions, {j.id: j for j in jobs}, now)
        t3 = time.perf_counter()
        for job_id, pred in self.models.predict_queued(jobs).items():   # the queued ones, from the finished jobs
            self._pending.setdefault(job_id, (now, pred))
        self.publish_predictions(now)
        self.retention.maybe_purge(now)
        return RoundStats(now, t2 - t1, t3 - t2, t1 - t0, len(jobs), tuple(actions), time.perf_counter() - t3)

    def watch_nodes(self, now: float, jobs: list[JobRecord], view: ClusterView) -> None:
        """Refresh the node table (``dlsched nodes``) from the round's ``view``; a node lost or back is an event."""
        addresses = self.backend.addresses() or {n.name: "localhost" for n in self.cluster.nodes}
        changes = self.nodes.update(view.nodes, addresses,
                                    [(j.id, j.placement) for j in jobs if j.num_gpus], now)
        for node, health in changes:
            self.store.event("node_lost" if health == LOST else "node_up", None, now, node=node)

    def _cluster_view(self, now: float) -> ClusterView:
        live, finished = self.backend.nodes(), self.models.finished.views   # the policy's as the simulator's
        return ClusterView(live, now, finished) if live is not None else cluster_view(self.cluster, now, finished)

    def decide(self, jobs: list[JobRecord], now: float, view: ClusterView) -> list[Action]:
        """Snapshots -> one round (policy, check, placement: Optimus consolidation) on the round's ``view`` -> the
        actions to take."""
        eligible = [j for j in jobs if not j.cancel_requested]
        self.models.restart_s = self.forecaster.typical_delay("resize", RESIZE_S)
        view = without_held(view, jobs)   # slots processes may still use past their books
        eligible, view = self.held_out(view, eligible)   # placed on a node the view lacks: left as it is
        decision = schedule(self.policy, policy_views(self.models, self.store, eligible, now), view, consolidated)
        return clear_of_holds(decision, eligible, view)   # a shrink's slots are not free this round either

    def act(self, actions: list[Action], jobs: Mapping[int, JobRecord], now: float) -> None:
        """Backend actions first (GPUs are freed before they are taken), then every resulting store write in ONE
        transaction (``record_round``). A crash in between leaves coordinators the store does not know about;
        ``LocalBackend.start`` adopts a live coordinator of the same job instead of starting a second one, so that is
        safe."""
        writes = []
        for act in sorted(actions, key=lambda a: act_order(a, jobs)):
            job = jobs[int(act.job_id)]
            if isinstance(act, Move):   # same GPUs and batch elsewhere: the processes move as in a resize
                act = Resize(act.job_id, job.num_gpus, job.batch_size, act.nodes, moved=True)
            if isinstance(act, Resize) and (waits_for_hold(job, act.nodes) or act.num_gpus > job.num_gpus and
                                            self.backoff.holds(job.id, now)):
                continue   # its GPUs stay free this round: the policy asks again once the wait (or hold) is over
            d = self.job_dir(job)
            gen = job.generation + 1
            try:
                if isinstance(act, Preempt):
                    if (w := preempt_write(self.backend, job, d, lambda: self._ingest(job, now))) is not None:
                        writes.append(w)
                elif isinstance(act, Start):
                    # the round's `now` precedes its stops (a cancel's or a preemption's grace: seconds): a start
                    # stamped with it was charged GPU time, and began, before its slots were free
                    at = self.clock()
                    checked_start(self.backend, Launch(job.id, job.spec, d, act.num_gpus, act.batch_size, act.nodes,
                                                       gen), self.code_check)
                    self.models.note_change(job.id, "start", at, gen)
                    self.stalls.started(job.id)
                    writes.append(start_write(job, act, self.backend.placement(job.id) or act.nodes, d, at))
                else:   # a shrink or move holds the slots it leaves until the new group steps (slot_holds)
                    self.backend.resize(Launch(job.id, job.spec, d, act.num_gpus, act.batch_size, act.nodes, gen,
                                               hold_given_back=bool(extra_slots(job.placement, act.nodes))))
                    self.models.note_change(job.id, "resize", now, gen)
                    writes.append(resize_write(job, act, self.backend.placement(job.id) or act.nodes))
            except Exception as e:   # one job's launch failure must not stop the service (logged there)
                writes += after_failed_action(self.store, self.backend, self.backoff, job, act, d, e, now)
        for job_id in record_round(self.store, writes, jobs, now):   # started for nothing: the others stand
            self.backend.stop(job_id, self.job_dir(job_id))

    # -- observation -------------------------------------------------------------------------------
    def observe(self, now: float) -> None:
        """Cancellations, progress ingestion, process state, GPU-service accounting, prediction refit."""
        last, elapsed = self.round_gap.since_last(now)
        running = self.store.jobs(states=(RUNNING, RESCALING))
        cancelling = []
        for job in cancel_now(self.backend, self.job_dir, running):
            cancelling.append(job)
            with self.store.batch():   # ended `at` the stop's end: it held its GPUs through the stop's grace
                self._ingest(job, at := self.clock())
                self.notices.forget(job.id)
                # its time since the last round counts, as a finished job's does: `history` showed GPU-TIME short of RAN
                self.store.transition(job.id, CANCELLED, at,
                                      **since_counted(job, at, last, self.round_gap.since_round(elapsed)))
                self.store.record_allocation(job.id, at, 0, job.batch_size, {})
            self._ended.append((job.id, False))
        with self.store.batch():     # one fsync for the whole pass, however many jobs run
            for job in [j for j in running if j not in cancelling]:
                self._observe_one(job, now, last, elapsed)
        release_confirmed(self.backend, self.job_dir, self._confirmed)   # after the store's commit, never before
        self._refit(now)

    def _observe_one(self, job: JobRecord, now: float, last: float | None, elapsed: float | None) -> None:
        """``last``: the loop's previous observation, ``elapsed`` the time seen to pass since; the time counted is
        since the job's own (``accounting``)."""
        d, before = self.job_dir(job), job
        counted = since_counted(job, now, last, elapsed)   # at the GPUs held before: a resize confirmed only now did not train
        job = self._ingest(job, now)
        self.store.update(job.id, **counted)
        res = self.backend.poll(job.id, d)
        if res.state in ("finished", "failed", "gone"):
            job = self._ingest(job, now)   # what it wrote between the read above and its exit (its last steps)
        until = count_to_end(self.store, before, counted, res, d, now)
        runtime_gave_up = self.notices.take(job)   # its newcomers went; past the deadline, unconfirmed
        given_up = runtime_gave_up or self.deadline.overdue(job, now)
        if res.state == "finished":
            self.store.transition(job.id, FINISHED, now, end_time=until)
        elif res.state == "failed":
            self.store.transition(job.id, FAILED, now, {"error": res.error}, end_time=until, error=(res.error or "")[:500])
        elif res.state == "gone":
            resume_or_fail(self.store, job.id, res, now, d)
        else:
            if given_up is not None and job.state == RESCALING:   # a live job's only: an ended one's books are gone
                job = return_to_held(self.store, self.backend, self.backoff, job, d, given_up,
                                     now, unconfirmed=runtime_gave_up is None)
            if res.nodes is not None:   # workers lost with their node: the job trains on the rest; re-plan
                self._shrunk_by_loss(job, dict(res.nodes), now)
            self.stalls.check(job, now)
            return
        self.store.record_allocation(job.id, until, 0, job.batch_size, {})
        self._ended.append((job.id, res.state == "finished"))

    def _shrunk_by_loss(self, job: JobRecord, nodes: dict[str, int], now: float) -> None:
        gpus = sum(nodes.values())
        # the lost slots are held (``releasing``) until a step confirms the shrink: this round's view, read before
        # the poll that found their node dead, may list it free, and a grow onto it would wait out a reservation
        self.store.update(job.id, num_gpus=gpus, placement=nodes, training_gpus=min(job.held_gpus, gpus),
                          releasing=held_after(job, nodes) or None)
        self.store.record_allocation(job.id, now, gpus, job.batch_size, nodes)
        self.store.event("workers_lost", job.id, now, gpus_from=job.num_gpus, gpus=gpus,
                         lost=extra_slots(job.placement, nodes))

    def _ingest(self, job: JobRecord, now: float) -> JobRecord:
        records, offset = read_progress(self.job_dir(job), job.progress_offset)
        if not records:
            return job
        samples = [in_slots(r) for r in records if "event" not in r]
        fields: dict = {}
        delay = self.models.change_delay(job, samples, now)
        if delay is not None:
            self.forecaster.record_delay(*delay)
        if samples:
            last = samples[-1]
            fields = {"samples": float(last.get("samples") or job.samples),   # an ensemble's loss: its best member's
                      "last_loss": self.member_losses.best(job.id, samples, last.get("loss")),
                      "trained_batch": trained_batch(job, last),   # samples_per_s: the refit's (publish_predictions)
                      **self.stalls.progressed(job, now)}
            if last.get("total_samples"):
                fields["total_samples"] = float(last["total_samples"])
            if job.state == RESCALING and last.get("workers") == job.num_gpus and answers(job, last):
                self.store.transition(job.id, RUNNING, now, {"reason": "resize done", "workers": job.num_gpus})
                self.backoff.forget(job.id)
            if job.releasing and released(job, samples):   # the runtime trains at its size: the rest is free
                fields["releasing"] = None
                self._confirmed.append(job.id)
        if self.store.add_progress(job.id, samples, offset, **fields):
            self.models.forget_progress(job.id)   # a restore's replay replaced stored rows: read them again
        events = [r for r in records if "event" in r]
        self.job_events.store_read(job.id, events, now)   # bounded (``job_events.py``); the loop reads them all
        self.notices.read(job, events)
        job = self.store.get(job.id)
        self._to_refit[job.id] = job
        return job

    def _refit(self, now: float) -> None:
        """Refit the jobs whose progress arrived this pass, then drop the models of jobs that ended. Outside any
        store transaction: fits are CPU-heavy, and SQLite's write lock must never wait on them (a busy machine
        held it past the 30 s busy timeout, and submissions and the forecast failed with 'database is locked')."""
        for job_id, job in self._to_refit.items():
            pred = self.models.refit_stored(job, self.store, now, read_lr_plan(self.job_dir(job)))
            if pred is not None:
                self._pending[job_id] = (now, pred)
        for job_id, finished in self._ended:
            self.job_events.forget(job_id, now)
            self.models.forget(job_id, finished=finished)
            self.member_losses.forget(job_id)
            self.backoff.forget(job_id)
            self.notices.forget(job_id)
        self._to_refit, self._ended = {}, []

    # -- predictions -------------------------------------------------------------------------------
    def publish_predictions(self, now: float) -> None:
        """Write this round's refits, each with what the newest policy forecast said of the job (the store keeps
        the current forecast of every active job apart; the refits keep what was forecast at the time). A cheap
        forecast is remade first: one made a period earlier lags a job whose speed just changed."""
        if self._pending:
            self.forecaster.refresh_if_cheap(now)
        f, at = self.forecaster.latest, self.forecaster.made_at
        with self.store.batch():
            for job_id, (t, pred) in self._pending.items():
                fields = {"forecast_time": at, "predicted_start": f.start[str(job_id)],
                          "policy_finish": f.finish[str(job_id)]} if f is not None and str(job_id) in f.finish else {}
                self.store.add_prediction(job_id, t, pred.fraction_done, pred.total_samples,
                                          pred.remaining_s, pred.predicted_finish, pred.loss_fit,
                                          remaining_range_s=pred.remaining_range_s, **fields)
                if pred.rate:   # the wall-clock rate LEFT assumes: a step's own leaves out the time between steps
                    self.store.update(job_id, samples_per_s=pred.rate)
                self.reached.check(job_id, t, pred.loss_fit)
        self._pending.clear()


class LoopThread(threading.Thread):
    """Runs ``round()`` every ``interval_s`` until stopped; a failing round is logged, never fatal."""

    def __init__(self, loop: LiveLoop, interval_s: float):
        super().__init__(name="dlsched-loop", daemon=True)
        self.loop = loop
        self.interval_s = interval_s
        self.stopping = threading.Event()
        self.recovered = threading.Event()   # the API answers after it (``api.after_recovery``)
        self.rounds = 0
        self.failed_rounds = 0
        self.last_stats: RoundStats | None = None
        # every round's wall time, raised ones too (``service/metrics.py`` exports it; registered nowhere else)
        self.round_seconds = Histogram("dlsched_round_duration_seconds", "Wall time of each scheduling round",
                                       registry=None)

    def run(self) -> None:
        try:
            self.loop.recover()
        except Exception:
            log.exception("recovery after restart failed; scheduling continues with the store as it is")
        finally:
            self.recovered.set()
        forecaster = threading.Thread(target=self.loop.forecaster.run, args=(self.stopping, self.loop.clock),
                                      name="dlsched-forecast", daemon=True)
        forecaster.start()
        failures = RepeatedFailures("scheduling round", log)   # a lasting cause: one traceback, not one a round
        while not self.stopping.is_set():
            t0 = time.monotonic()
            try:
                self.last_stats = self.loop.round()
                self.rounds += 1
                failures.succeeded()
            except Exception as e:
                self.failed_rounds += 1
                failures.failed(e)
            self.round_seconds.observe(time.monotonic() - t0)
            self.stopping.wait(max(0.0, self.interval_s - (time.monotonic() - t0)))
        forecaster.join(timeout=FORECAST_BUDGET_S + 5)
        self.loop.store.close()

    def stop(self) -> None:
        self.stopping.set()
