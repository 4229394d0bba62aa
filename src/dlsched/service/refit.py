"""Online perf-model refit for the live service: the ONE place the service turns progress into predictions.

The models are the perf package's: the Optimus loss curve ``l(k) = 1/(b0*k + b1) + b2``
(``perf.convergence.fit_curve``) and the all-reduce step-time model (``perf.speed.fit_step_time`` wrapped in
``AllReduceSpeedModel``, the ``ThroughputModel`` the policies receive). The step-time fit needs one
single-worker measurement to separate compute from communication; until a job has one, a plain NNLS fit of
``t(w, B) = a*B/w + b + c*w`` (``LinearSpeed`` below) stands in.

Completion is predicted from the work left over the job's wall-clock rate at its current allocation: the
total work is ``total_samples`` (reported by the runtime, else the spec's hint), or, for a job that stops at
a ``target_loss`` param, the step at which the schedule-aware loss prediction (``perf.curve_predict``, over
the job's ``schedule`` param, a SPEC in steps; constant by default) reaches it. A job whose batch changed is fitted
over samples / its first batch (``service.progress_axis``), its SPEC in that batch's steps. The job's ``regime`` param
(scratch, the default, or finetune: ``perf.prior.REGIMES``) picks the shipped curve prior's pool.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any, Callable

import numpy as np
import pandas as pd
from scipy.optimize import nnls

from dlsched.perf.annealing import AnnealingCurve, CurvePrior
from dlsched.perf.calibration import Calibration
from dlsched.perf.convergence import LossCurve, fit_curve
from dlsched.perf.efficiency import GradientNoise, efficiency
from dlsched.perf.curve_predict import predict_curve
from dlsched.perf.fit_window import convex_onset
from dlsched.perf.lr_continuation import logged_lr_schedule, lr_logged_until
from dlsched.perf.perfect_points import with_stand_in
from dlsched.perf.prior import metric_kind
from dlsched.perf.schedule import Schedule, parse_schedule, stretched
from dlsched.perf.speed import AllReduceSpeedModel, fit_step_time
from dlsched.service.metric_target import missing, predict_target
from dlsched.service.progress_axis import ProgressAxis
from dlsched.service.progress_history import ProgressHistory
from dlsched.spec import MetricTarget
from dlsched.train.files import planned_schedule_lr

RECENT = 200          # the newest measurements describe the job as it runs now
# The speed fit's sample: the newest SPEED_PER_CONFIG of each (workers, batch) configuration, of the SPEED_CONFIGS
# newest, among the newest SPEED_LOOKBACK. The newest RECENT alone forgot a configuration the job left: 200 steps
# after an elastic job shrank from 4 workers back to 1, the fit saw only 1-worker steps, extrapolated 4 workers as
# ideal again, and the policy grew it into the same slow 4, then shrank it, every ~10 s for the whole run.
SPEED_PER_CONFIG, SPEED_CONFIGS, SPEED_LOOKBACK = 100, 8, 20_000
# The first steps of each stretch at one configuration (after a start, resize or restart) time the communicator's
# set-up, the allocator's and autotuner's warm-up, not the rate it settles at: counted in steps, not seconds, so a
# slow machine's longer warm-up is left out too. A stretch still running enters the sample once it has as many
# settled steps again; one that ended before it settled is all that is known of its configuration, and its last
# (least transient) step stands for it where no settled one does.
SETTLE_STEPS = 3
# a gap this much longer than the job's steps (and over RESTART_MIN_GAP_S): it was stopped and restarted in between
RESTART_GAP_STEPS, RESTART_MIN_GAP_S = 10, 2.0
CURVE_BINS = 120      # loss points a curve fit sees at most (means over equal step ranges)


@dataclass(frozen=True)
class LinearSpeed:
    """Fallback ``ThroughputModel``: step time ``a*B/w + b + c*w`` (compute split over w workers, fixed overhead,
    per-worker communication), samples/s = B / t. ``ref_batch`` is used when a caller names no batch."""

    a: float
    b: float
    c: float
    ref_batch: int

    def throughput(self, num_gpus: int, num_nodes: int = 1, global_batch: int = 0, gpu_type: str | None = None) -> float:
        if num_gpus <= 0:
            return 0.0
        bsz = global_batch or self.ref_batch
        t = self.a * bsz / num_gpus + self.b + self.c * num_gpus
        return bsz / t if t > 0 else 0.0

    def efficiency(self, global_batch: int) -> float:
        return 1.0


@dataclass(frozen=True)
class NoisySpeed:
    """A fitted speed model plus the gradient noise the job reports: Pollux's efficiency of a batch, so the goodput
    policy and the forecast see the job's statistics (a job that reports none keeps efficiency 1: throughput)."""

    inner: Any
    noise: GradientNoise
    base_batch: int

    def throughput(self, num_gpus: int, num_nodes: int = 1, global_batch: int = 0, gpu_type: str | None = None) -> float:
        return self.inner.throughput(num_gpus, num_nodes, global_batch, gpu_type)

    def efficiency(self, global_batch: int) -> float:
        return float(min(1.0, efficiency(self.noise, max(global_batch, self.base_batch), self.base_batch)))


