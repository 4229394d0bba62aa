"""What the live loop learns about each job (speed model, observed rate, predicted total work, the policy's
snapshot, the pending start/resize timing), in one place, so an ended job is dropped by one ``forget``."""
from __future__ import annotations

import logging
import math

import numpy as np
# the fit's first schedule-area filter imports scipy.signal (and scipy.stats): ~0.8 s of CPU that held one
# scheduling round for 2.6 s on a busy machine, so the service pays it when it loads, not in a round
import scipy.signal  # noqa: F401

from dlsched.perf.calibration import load_calibration
from dlsched.perf.first_passage import logged_crossing
from dlsched.perf.prior import (REGIMES, FinishedFit, finished_fit, fit_from_record, fit_record, kind_of,
                                metric_kind, prior_from_fits, shares_task)
from dlsched.perf.schedule import Schedule, parse_schedule, shared_shape, stretched
from dlsched.policy.base import JobView, ThroughputModel
from dlsched.service import refit
from dlsched.service.finished_jobs import FinishedJobs
from dlsched.service.forecast import RESIZE_S
from dlsched.service.metric_target import (METRICS_EVENT, ended_at, fit_space, predict_target, reached_at, reported,
                                           target_meta)
from dlsched.service.own_calibration import LOSS_FIT, TARGET_FIT, OwnBands, final_errors, steps_errors
from dlsched.service.progress_history import ProgressHistory
from dlsched.service.slot_holds import answers
from dlsched.service.store import QUEUED, RESCALING, JobRecord, Store
from dlsched.service.task_speeds import TaskSpeeds
from dlsched.spec import MetricTarget

log = logging.getLogger("dlsched.service")

# a queued job's prediction costs a prior and a curve (~10 ms): a round over a long queue makes a few, the next ones
# the rounds after (one job finishing would otherwise remake every queued job's in one round)
QUEUED_PREDICTIONS_PER_ROUND = 8
SPEED_REFIT_S = 30.0       # a job's speed model is refitted on a newly settled (workers, batch), else at most this often


def job_view(job: JobRecord, speed: ThroughputModel | None, restart_s: float = RESIZE_S,
             change: tuple[int, float, float | None, str] | None = None) -> JobView:
    """The policy's view of a stored job; ``restart_s``: the resize pause measured here (policies weigh it);
    ``change``: (generation, decided at, first step at or None, kind) of its last start or resize (``JobModels.
    note_change``), which ``policy.restart_hold`` reads while it is the job's current generation."""
    s = job.spec
    lo, hi = s.gpu_range
    blo, bhi = s.min_batch_size, s.max_batch_size
    batch = s.batch_size
    if job.requested_workers is not None:   # an operator's `dlsched resize` (inside the spec's ranges) fixes them
        lo = hi = job.requested_workers
    if job.requested_batch is not None:
        blo = bhi = batch = job.requested_batch
    if job.state == RESCALING or job.releasing:
        # mid-resize the runtime is still moving to the last decision: no further growth until it confirms
        # (a noisy early speed estimate must not bounce it), but it may still shrink; so too while it gives back
        # a grow past its deadline (service/slot_holds.py)
        hi = max(lo, min(hi, job.num_gpus))
    remaining = max(0.0, job.total_samples - job.samples) if job.total_samples else None
    preemptible = s.preemptible
    if remaining == 0 and job.num_gpus:
        # trained every sample: it evaluates, checkpoints and exits on its own; a grow given to it now (live, one
        # round's) would wait out a resize it never makes while others queue, a preemption would lose that last work
        lo = hi = job.num_gpus
        preemptible = False
    return JobView(
        id=str(job.id), submit_time=job.submit_time, requested_gpus=max(lo, min(s.gpus, hi)), batch_size=batch,
        min_batch_size=blo, max_batch_size=bhi, max_local_batch=s.max_local_batch,
        max_gpus=hi, min_gpus=lo, attained_service=job.attained_service, run_time=job.run_time,
        placement=job.placement, current_batch_size=job.batch_size, remaining_samples=remaining,
        speed=speed, kind=s.kind, preemptible=preemptible,
        attrs={"name": job.name, "elastic": s.elastic, "samples_done": job.samples, "loss": job.last_loss,
               "state": job.state, "restart_s": restart_s,
               # starts and resizes after the first start, as the simulator counts them (Pollux's restart budget)
               "restarts": max(job.generation - 1, 0),
               **({"changed_at": change[1], "settled_at": change[2]}
                  if change is not None and change[0] == job.generation and job.num_gpus else {}),
               "efficiency": "reported gradient noise" if isinstance(speed, refit.NoisySpeed)
               else "no gradient noise reported: goodput = throughput"})