def reported_noise(progress: list[dict]) -> tuple[GradientNoise, int] | None:
    """The newest gradient noise a job reported (its runtime's EMA), with the batch it is measured at."""
    for p in reversed(progress[-RECENT:]):
        if p.get("grad_sqr") is not None and p.get("grad_var") is not None and p.get("noise_batch"):
            return GradientNoise(max(p["grad_sqr"], 0.0), max(p["grad_var"], 0.0)), int(p["noise_batch"])
    return None


def with_reported_noise(speed: Any, progress: list[dict]) -> Any:
    base = speed.inner if isinstance(speed, NoisySpeed) else speed
    noise = reported_noise(progress)
    return NoisySpeed(base, *noise) if base is not None and noise else base


@dataclass(frozen=True)
class Prediction:
    fraction_done: float | None
    total_samples: float | None
    remaining_s: float | None
    predicted_finish: float | None
    loss_fit: dict | None            # fit_loss's, and a stated target's (``metric_target``); None: neither yet
    rate: float | None = None        # samples/s the remaining time assumes (observed wall-clock, else modelled)
    fitted: AnnealingCurve | None = None   # the annealing fit behind loss_fit: a finished job's, ``perf.prior``'s
    target_fitted: AnnealingCurve | None = None   # the same of its metric target's fit (loss_fit's metric_target)
    # the remaining time at the 90th and the 10th percentile of its recent speed (``rate_spread``)
    remaining_range_s: tuple[float, float] | None = None


def fit_linear_speed(workers: np.ndarray, batches: np.ndarray, samples_per_s: np.ndarray) -> LinearSpeed | None:
    """NNLS on the step time; terms enter only when the data identify them (one (w, B) point -> compute only)."""
    ok = (workers > 0) & (batches > 0) & (samples_per_s > 0) & np.isfinite(samples_per_s)
    w, bs, s = workers[ok], batches[ok], samples_per_s[ok]
    if len(w) == 0:
        return None
    configs = len({(x, y) for x, y in zip(w, bs)})
    cols = [bs / w] + ([np.ones_like(w)] if configs >= 2 else []) + ([w] if len(np.unique(w)) >= 3 else [])
    coef, _ = nnls(np.column_stack(cols), bs / s)
    a, b, c = (list(coef) + [0.0, 0.0])[:3]
    if a <= 0 and b <= 0:
        return None
    return LinearSpeed(float(a), float(b), float(c), int(np.median(bs)))


def _same(a: np.ndarray) -> np.ndarray:
    """Whether each value after the first equals the one before (NaN equals NaN: a record without it)."""
    return (a[1:] == a[:-1]) | (np.isnan(a[1:]) & np.isnan(a[:-1]))


def settled_steps(workers: np.ndarray, batches: np.ndarray, times: np.ndarray) -> np.ndarray:
    """Which records time the rate their configuration settled at (``SETTLE_STEPS`` above). A stretch begins at a
    new (workers, batch) or after a gap far longer than the job's steps (a restart at the same configuration:
    ``_restart_between``'s rule)."""
    n = len(workers)
    if n == 0:
        return np.zeros(0, bool)
    begins = np.ones(n, bool)
    begins[1:] = ~(_same(workers) & _same(batches))
    dt = np.diff(times)
    if np.isfinite(dt).any():
        begins[1:] |= _restart_gap(np.nan_to_num(dt), float(np.nanmedian(dt)))
    first = np.flatnonzero(begins)
    stretch = np.cumsum(begins) - 1
    pos = np.arange(n) - first[stretch]
    length = np.diff(np.append(first, n))
    keep = pos >= SETTLE_STEPS
    keep &= (stretch != stretch[-1]) | (length[-1] >= 2 * SETTLE_STEPS)   # the running stretch: settled enough
    # an ended stretch that never settled: its last step, where its configuration has no settled step
    settled = {(w, b) for w, b in zip(workers[keep].tolist(), batches[keep].tolist())}
    for i in np.flatnonzero(length[:-1] <= SETTLE_STEPS):
        last = first[i] + length[i] - 1
        if (workers[last], batches[last]) not in settled:   # NaN is never in it: a stretch without workers kept
            keep[last] = True
    return keep


def _settled(history: ProgressHistory) -> tuple[np.ndarray, bool]:
    """``settled_steps``, and whether any step settled; before one has (a job's first steps, or a short job's all),
    its newest step alone: a job is never left with no speed model, and its one configuration's fit only
    extrapolates it."""
    keep = settled_steps(history.column("workers"), history.column("batch_size"), history.column("time"))
    if len(keep) and not keep.any():
        keep[-1] = True
        return keep, False
    return keep, True


def speed_configs(history: ProgressHistory) -> frozenset:
    """The (workers, batch) configurations with a settled step among the newest ``RECENT`` records (before any
    settled, the newest one's, marked as still warming up): a new one is what a refit of the speed model learns
    from (``JobModels.refit``)."""
    recent = history.where(np.arange(len(history)) >= len(history) - RECENT)
    keep, any_settled = _settled(recent)
    w, b = recent.column("workers")[keep].tolist(), recent.column("batch_size")[keep].tolist()
    return frozenset(zip(w, b)) if any_settled else frozenset({(w[-1], b[-1], "warming up")})


def speed_sample(history: ProgressHistory) -> list[dict]:
    """The records the speed model is fitted on (``SPEED_PER_CONFIG`` above), in their order: settled steps only
    (``settled_steps``)."""
    n = len(history)
    start = max(0, n - SPEED_LOOKBACK)
    window = history.where(np.arange(n) >= start)
    settled = np.flatnonzero(_settled(window)[0])[::-1]   # newest first
    newest_first = pd.DataFrame({"w": window.column("workers")[settled], "b": window.column("batch_size")[settled]})
    by_config = newest_first.groupby(["w", "b"], sort=False, dropna=False)   # configurations newest first
    keep = ((by_config.cumcount() < SPEED_PER_CONFIG) & (by_config.ngroup() < SPEED_CONFIGS)).to_numpy()
    mask = np.zeros(len(window), bool)
    mask[settled[keep]] = True
    return window.where(mask).tail(len(window))


def fit_speed(workers: np.ndarray, batches: np.ndarray, samples_per_s: np.ndarray, gpu_types: tuple[str, ...],
              max_local_batch: int | None = None):
    """The better of the perf package's all-reduce model and ``LinearSpeed`` on the measurements (relative
    error). The all-reduce model needs single-worker samples and, to scale compute with the local batch, more
    than one local batch among them, which an elastic job at a fixed global batch may not have yet. All
    workers of the local backend share one machine, so every measurement is one node; the profile serves
    every declared GPU type."""
    ok = (workers > 0) & (batches > 0) & (samples_per_s > 0) & np.isfinite(samples_per_s)
    w, bs, s = workers[ok].astype(float), batches[ok].astype(float), samples_per_s[ok].astype(float)
    linear = fit_linear_speed(w, bs, s)
    candidates = [linear] if linear is not None else []
    if len(w) and (w == 1).any():
        try:
            params = fit_step_time(w, np.ones_like(w), bs / w, bs / s)
            types = gpu_types or ("slot",)
            candidates.append(AllReduceSpeedModel({t: params for t in types}, types[0], max_local_batch=max_local_batch))
        except ValueError:
            pass
    if not candidates:
        return None

    def rel_err(m) -> float:
        pred = np.array([m.throughput(int(x), 1, int(b)) for x, b in zip(w, bs)])
        return float(np.mean((pred / s - 1.0) ** 2))

    return min(candidates, key=rel_err)