def job_fact(job: JobRecord, name: str):
    """A fact of ``spec.PredictionFacts`` the job states: in its spec's ``prediction``, else (an entry job) the
    param of that name; None when neither has it."""
    stated = getattr(job.spec.prediction, name, None)
    return stated if stated is not None else job.spec.params.get(name)


def metric_target_of(job: JobRecord) -> MetricTarget | None:
    """The reported metric's target the job states (``spec.PredictionFacts.target``; only there: a param of that name
    is no checked target)."""
    return getattr(job.spec.prediction, "target", None)


def job_regime(job: JobRecord) -> str:
    """The job's regime (``perf.prior.REGIMES``; the spec checked it at submit); scratch by default."""
    r = job_fact(job, "regime")
    return r if r in REGIMES else "scratch"


def job_meta(job: JobRecord) -> dict:
    """What ``perf.prior`` matches finished jobs on: the model (entry, or the script a command runs), its dataset
    and depth, batch, and the regime it pools by."""
    spec = job.spec
    return {"family": spec.entry or command_script(spec.command), "dataset": job_fact(job, "dataset"),
            "depth": job_fact(job, "depth"), "batch": spec.batch_size, "metric": "loss", "regime": job_regime(job)}


def command_script(command: list[str]) -> str:
    """The script a command job runs (``train.py``, or the module after ``-m``; else the program): what two runs of
    one model share, whatever their arguments. A spec without an entry has a non-empty command (``spec.JobSpec``)."""
    for i, arg in enumerate(command):
        if arg == "-m" and i + 1 < len(command):
            return command[i + 1]
        if arg.endswith(".py"):
            return arg
    return command[0]


def prediction_before_start(job: JobRecord, prior_of, target_prior_of, bands,
                            task_schedule: Schedule | None = None) -> refit.Prediction | None:
    """A queued job's prediction before its first step: where its task's finished jobs went under its schedule
    (``perf.curve_predict.task_runs_prediction``: issue 14's prior before the first point), of its loss and of its
    stated target's metric. It needs the job's step budget (its samples over its batch: a SPEC's steps are that
    batch's), its schedule (each finished job is carried to it: its declared one, else ``task_schedule``, the shape its
    task's finished jobs of its model share, stretched to its budget) and two finished jobs of its task; None
    without them. ``prior_of`` / ``target_prior_of``: the prior of the loss / of the target for a schedule (``JobModels.
    curve_prior``); ``bands``: a metric kind's calibration."""
    spec, batch = job_fact(job, "schedule"), job.batch_size or job.spec.batch_size
    if not (job.total_samples and batch and (isinstance(spec, str) or task_schedule is not None)):
        return None
    budget = job.total_samples / batch
    try:
        schedule = parse_schedule(spec, budget) if isinstance(spec, str) else \
            stretched(task_schedule, budget, "as its task's finished jobs ran")
    except ValueError:
        return None
    target_loss, stated = job_fact(job, "target_loss"), metric_target_of(job)
    fit = refit.fit_loss(np.empty(0), np.empty(0), budget_steps=budget, schedule=schedule, prior=prior_of(schedule),
                         target_loss=float(target_loss) if isinstance(target_loss, (int, float)) else None,
                         regime=job_regime(job), calibration=bands("loss")) or {}
    fit.pop("fitted", None)
    if "curve" in fit:
        fit["lr"] = f"{spec} (declared)" if isinstance(spec, str) else f"{schedule.spec} (none declared)"
    try:
        reached = None if stated is None else predict_target(stated, np.empty(0), np.empty(0), schedule,
                                                             job_regime(job), target_prior_of(schedule),
                                                             bands(metric_kind(stated.kind)))
    except ValueError:   # before its first report: nothing to say until it trains
        reached = None
    if reached is not None:
        reached.pop("fitted")
        fit["metric_target"] = reached | {"target_time": None, "target_time_80": None}   # not training: no clock time
    if isinstance(target_loss, (int, float)) and "model" in fit:
        fit.update(target_loss=float(target_loss), target_time=None, target_time_80=None)
    return refit.Prediction(0.0, float(job.total_samples), None, None, fit) if fit else None