def binned_curve(steps: np.ndarray, losses: np.ndarray, bins: int = CURVE_BINS) -> tuple[np.ndarray, np.ndarray]:
    """Valid (step, loss) points, the last record per step kept (a resumed job repeats the steps after its
    checkpoint), averaged into at most ``bins`` equal step ranges: per-step minibatch losses are noisy, and a
    fit every round must not grow with the job's length. A loss of 0 (float32 underflow on an easy batch) is a point:
    the predictor fits it at a stand-in (``perf.perfect_points``), as ``predict curve`` does the same log."""
    ok = np.isfinite(losses) & np.isfinite(steps) & (losses >= 0) & (steps >= 0)
    k, l = steps[ok], losses[ok]
    if len(k) == 0:
        return k, l
    k, idx = np.unique(k[::-1], return_index=True)   # last occurrence of each step
    l = l[::-1][idx]
    if len(k) <= bins:
        return k, l
    which = np.minimum(((k - k[0]) / (np.ptp(k) or 1.0) * bins).astype(int), bins - 1)
    n = np.bincount(which, minlength=bins)
    keep = n > 0
    return (np.bincount(which, k, bins)[keep] / n[keep], np.bincount(which, l, bins)[keep] / n[keep])


def logged_schedule(recs: ProgressHistory | list[dict], budget: float, plan: dict | None = None,
                    axis: ProgressAxis | None = None, recipe: Schedule | None = None) -> Schedule | None:
    """The job's own logged LR as its schedule, where it tells the schedule: every record has one. After the last
    step, the runtime's ``plan`` of its schedulers' LR (``dlsched.torch.lr_plan``), else ``recipe`` (the shape its
    task's finished jobs ran: ``JobModels.task_schedule``) where the log so far follows it, else the family its logged
    decay follows, else flat. While the batch never changed, in steps, the plan made at that batch; after a change, over
    ``axis`` (``service.progress_axis``), the LR over its LR rule's factor (linear scaling moves the LR with the
    batch, which is no annealing), so every record must say that factor, and the plan its samples."""
    h = recs if isinstance(recs, ProgressHistory) else ProgressHistory.of(recs)
    steps, lrs, batches = np.nan_to_num(h.column("step")), h.column("lr"), h.column("batch_size")
    if not len(h) or np.isnan(lrs).any():
        return None
    planned = None   # (x of the plan's step, x and LR of the steps it plans)
    if axis is None:
        if len(np.unique(batches)) != 1:   # NaNs are one value to np.unique
            return None
        xs = steps
        if plan is not None and plan["batch_size"] == batches[0]:
            planned = plan["step"], np.asarray(plan["steps"], float), np.asarray(plan["lr"], float)
    else:
        factors = h.column("lr_factor")
        if not np.all(factors > 0):   # NaN: a runtime that does not say it
            return None
        xs, lrs = axis.x(h.column("samples")), lrs / factors
        if plan is not None and (plan_x := axis.plan_x(plan)) is not None:
            planned = axis.x(plan["samples"]), plan_x, np.asarray(planned_schedule_lr(plan))
    try:
        if planned is None:   # no plan: its recipe's, the family its logged decay follows, else its last value
            schedule, found = logged_lr_schedule(xs, lrs, budget, None if recipe is None else
                                                 replace(recipe, spec="its task's finished jobs ran"))
            if (until := lr_logged_until(xs, budget)) is None:
                return replace(schedule, spec="reported")
            at = f"step {until:,.0f}" if axis is None else f"{until:,.0f} steps of its first batch"
            return replace(schedule, spec=f"reported to {at}, then "
                           + (f"as {found.spec}" if found else "held at its last value"))
        past = xs <= planned[0]
        return Schedule.from_points(np.concatenate([xs[past], planned[1]]), np.concatenate([lrs[past], planned[2]]),
                                    budget, spec="reported, then its schedulers' plan")
    except ValueError:
        return None


# a prior, or how to make one from the job's schedule (None: it declared none and logged none)
PriorArg = CurvePrior | Callable[[Schedule | None], CurvePrior | None] | None


def fit_loss(steps: np.ndarray, losses: np.ndarray, *, budget_steps: float | None = None,
             schedule: str | Schedule | None = None, target_loss: float | None = None,
             prior: PriorArg = None, regime: str = "scratch", calibration: Calibration | None = None) -> dict | None:
    """The Optimus fit from 4 points (``beta0, beta1, beta2, scale, rmse``: the RMSE of the loss normalised by
    ``scale``) and, when the job's step budget is known, from any number of points (none: its task's finished runs)
    the schedule-aware prediction (``perf.curve_predict``, the one the CLI and the simulator use): ``model``,
    ``curve`` ([step, loss] from the first step fitted (past an LR warm-up, then a slow start:
    ``perf.fit_window``) to the budget), ``curve_rmse`` (its RMSE on the points it covers, in loss units),
    ``final``, ``final_80``
    and, for a ``target_loss``, ``target_step`` (None: unreachable), ``target_step_80`` (its 80 % band; None
    unless ahead), ``target_reached`` (the log got there), ``target_beyond_final`` (past the predicted final: ``target_step`` is the
    budget's, ``CurvePrediction.beyond_final``) and ``target_step_law`` (the law's own crossing, before the
    calibrated shift: what the cluster's own steps bands are measured against, ``service.own_calibration``), from
    ``observed_until`` (the last x fitted), and the annealing fit's ``alpha`` and ``drop`` (what a finished job gives
    ``perf.prior``). ``schedule`` is the job's SPEC in steps or a ``Schedule`` (default
    constant); ``prior`` a ``CurvePrior`` from finished jobs (default: the shipped one), or a function of the
    job's ``Schedule`` that makes one (the level prior carries finished runs' finals to it: ``perf.prior``);
    ``regime`` the shipped prior's pool (``perf.curve_predict``); ``calibration`` its bands (default: the shipped
    table; the service's: ``service.own_calibration``).
    The annealing fit itself is ``out["fitted"]``: not JSON, callers take it out before storing."""
    whole = binned_curve(steps, losses)
    # Optimus alone starts at the slow start's end; the predictor gets every point and windows them itself
    # (warm-up first: a slow-start search run over a warm-up cut elsewhere, and the service's prediction was
    # not the CLI's)
    onset = convex_onset(*whole)
    k, l = whole[0][onset:], whole[1][onset:]
    out: dict = {}
    if len(k) >= 4 and np.ptp(k) > 0:   # Optimus' three terms; the schedule-aware prediction answers from fewer
        try:
            fit = fit_curve(k, with_stand_in(l))
            c = fit.curve
            out = {"beta0": c.beta0, "beta1": c.beta1, "beta2": c.beta2, "scale": c.scale, "rmse": fit.rmse}
        except ValueError:
            pass
    if budget_steps and budget_steps >= (k[-1] if len(k) else 0.0):
        try:
            sched = schedule if isinstance(schedule, Schedule) else parse_schedule(schedule or "constant",
                                                                                   float(budget_steps))
        except ValueError:
            return out or None
        if callable(prior):   # the assumed constant of a job that named none is no schedule to carry finals to
            prior = prior(None if schedule is None else sched)
        try:   # from 0 points (its task's finished runs), 1 (their shapes) or 2 (the law through them) on
            p = predict_curve(*whole, sched, target=target_loss, prior=prior or "shipped", regime=regime,
                              calibration=calibration)
        except ValueError:
            return out or None
        # from the first point fitted
        grid = np.linspace(max(k[0], float(p.curve_x[0])) if len(k) else float(p.curve_x[0]), budget_steps, 121)
        # how far the drawn curve is from the points it covers, in loss units (the Optimus fit's ``rmse`` is not
        # this curve's)
        seen = (whole[0] >= grid[0]) & (whole[0] <= p.x_now)
        gap = np.interp(whole[0][seen], p.curve_x, p.curve_y) - whole[1][seen]
        out.update(model=p.model, final=p.final_value, final_80=list(p.final_value_interval_80), bands=p.bands,
                   curve=[[float(a), float(b)] for a, b in zip(grid, np.interp(grid, p.curve_x, p.curve_y))],
                   target_step=p.target_step, target_step_80=p.target_step_80, target_reached=p.reached,
                   target_chance=p.p_reach, target_beyond_final=p.beyond_final("loss"), observed_until=p.x_now, target_step_law=p.law_step,
                   curve_rmse=float(np.sqrt(np.mean(gap ** 2))) if gap.size else None)
        if p.fitted is not None:
            out.update(alpha=p.fitted.alpha, drop=p.fitted.c, fitted=p.fitted)
    return out or None