class JobModels:
    """Per-job models and caches of the live loop, keyed by job id. With a ``store`` the finished jobs' fits
    (the prior of new ones) are kept there and read back on a restart."""

    def __init__(self, gpu_types: tuple[str, ...], store: Store | None = None):
        self.gpu_types = gpu_types
        self._store = store
        self._speeds: dict[int, ThroughputModel] = {}
        self._speed_fits: dict[int, tuple[frozenset, float]] = {}   # (configurations seen, when) of the fit
        self._seen_progress: dict[int, int] = {}                    # progress rows at the last refit
        self._progress: dict[int, ProgressHistory] = {}             # what the store holds, read once
        self._rates: dict[int, float] = {}           # observed samples/s
        self._totals: dict[int, float] = {}          # predicted total samples (target-loss jobs)
        self._views: dict[int, tuple] = {}           # (record, speed, restart_s, change, JobView) of the last one
        # (generation, when, first step at its size or None, start|resize) of the last start or resize decided here:
        # its measured delay, and what policy.restart_hold reads
        self._changes: dict[int, tuple[int, float, float | None, str]] = {}
        self._last_fits: dict[int, FinishedFit] = {}  # the newest annealing fit of each running job
        self._last_target_fits: dict[int, FinishedFit] = {}   # ... and of the metric it states a target of
        # that metric's reports read so far: {step: value} inside steps, and between them; the ids read to
        self._reports: dict[int, tuple[dict[float, float], dict[float, float], tuple[int, int]]] = {}
        self._failed_fits: set[int] = set()           # jobs whose fit raised: said once
        self.task_speeds = TaskSpeeds()               # a queued job's speed in the forecast (``task_speeds``)
        self.finished = FinishedJobs(store, job_view)   # what the policy learns job sizes from (ClusterView.finished)
        self._queued_pool: dict[int, int] = {}        # finished jobs known when a queued job was last predicted
        # per task and model (dataset, metric, family): (finished jobs known, its shared schedule then): it changes
        # only when a job finishes, and is the same for every job of the task (a sweep's 100 finished jobs of other
        # shapes cost ~0.1 s to compare, once, not once per queued job)
        self._task_schedules: dict[str, tuple[int, Schedule | None]] = {}
        # of jobs that finished here: the prior of new ones
        records = store.finished_fits() if store else []
        self._finished: list[FinishedFit] = [fit_from_record(d) for d in records]
        # how far the jobs that ran to their budget here ended from the final values predicted for them: the bands
        self.bands = OwnBands(records)
        self.restart_s = RESIZE_S    # the loop's median measured resize pause, set every round

    def forget(self, job_id: int, finished: bool = False) -> None:
        last, target = self._last_fits.pop(job_id, None), self._last_target_fits.pop(job_id, None)
        if finished and self._store is not None and (job := self._store.get(job_id)) is not None:
            self.task_speeds.finished(job.spec, self._speeds.get(job_id))
            self.finished.add(job, self._speeds.get(job_id))
        if finished and last is not None:
            self._finished += [last] + ([target] if target is not None else [])
            if self._store is not None:
                self._store.add_finished_fit(job_id, *self._with_errors(self._store.get(job_id), last, target))
        for per_job in (self._speeds, self._speed_fits, self._seen_progress, self._progress, self._rates,
                        self._totals, self._views, self._changes, self._reports, self._queued_pool):
            per_job.pop(job_id, None)
        self._failed_fits.discard(job_id)

    def _with_errors(self, job: JobRecord | None, last: FinishedFit, target: FinishedFit | None):
        """The finished job's loss and target records, each with its final-value errors and the steps errors of its
        stated target (``own_calibration``), which its kind's bands take in from now on."""
        out = []
        for fit, path, down, reached in ((last, LOSS_FIT, float, self._loss_reached(job)),
                                         (target, TARGET_FIT, self._target_space(job), self._target_reached(job))):
            if fit is None:
                out.append(None)
                continue
            errors = final_errors(self._store, job, fit.final, path, down) if down is not None else []
            steps = steps_errors(self._store, job, reached, path)
            self.bands.add(kind_of(fit.meta), errors, steps)
            out.append(fit_record(fit) | ({"final_errors": errors} if errors else {})
                       | ({"steps_errors": steps} if steps else {}))
        return out

    def _loss_reached(self, job: JobRecord | None) -> float | None:
        """The step the job's loss got to its stated ``target_loss`` (binned as fitted; None: never, or none)."""
        target = None if job is None else job_fact(job, "target_loss")
        if not isinstance(target, (int, float)) or self._store is None:
            return None
        history = self.progress(job.id, self._store)
        if not len(history):
            return None
        return logged_crossing(*refit.binned_curve(history.column("step"), history.column("loss")), float(target))

    def _target_reached(self, job: JobRecord | None) -> float | None:
        """The step the job's reports of its stated target's metric got there (None: never, or none)."""
        reports = self._target_reports(job)
        return None if reports is None else reached_at(reports[0], *refit.binned_curve(*reports[1:]))

    def _target_space(self, job: JobRecord | None):
        """The stated target's predicted values -> its fit's space (``metric_target.fit_space``), from its reports."""
        reports = self._target_reports(job)
        return None if reports is None else fit_space(reports[0], reports[2])

    def _target_reports(self, job: JobRecord | None) -> tuple[MetricTarget, np.ndarray, np.ndarray] | None:
        """(stated target, steps, values) of the job's reports read so far, as its refits fitted them (a step reported
        inside a step and between steps: the later); None without a stated target or a report."""
        stated = None if job is None else metric_target_of(job)
        if stated is None or job.id not in self._reports:
            return None
        inside, between, _ = self._reports[job.id]
        steps, values = reported((inside | between).items())
        return (stated, steps, values) if len(values) else None

    def curve_prior(self, job: JobRecord, schedule: Schedule | None = None, target: MetricTarget | None = None):
        """``perf.prior`` of the job's loss, or of its stated ``target``'s metric, from the jobs that finished here
        with a fit of that kind (``perf.prior.kind_of``), leaning on those of the same entry, dataset, batch and
        metric, their finals carried to ``schedule`` (the job's) where their fits are known; None (the shipped
        prior) until one has finished. The shipped prior of the kind is their default: what finished jobs of other
        tasks cannot narrow (``perf.prior``)."""
        kind = "loss" if target is None else target.kind
        fits = [f for f in self._finished if kind_of(f.meta) == metric_kind(kind)]
        if not fits:
            return None
        shipped = load_calibration().curve_prior(kind, schedule, job_regime(job))
        meta = job_meta(job) if target is None else target_meta(job_meta(job), target)
        return prior_from_fits(fits, meta | {"decay": None if schedule is None else schedule.decay},
                               default=shipped, schedule=schedule)

    def task_schedule(self, job: JobRecord) -> Schedule | None:
        """The LR shape the last finished job of the job's task and model ran under (declared or reported), where
        another such job shares it over its budget (``perf.schedule.shared_shape``: one recipe, run twice), else None."""
        meta = job_meta(job)
        key = repr((meta["dataset"], meta["metric"], meta["family"]))   # a dataset param may be a mapping
        known = self._task_schedules.get(key)
        if known is None or known[0] != len(self._finished):
            runs = [f.curve.schedule for f in self._finished if f.curve is not None and shares_task(f, meta)
                    and kind_of(f.meta) == metric_kind("loss") and f.meta.get("family") == meta["family"]]
            shared = len(runs) >= 2 and any(shared_shape([runs[-1], r]) is not None for r in runs[:-1])
            known = self._task_schedules[key] = (len(self._finished), runs[-1] if shared else None)
        return known[1]

    def predict_queued(self, jobs: list[JobRecord]) -> dict[int, refit.Prediction]:
        """``prediction_before_start`` of the queued jobs that never trained, oldest first, at most
        ``QUEUED_PREDICTIONS_PER_ROUND`` tried a round; each tried again only once another job finished here (the pool
        its prior comes from changed)."""
        out, tried = {}, 0
        for job in jobs:
            if job.state != QUEUED or job.samples or self._queued_pool.get(job.id) == len(self._finished):
                continue
            if tried == QUEUED_PREDICTIONS_PER_ROUND:   # tries, not predictions: one that finds no task runs costs too
                break
            tried += 1
            self._queued_pool[job.id] = len(self._finished)
            stated = metric_target_of(job)
            try:   # the job's alone, as a refit's: never the round's (it would start, resize and finish nothing)
                pred = prediction_before_start(job, lambda s: self.curve_prior(job, s),
                                               lambda s: None if stated is None else self.curve_prior(job, s, stated),
                                               self.bands.of, self.task_schedule(job))
            except Exception:
                log.exception("job %s: its prediction before its start failed", job.id)
                continue
            if pred is not None:
                out[job.id] = pred
        return out

    def snapshot(self, job: JobRecord) -> JobView:
        """The policy's view of a job; reused while none of the record, its speed model and the measured resize
        pause changed."""
        speed, change = self._speeds.get(job.id), self._changes.get(job.id)
        hit = self._views.get(job.id)
        if hit is not None and hit[0] is job and hit[1] is speed and hit[2] == self.restart_s and hit[3] == change:
            return hit[4]
        view = job_view(job, speed, self.restart_s, change)
        self._views[job.id] = (job, speed, self.restart_s, change, view)
        return view

    def forecast_inputs(self) -> tuple[dict[int, ThroughputModel], dict[int, float], dict[int, float], dict]:
        """Copies of (speed models, observed rates, predicted totals, last changes) for the forecast thread."""
        return dict(self._speeds), dict(self._rates), dict(self._totals), dict(self._changes)

    def forget_progress(self, job_id: int) -> None:
        """The job's stored rows changed, not only grew (``replayed_steps``): the next ``progress`` reads them all."""
        self._progress.pop(job_id, None)
        self._seen_progress.pop(job_id, None)

    def progress(self, job_id: int, store: Store) -> ProgressHistory:
        """The job's stored progress: the rows read before, and those stored since."""
        history = self._progress.setdefault(job_id, ProgressHistory())
        history.extend(store.progress(job_id, after_id=history.last_id))
        return history

    def refit_stored(self, job: JobRecord, store: Store, now: float, lr_plan: dict | None) -> refit.Prediction | None:
        """``refit`` on what ``store`` holds of the job (its progress, and the reports of the metric it states a
        target of). A fit that raises is the job's alone: said once (the log and a ``prediction_failed`` event),
        None; the job is scheduled on its last prediction, and its next progress tries again. It was the whole
        round's exception: no job was started, resized or finished while that job's progress kept arriving."""
        stated = metric_target_of(job)
        try:
            progress = self.progress(job.id, store)
            if not self._news(job.id, progress):   # the metric's reports are read only for a refit
                return None
            return self.refit(job, progress, now, lr_plan,
                              self.metric_values(job.id, stated.metric, store) if stated else None)
        except Exception as e:
            if job.id not in self._failed_fits:
                self._failed_fits.add(job.id)
                log.exception("job %s: its prediction failed; it keeps its last one", job.id)
                store.event("prediction_failed", job.id, now, error=f"{type(e).__name__}: {e}"[:500])
            return None

    def _news(self, job_id: int, progress) -> bool:
        """Whether progress arrived since the job's last refit."""
        return len(progress) != self._seen_progress.get(job_id)

    def metric_values(self, job_id: int, metric: str, store: Store) -> list[tuple[float, float]]:
        """(step, value) of the job's reports of ``metric`` (``Store.metric_values``: a step reported twice keeps
        its last), read once: those read before, and those stored since (a day's per-step reports took 0.34 s to
        read whole, every round)."""
        inside, between, seen = self._reports.get(job_id, ({}, {}, (0, 0)))
        new = store.metric_values(job_id, metric, METRICS_EVENT, after=seen)
        inside.update(new.inside)
        between.update(new.between)
        self._reports[job_id] = (inside, between, new.seen)
        return list((inside | between).items())

    def refit(self, job: JobRecord, progress: ProgressHistory | list[dict], now: float,
              lr_plan: dict | None = None,
              metric_values: list[tuple[float, float]] | None = None) -> refit.Prediction | None:
        """Refit the job's models on its stored progress (and its runtime's ``lr_plan``, ``train.files``, and the
        (step, value) reports of the metric its stated ``target`` names: ``Store.metric_values``); None when nothing
        new arrived since the last refit."""
        if not self._news(job.id, progress):
            return None
        self._seen_progress[job.id] = len(progress)
        if not isinstance(progress, ProgressHistory):
            progress = ProgressHistory.of(progress)
        target = job_fact(job, "target_loss")
        # the configurations with a settled step: one only just started (its warm-up) is no news until it settles
        configs = refit.speed_configs(progress)
        last = self._speed_fits.get(job.id)
        refit_speed = last is None or last[0] != configs or now - last[1] >= SPEED_REFIT_S
        pred, speed = refit.predict(progress, now, job.num_gpus, job.batch_size, job.total_samples, job.samples,
                                    target_loss=float(target) if isinstance(target, (int, float)) else None,
                                    gpu_types=self.gpu_types, max_local_batch=job.spec.max_local_batch,
                                    speed=self._speeds.get(job.id), refit_speed=refit_speed,
                                    schedule=sched if isinstance(sched := job_fact(job, "schedule"), str) else None,
                                    prior=lambda sched: self.curve_prior(job, sched), regime=job_regime(job),
                                    lr_plan=lr_plan, target=(stated := metric_target_of(job)),
                                    metric_points=(points := reported(metric_values or [])) if stated else None,
                                    metric_prior=lambda sched: self.curve_prior(job, sched, stated),
                                    bands=self.bands.of,
                                    task_schedule=None if isinstance(sched, str) else self.task_schedule(job))
        if pred.fitted is not None:
            # the loss it is at, as a 3-point median: where it ended once it finishes (the level prior)
            losses = [r["loss"] for r in progress.tail(3) if isinstance(r.get("loss"), (int, float))]
            self._last_fits[job.id] = finished_fit(pred.fitted, job_meta(job),
                                                   float(np.median(losses)) if losses else math.nan)
        if pred.target_fitted is not None:
            self._last_target_fits[job.id] = finished_fit(pred.target_fitted, target_meta(job_meta(job), stated),
                                                          ended_at(stated, points[1]))
        if refit_speed:
            self._speed_fits[job.id] = (configs, now)
        if speed is not None:
            self._speeds[job.id] = speed
        if pred.rate:
            self._rates[job.id] = pred.rate
        if pred.total_samples:
            self._totals[job.id] = pred.total_samples
        return pred

    def note_change(self, job_id: int, kind: str, now: float, generation: int) -> None:
        """A start or resize (the job's ``generation`` from now) was decided at ``now``: its delay is measured at
        its first step, and until then and as long again the policy holds the job (``policy.restart_hold``)."""
        self._changes[job_id] = (generation, now, None, kind)

    def change_delay(self, job: JobRecord, records: list[dict], now: float) -> tuple[str, float] | None:
        """(start|resize, seconds from the decision to the first step at the new size) once ``records`` hold it: a
        step of ``job``'s current request (``slot_holds.answers``) at its size, written after the decision (``now``
        for a record without a time). Before, any record at the new worker count was it: a leftover line of the
        group before (a restart's, a move's, a batch change's) measured a pause of 0 s, which pulled the median
        restart cost the policies weigh down. A job whose generation moved on without a decision here (a resize
        given up) measures nothing."""
        change = self._changes.get(job.id)
        if change is None or change[2] is not None or change[0] != job.generation:
            return None
        first = next((r for r in records if r.get("workers", job.num_gpus) == job.num_gpus and answers(job, r)
                      and r.get("time", now) >= change[1]), None)
        if first is None:
            return None
        at = float(first.get("time", now))
        self._changes[job.id] = (*change[:2], at, change[3])
        return change[3], at - change[1]