OPTIMUS_DRAWN_AHEAD = 1.6   # how far past the last x an Optimus fit without a budget is drawn (the dashboard's own reach)


def in_steps(fit: dict, axis: ProgressAxis, x_last: float) -> dict:
    """A ``fit_loss`` made over ``axis``'s x with its curve and target at the job's steps (what it logs and draws).
    The Optimus terms stay per x: without a budget's curve, ``optimus_steps`` draws them at the job's steps."""
    out = dict(fit)
    if fit.get("curve"):
        curve = np.asarray(fit["curve"], float)
        out["curve"] = [[float(a), float(b)] for a, b in zip(axis.steps(curve[:, 0]), curve[:, 1])]
    elif "beta0" in fit:
        xs = np.linspace(axis.past_x[0], OPTIMUS_DRAWN_AHEAD * x_last + 1, 121)   # steps before the first: unknown
        out["optimus_steps"] = [[float(a), float(b)] for a, b in zip(axis.steps(xs), loss_curve(fit).raw_loss(xs))]
    out.update({k: _steps_of(fit[k], axis) for k in TARGET_X if k in fit})
    if reached := fit.get("metric_target"):
        curve = np.asarray(reached["curve"], float)
        out["metric_target"] = reached | {
            "curve": [[float(a), float(b)] for a, b in zip(axis.steps(curve[:, 0]), curve[:, 1])],
            **{k: _steps_of(reached[k], axis) for k in TARGET_X if k in reached}}
    return out


# a fit's x of its target, the band of it, the law's own crossing, and the last x fitted
TARGET_X = ("target_step", "target_step_80", "target_step_law", "observed_until")


def _steps_of(x: float | list | None, axis: ProgressAxis) -> float | list | None:
    """An x (or a band of them) at the job's steps; None stays None."""
    if x is None:
        return None
    return [float(v) for v in axis.steps(np.asarray(x, float))] if isinstance(x, list) else float(axis.steps(x))


def _metric_target(target: MetricTarget, points: tuple[np.ndarray, np.ndarray], history: ProgressHistory,
                   axis: ProgressAxis | None, schedule: str | Schedule | None, budget: float, regime: str,
                   prior: PriorArg, calibration: Calibration | None = None) -> dict:
    """``metric_target.predict_target`` over the loss fit's x: the steps, or once the batch changed the axis's x of
    the samples trained by each reported step (read off the progress). Binned as the loss is: a metric reported
    inside every step is as many points as the loss, and as noisy."""
    steps, values = binned_curve(*points)
    x = steps
    if axis is not None:
        logged = np.nan_to_num(history.column("step"))
        x = axis.x(np.interp(steps, logged, history.column("samples")))
    sched = schedule if isinstance(schedule, Schedule) else parse_schedule(schedule or "constant", float(budget))
    return predict_target(target, x, values, sched, regime, prior(sched) if callable(prior) else prior, calibration)


def loss_curve(fit: dict) -> LossCurve:
    return LossCurve(fit["beta0"], fit["beta1"], fit["beta2"], fit["scale"])


def _current_run(recs: list[dict], window: int) -> list[dict]:
    """The newest of the last ``window`` records (newest first) at the current (workers, batch), back to a restart."""
    if not recs:
        return []
    cfg = (recs[-1].get("workers"), recs[-1].get("batch_size"))
    tail = []
    for r in reversed(recs[-window:]):
        if (r.get("workers"), r.get("batch_size")) != cfg or r.get("time") is None:
            break
        if tail and _restart_between(r, tail):
            break
        tail.append(r)
    return tail


def _rate(tail: list[dict]) -> float | None:
    dt = tail[0]["time"] - tail[-1]["time"]
    ds = tail[0]["samples"] - tail[-1]["samples"]
    return ds / dt if dt > 0 and ds > 0 else None


def observed_rate(recs: list[dict], window: int = 50) -> float | None:
    """Wall-clock samples/s over the newest records at the current (workers, batch): unlike the per-step figure
    it includes everything between steps (data loading, logging, control polling, CPU sharing)."""
    tail = _current_run(recs, window)
    return _rate(tail) if len(tail) >= 3 else None


SPREAD_STEPS = 10   # the steps one rate of ``rate_spread`` is measured over


def rate_spread(recs: list[dict]) -> tuple[float, float] | None:
    """(10th, 90th percentile) of the wall-clock samples/s of the job's newest records at its current size, over
    windows of SPREAD_STEPS steps (None: fewer than 3 windows): how much its speed varied while it ran as it does now
    (a busy machine's other jobs: on a loaded 2-core one, 51 to 153 samples/s between the 10th and 90th percentile
    of an MLP's windows), which the remaining time at its newest rate does not say."""
    tail = _current_run(recs, RECENT)
    rates = [r for i in range(0, len(tail) - SPREAD_STEPS, SPREAD_STEPS)
             if (r := _rate(tail[i:i + SPREAD_STEPS + 1])) is not None]
    return (float(np.percentile(rates, 10)), float(np.percentile(rates, 90))) if len(rates) >= 3 else None


def _restart_gap(gap, typical_step: float):
    """Whether a gap (a number or an array of them) is a stop and restart: far longer than the job's steps."""
    return gap > max(RESTART_MIN_GAP_S, RESTART_GAP_STEPS * typical_step)


def _restart_between(older: dict, newer: list[dict]) -> bool:
    """A gap before ``newer[-1]`` far longer than the steps after it: the job was stopped and restarted in
    between (preempted, or resumed after a service restart) at the same configuration, so the start-up stall
    is not part of the rate it runs at now."""
    gap = newer[-1]["time"] - older["time"]
    steps = [a["time"] - b["time"] for a, b in zip(newer, newer[1:])]
    if not steps:           # one record after it: nothing to compare the gap with yet
        return False
    return _restart_gap(gap, float(np.median(steps)))


def predict(progress: ProgressHistory | list[dict], now: float, current_workers: int, current_batch: int | None,
            total_hint: float | None, samples_done: float, target_loss: float | None = None,
            gpu_types: tuple[str, ...] = (), max_local_batch: int | None = None, speed=None, refit_speed: bool = True,
            schedule: str | None = None, prior: PriorArg = None, regime: str = "scratch",
            lr_plan: dict | None = None, target: MetricTarget | None = None,
            metric_points: tuple[np.ndarray, np.ndarray] | None = None, metric_prior: PriorArg = None,
            bands: Callable[[str | None], Calibration] | None = None, task_schedule: Schedule | None = None):
    """(Prediction, speed model or None) for one job from its stored progress records (its LR schedule: the
    ``schedule`` SPEC, else the logged LR and the runtime's ``lr_plan`` where ``logged_schedule`` trusts them, else
    ``task_schedule`` (the shape its task's finished jobs ran: ``JobModels.task_schedule``) stretched to the budget,
    else constant). ``target``: a reported metric's value, predicted from ``metric_points`` (its (steps, values)) over the
    same x, schedule and budget (``service.metric_target``; ``metric_prior`` as ``prior`` is to the loss; ``bands``
    the bands of a metric kind, default the shipped table's: ``service.own_calibration``), as the
    loss fit's ``metric_target``. ``refit_speed=False``
    keeps ``speed`` (the caller's last fit): the speed model only learns something new from a new configuration,
    and its fit costs tens of ms, while the rest of this is cheap enough for every round."""
    history = progress if isinstance(progress, ProgressHistory) else ProgressHistory.of(progress)
    history = history.where(~np.isnan(history.column("samples")))
    recent = history.tail(RECENT)
    if refit_speed or speed is None:
        sample = speed_sample(history)
        speed = fit_speed(np.array([p.get("workers") or 0 for p in sample], float),
                          np.array([p.get("batch_size") or 0 for p in sample], float),
                          np.array([p.get("samples_per_s") or 0.0 for p in sample], float), gpu_types, max_local_batch)
    speed = with_reported_noise(speed, recent)
    batch = current_batch or (recent[-1].get("batch_size") if recent else None) or 1
    # the curve's x: the step, or once the batch changed the samples over the first batch (``service.progress_axis``,
    # where a SPEC's steps are that batch's); samples_per_x: the samples one x trains from now on
    axis = ProgressAxis.of(history)
    xs = np.nan_to_num(history.column("step")) if axis is None else axis.x(history.column("samples"))
    samples_per_x = batch if axis is None else axis.unit
    # the budget: the samples still to train after the last step
    budget = xs[-1] + max(0.0, total_hint - samples_done) / samples_per_x if total_hint and recent else None
    if budget is None and target_loss is not None and recent and schedule in (None, "constant"):
        # a convergence rule at constant LR has no budget; the law in S1 ∝ step does not depend on the
        # horizon, so look 10x the steps so far ahead for the target
        budget = 10.0 * max(xs[-1], 1.0)
    lr = f"{schedule} (declared)" if schedule else None
    if schedule is None and budget:
        schedule = logged_schedule(history, budget, lr_plan, axis, task_schedule if total_hint else None)
        if schedule is None and task_schedule is not None and total_hint:   # a budget of its own, not 10x so far
            schedule = stretched(task_schedule, budget, "as its task's finished jobs ran (none declared, none reported)")
        lr = None if schedule is None else schedule.spec
    loss_fit = fit_loss(xs, history.column("loss"),
                        budget_steps=budget, schedule=schedule, target_loss=target_loss, prior=prior, regime=regime,
                        calibration=None if bands is None else bands("loss"))
    if loss_fit is not None and "curve" in loss_fit:   # the LR the prediction assumed, and where it comes from
        loss_fit["lr"] = lr or "constant (none declared, none reported)"
    fitted = loss_fit.pop("fitted", None) if loss_fit else None
    total = total_hint
    if total is None and target_loss is not None and loss_fit and recent:
        # convergence rule: the samples until the schedule-aware fit reaches the target (Optimus without a budget)
        end = loss_fit.get("target_step") if "model" in loss_fit else \
            loss_curve(loss_fit).steps_to_loss(target_loss / loss_fit["scale"])
        if end is not None and math.isfinite(end):
            total = samples_done + max(0.0, end - xs[-1]) * samples_per_x
    frac = min(1.0, samples_done / total) if total else None
    remaining_s = finish = rate = remaining_range = None
    if total and (speed is not None or recent):
        # at the batch it trains (a script's: its records'), not 0: the all-reduce model's 0/0 failed the refit
        rate = observed_rate(recent) or (speed.throughput(max(current_workers, 1), 1, batch) if speed else 0)
        if rate > 0:
            remaining_s = max(0.0, total - samples_done) / rate
            finish = now + remaining_s if current_workers > 0 else None
            if (spread := rate_spread(recent)) is not None and spread[0] > 0:
                left = max(0.0, total - samples_done)
                remaining_range = (min(left / spread[1], remaining_s), max(left / spread[0], remaining_s))
    ahead = rate or observed_rate(recent)

    logged = history.column("time")

    def time_at(x: float | None) -> float | None:
        """When the run gets to ``x`` at the rate it trains now (None: not by the budget, or not training); an ``x``
        the run already passed, when its log got there (a fact, also while it waits)."""
        if x is None:
            return None
        if x <= xs[-1]:
            seen = np.isfinite(logged)
            return float(np.interp(x, xs[seen], logged[seen])) if seen.any() else now
        return now + (x - xs[-1]) * samples_per_x / ahead if ahead and current_workers > 0 else None

    def times_at(fit: dict) -> dict:
        """When the run gets to its target (``target_time``) and the 80 % band of that (``target_time_80``)."""
        band = fit.get("target_step_80")
        times = None if band is None else [time_at(x) for x in band]
        return {"target_time": time_at(fit["target_step"]),
                "target_time_80": None if times is None or None in times else times}
    if loss_fit is not None and target_loss is not None and "target_step" in loss_fit:
        loss_fit.update(target_loss=target_loss, **times_at(loss_fit))
    target_fitted = None
    if target is not None and metric_points is not None and budget:   # also for a job that reports no loss
        try:
            reached = _metric_target(target, metric_points, history, axis, schedule, budget, regime, metric_prior,
                                     None if bands is None else bands(metric_kind(target.kind)))
        except ValueError as e:   # the row says why it has no prediction of the target (``metric_target.missing``)
            loss_fit = (loss_fit or {}) | {"metric_target_missing": missing(target, e)}
        else:
            target_fitted = reached.pop("fitted")
            loss_fit = (loss_fit or {}) | {"metric_target": reached | times_at(reached)}
    if axis is not None and loss_fit is not None:
        loss_fit = in_steps(loss_fit, axis, float(xs[-1]))
    return Prediction(frac, total, remaining_s, finish, loss_fit, rate or None, fitted, target_fitted,
                      remaining_range), speed
