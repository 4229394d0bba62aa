"""The online curve predictor: an observed prefix + budget + LR schedule -> final value, steps to a target,
calibrated 80 % intervals. The one entry point the CLI (``dlsched predict curve``), the service and the
simulator use: ``predict_curve``.

Fit window: the models are fitted from the end of the LR warm-up and of a slow start on (``perf.fit_window``:
convex laws fitted through those points extrapolate a floor far too high); the anchor, the noise and the
crossing still read the newest points of the whole prefix.

Model choice (held-out validation on the prefix): the schedule-aware annealing law (``perf.annealing``) and
Optimus (``perf.convergence``) are both fitted to the first 75 % of the observed points and scored on the
rest; the lower RMSE wins and is refitted on every point. Optimus only competes while the LR stays constant
from the first point to the budget: it cannot represent a decay, so its score on a pre-decay prefix says
nothing about the drop still to come.

Metrics are modelled lower-is-better: ``loss`` and ``error`` as they are, ``accuracy`` as 1 − accuracy
(100 − accuracy when given in percent). Targets and outputs are in the user's metric; an accuracy target
on the other scale than the data (93 for 0–1 data, 0.93 for data in %) is read on the data's
(``MetricSpace.target``).

Unreachable: a target is unreachable when even the ``floor`` misses it: the value now less the predicted
remaining improvement stretched by the most the calibration allows at the stricter
``calibration.UNREACHABLE_LEVEL`` (``Calibration.reach``; never above the 80 % interval's low end: saying
"never" to a run that gets there is the costlier error; nor above the value now: a target the log already
reached is reached, even where the fit ends above it, and so is one its 3-point running median once got to, though
the value now is back above it). Before the LR reaches its peak (a warm-up, a one-cycle's
rise) the floor is 0: the prefix has seen none of the phase in which the run makes most of its progress, and a
loss that rises with the LR says nothing of where it ends. In units of the remaining improvement, not of
the value, because a run cannot fall further than it still has to go. A target reachable only below the
point prediction is reported at the budget.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from statistics import NormalDist

import numpy as np
from scipy.stats import t as student_t

from dlsched.perf.annealing import AnnealingCurve, CurvePrior, fit_annealing
from dlsched.perf.calibration import Z_80, Calibration, load_calibration
from dlsched.perf.convergence import fit_curve
from dlsched.perf.first_passage import (first_passage, log_interval, logged_crossing, logged_noise,
                                         running_median, value_grain)
from dlsched.perf.fit_window import ONSET_MIN, fit_start
from dlsched.perf.one_point import members
from dlsched.perf.perfect_points import with_stand_in
from dlsched.perf.prior import REGIMES
from dlsched.perf.schedule import Schedule, areas

METRICS = ("loss", "error", "accuracy")
HOLDOUT = 0.25
MIN_POINTS = 2     # after training starts: the law's two linear terms (through both); α and c from the prior
MIN_MEMBERS = 3    # finished runs whose shapes a one-point prediction carries (``perf.one_point``)
DENSE_POINTS = 4   # the fewest the calibration's prefixes had (bench/prediction_accuracy.py)


@dataclass(frozen=True)
class MetricSpace:
    """Maps the user's metric to the lower-is-better value the models fit, and back."""

    metric: str
    top: float = 1.0   # accuracy: 1 or 100

    @classmethod
    def of(cls, metric: str, values) -> "MetricSpace":
        if metric not in METRICS:
            raise ValueError(f"metric must be one of {', '.join(METRICS)}, got {metric!r}")
        values = np.asarray(values, float)
        top = 100.0 if metric == "accuracy" and values.size and np.nanmax(values) > 1.0 else 1.0
        return cls(metric, top)

    def down(self, v):
        v = np.asarray(v, float)
        return self.top - v if self.metric == "accuracy" else v

    up = down  # the map is its own inverse

    def target(self, v: float) -> float:
        """A target in the user's metric, on the data's accuracy scale: 93 against 0–1 data means 0.93 and 0.93
        against data in % means 93 (otherwise one reads as unreachable, the other as reached long ago)."""
        if not math.isfinite(v):
            raise ValueError(f"target must be a finite number, got {v}")
        if self.metric == "accuracy":
            if self.top == 1.0 and 1.0 < v <= 100.0:
                v /= 100.0
            elif self.top == 100.0 and 0.0 < v <= 1.0:
                v *= 100.0
            if not 0.0 <= v <= self.top:
                raise ValueError(f"accuracy target must be in 0–1 or 0–100 %, got {v:g}")
        return v


@dataclass(frozen=True)
class CurvePrediction:
    model: str                          # "annealing" | "optimus" | "prior" (finished runs: from 0 or 1 point)
    x_now: float
    budget: float
    final_value: float                  # predicted metric at the budget
    final_value_interval_80: tuple[float, float]
    floor: float                        # best value the run can reach (module doc)
    target: float | None
    target_step: float | None           # x at which the target is reached; None when unreachable
    steps_to_target: float | None       # target_step − x_now
    interval_80: tuple[float, float] | None   # for steps_to_target
    curve_x: np.ndarray                 # predicted curve from the first fitted x to the budget (user's metric)
    curve_y: np.ndarray
    fitted: AnnealingCurve | None = None   # the annealing fit (its α and c feed ``perf.prior``); None: Optimus
    p_reach: float | None = None        # chance the run reaches the target by the budget (calibrated final band)
    resolution: float = 0.0             # the log's interval: the steps band scales max(steps, this)
    bands: str = "fit"                  # the calibration table the bands came from (``Calibration.TABLES``)
    law_step: float | None = None       # the law's own crossing, before the calibrated shift: ahead, before the budget

    @property
    def reachable(self) -> bool:
        return self.target is None or self.target_step is not None

    @property
    def reached(self) -> bool:
        """The log already got to the target (a fact: ``target_step`` is where)."""
        return self.target_step is not None and self.target_step <= self.x_now

    @property
    def target_step_80(self) -> list[float] | None:
        """The x where the target is reached, its 80 % band (``interval_80`` from now); None unless the predicted
        curve crosses it ahead, before the budget: not for a crossing the log already made (a fact), one only at the
        budget (a bound: the run must beat its prediction) or none."""
        if self.interval_80 is None or self.target_step is None or not self.x_now < self.target_step < self.budget:
            return None
        return [self.x_now + self.interval_80[0], self.x_now + self.interval_80[1]]

    def beyond_final(self, metric: str) -> bool:
        """The target lies past the predicted final value, in the direction ``metric`` improves, and the log has not
        got there: ``target_step`` is then the budget, reached only if the run beats its prediction (``p_reach``).
        Not ``p_reach < 0.5``: a calibrated median above the prediction (runs that ended a little worse than
        predicted) puts the chance below one half for a target the predicted curve does cross."""
        if self.target is None or self.target_step is None or self.reached:
            return False
        return self.target > self.final_value if metric == "accuracy" else self.target < self.final_value

    def as_json(self) -> dict:
        r = lambda v: None if v is None or not math.isfinite(v) else float(v)  # noqa: E731  (JSON has no NaN)
        return {"model": self.model, "observed_until": self.x_now, "budget": self.budget,
                "final_value": r(self.final_value), "final_value_interval_80": [r(v) for v in self.final_value_interval_80],
                "floor": r(self.floor), "target": r(self.target), "target_step": r(self.target_step),
                "steps_to_target": r(self.steps_to_target),
                "interval_80": None if self.interval_80 is None else [r(v) for v in self.interval_80],
                "p_reach": r(self.p_reach), "bands": self.bands}


def _optimus(x, y, schedule: Schedule):
    fit = fit_curve(x, y)
    return lambda q: fit.curve.raw_loss(np.maximum(np.asarray(q, float), 0.0))


def _annealing(x, y, schedule: Schedule, prior: CurvePrior | None):
    return fit_annealing(x, y, schedule, prior)


def _as_function(fitted):
    return fitted.value if isinstance(fitted, AnnealingCurve) else fitted


def choose_model(x, y, schedule: Schedule, prior: CurvePrior | None) -> tuple[str, object]:
    """(name, fitted model: an ``AnnealingCurve`` or Optimus' curve function) of the model that predicts the
    held-out end of the prefix best (module doc)."""
    fitters = {"annealing": lambda a, b: _annealing(a, b, schedule, prior)}
    if not schedule.anneals_after(float(x[0])):
        fitters["optimus"] = lambda a, b: _optimus(a, b, schedule)
    if len(fitters) > 1:
        cut = max(DENSE_POINTS - 1, int(round(len(x) * (1 - HOLDOUT))))   # 3 points: annealing, no holdout
        if cut < len(x):
            def score(fit):
                try:
                    f = _as_function(fit(x[:cut], y[:cut]))
                except ValueError:
                    return math.inf
                return float(np.sqrt(np.mean((f(x[cut:]) - y[cut:]) ** 2)))
            best = min(fitters, key=lambda n: score(fitters[n]))
            fitters = {best: fitters[best]}
    name, fit = next(iter(fitters.items()))
    return name, fit(x, y)


def anchor(x, y, f, tail: float = 0.2) -> float:
    """Ratio of the newest points (the last fifth, at least 5, at most the newer half) to the fit there: the
    prediction continues from where the run *is* (a fit a few % off at the end would otherwise say a target is
    already reached, or never); a fifth, not the last few, so that minibatch noise does not move the whole
    curve; never the older half of a short prefix, whose first points a fast fall puts far above a fit that
    weighs the newest most (a 5-point prefix was scaled by its first point to twice the fit)."""
    k = min((len(x) + 1) // 2, max(5, int(round(tail * len(x)))))
    r = float(np.mean(y[-k:]) / np.mean(f(x[-k:])))
    return r if np.isfinite(r) and r > 0 else 1.0


def with_level_prior(grid, curve, x_now: float, prior: CurvePrior, fit_sigma: float) -> np.ndarray:
    """The predicted curve moved toward where finished runs of the same task ended (``perf.prior``): the final
    value becomes the precision-weighted mean, in log space, of the fit's (its calibrated sigma) and the
    prior's; the shift grows with the predicted progress from now to the budget, so the curve still starts
    where the run is."""
    w_fit = fit_sigma ** -2 / (fit_sigma ** -2 + prior.final_sigma ** -2)
    now = float(np.interp(x_now, grid, curve))
    shift = (1 - w_fit) * math.log(prior.final / float(curve[-1]))
    span = math.log(now / float(curve[-1]))
    if abs(span) > 1e-12:
        # progress in log space, as the shift is: the curve becomes now·(curve/now)^(1 − shift/span), as monotone
        # as the fit's. Linear progress under a log shift raised a digits error curve predicted from 0.22 to 0.0025,
        # levelled to 0.02, to 0.53 before it fell (an accuracy predicted to drop from 78 % to 47 %)
        progress = np.clip(np.log(now / curve) / span, 0.0, 1.0)
    else:   # a flat prediction: by the share of the remaining x
        progress = np.clip((grid - x_now) / (grid[-1] - x_now), 0.0, 1.0)
    return curve * np.exp(shift * np.where(grid >= x_now, progress, 0.0))


def predict_curve(x, values, schedule: Schedule, *, metric: str = "loss", target: float | None = None,
                  target_fraction: float | None = None, prior: CurvePrior | None | str = "shipped",
                  calibration: Calibration | None = None, regime: str = "scratch",
                  scale: float | None = None) -> CurvePrediction:
    """Predict the run's end from the observed (x, metric) prefix; see the module docstring.

    ``prior``: "shipped" (the development set's finished fits, ``calibration.json``), a ``CurvePrior`` (e.g.
    ``perf.prior.prior_from_fits`` of this cluster's finished jobs) or None. ``regime`` (``perf.prior.REGIMES``:
    scratch or finetune) picks the shipped prior's pool; a given ``CurvePrior`` was made for its run already.
    ``target`` is in the metric's units; ``target_fraction`` instead asks for that fraction of the total
    improvement from the first observed value to the predicted final value. ``scale``: an accuracy's top (1 or
    100) where no point tells it (a prediction before the first point).
    """
    x = np.asarray(x, float)
    space = MetricSpace.of(metric, values)
    if not len(x) and scale is not None:
        space = MetricSpace(metric, scale)
    y = space.down(values)
    ok = np.isfinite(x) & np.isfinite(y)
    x, y = x[ok], y[ok]
    if np.any(np.diff(x) <= 0):
        raise ValueError("x must increase")
    # an accuracy of 100 %, a loss of 0: fitted at a positive stand-in below any positive goal (``perf.perfect_points``)
    y = with_stand_in(y, None if target is None else goal_of(y, 0.0, target, None, space))
    if np.any(y <= 0):   # the models are relative (log-space): name the point that leaves nothing to model
        i = int(np.argmax(y <= 0))
        shown = float(np.asarray(values, float)[ok][i])
        if metric == "accuracy" and shown > space.top:   # 101 on % data: no scale holds it
            raise ValueError(f"accuracy values must be in 0–1 or 0–100 %, got {shown:g} at x = {x[i]:g}")
        raise ValueError(f"{metric} values must leave a positive {'error' if metric == 'accuracy' else metric}: "
                         f"{shown:g} at x = {x[i]:g}")
    if regime not in REGIMES:
        raise ValueError(f"regime must be one of {', '.join(REGIMES)}, got {regime!r}")
    cal = (calibration or load_calibration()).for_metric(metric)
    if isinstance(prior, str):
        prior = cal.curve_prior(metric, schedule, regime)
    # points before any LR has been applied (x = 0: the initial evaluation) are outside the law's domain
    # (S1 = 0): fitted by neither model, and never read by the anchor or the noise, which would scale the
    # curve by y / f(0) = 0
    lr_applied = areas(schedule, x)[0] > 0
    trained = int(np.argmax(lr_applied)) if lr_applied.any() else len(x)
    # before the first point, or from one: the task's finished runs where two or more are known, else (one point)
    # other runs' shapes through it (bench/prediction_accuracy.py: from one point, the task's runs alone missed the
    # final and the steps several times less than the shapes through the point with their level)
    if len(x) - trained <= 1 and (alone := task_runs_prediction(x, y, space, schedule, metric, target,
                                                                target_fraction, prior)) is not None:
        return alone
    if len(x) - trained == 1 and (one := one_point_prediction(x, y, space, schedule, cal, metric, regime, target,
                                                               target_fraction, prior)) is not None:
        return one
    if len(x) - trained < MIN_POINTS:
        one = " (or two finished runs of its task)" if len(x) == trained else \
            " (one takes the finished runs' shapes, and this calibration has none)"
        before = f" (no LR applied yet at x <= {x[trained - 1]:g})" if trained else ""
        raise ValueError(f"need at least {MIN_POINTS} observed points after training starts{before}, "
                         f"got {len(x) - trained}{one}")
    xs, ys = x[trained:], y[trained:]
    B, x_now = schedule.budget, float(x[-1])
    # past the warm-up and a slow start (``perf.fit_window``), while DENSE_POINTS remain (all of a sparse log's)
    start = fit_start(xs, ys, schedule, min(DENSE_POINTS, len(xs)))
    name, fitted = choose_model(xs[start:], ys[start:], schedule, prior)
    f = _as_function(fitted)
    # the curve from the first point fitted on: before it (a warm-up, a slow start) the law describes nothing
    grid = np.unique(np.concatenate([np.linspace(float(xs[start]), B, 1024), [x_now, B]]))
    curve = f(np.maximum(grid, 1e-9)) * anchor(xs, ys, f)
    # the calibration's row: the observed fraction, or with fewer than DENSE_POINTS points (a sparse evaluation
    # log) its earliest, widest one: the bands were calibrated on prefixes of at least that many points
    frac = min(1.0, x_now / B) if len(xs) >= DENSE_POINTS else min(x_now / B, cal.fractions[0])
    # "never" rests on the fit alone: a level prior borrowed from other runs may sharpen the point and its band,
    # but a run unlike those runs (a schedule none of them had) must not be told its target is out of reach
    # and from a short prefix at the widest reach (the earliest fraction's): the reach per fraction was calibrated on
    # dense prefixes, and fewer than ONSET_MIN points cannot show a curve's shape (a 4-point plateau, then 16x lower)
    reach = cal.reach_log(frac if len(xs) >= ONSET_MIN else min(frac, cal.fractions[0]))
    bands = "fit"
    if prior is not None and prior.final is not None and x_now < B:
        curve = with_level_prior(grid, curve, x_now, prior, cal.fit_sigma(frac))
        bands = cal.level_table(prior.final_carried)
        cal = cal.table(bands)
    final = float(curve[-1])
    now = float(np.median(y[-3:]))
    ended = x_now >= B
    if ended:   # at its budget the final is where the log ended (its running median's), not the fit's value there
        final = float(running_median(y)[-1])   # (a stdlib LM's: 2.377, below the floor, the lowest the log got: 2.411)
    # the fit alone before the LR's peak: the earliest, widest row's final band, as for a sparse log (the prefix has seen
    # none of the run's main phase, as the floor below says; a one-cycle's rise at 25 % took the 25 % band, set on runs
    # past their peak, and said "< 1 %" of a target the run reached). A level's tables hold such runs at their fraction
    band_frac = min(frac, cal.fractions[0]) if bands == "fit" and x_now < schedule.peak_at() else frac
    lo_f, hi_f = cal.final_band(band_frac)
    mid_f = cal.final_centre(band_frac)
    final_lo, final_hi, worst = final_interval(final, lo_f, hi_f, y, metric, space)
    if ended:
        final_lo = final_hi = final
    goal = goal_of(y, final, target, target_fraction, space)
    # the remaining improvement the reach scales is at least one step of the log's values: a flat stretch of a
    # metric that moves a sample at a time is no evidence its improvement ended
    floor = final_lo if reach is None or now <= final else \
        min(final_lo, max(0.0, now - (now - final + value_grain(y)) * math.exp(reach)))
    # the run is already there: no prediction (a final above now: a rise, or a misfit) may put it out of reach
    floor = min(floor, now)
    if x_now < schedule.peak_at():
        floor = 0.0   # the LR still rises to its peak: the prefix has seen none of the run's main phase
    if ended:   # at its budget: no training left, so a target the log has not got to is out of reach
        floor = min(now, float(running_median(y).min()))
    target_step = steps = interval = law_step = None
    resolution = log_interval(x)
    # already there: the value now, or the log's smoothed value once (a noisy accuracy that got to 93 % at 320 and is
    # at 92.4 % at 400 reached it at 320, the benchmark's truth; its next point was "already reached at 400")
    there = goal is not None and (now <= goal or logged_crossing(x, y, goal) is not None)
    if goal is not None and (there or goal >= floor):
        if there:   # where the log got there (a fact, not a prediction), 0 steps from now
            target_step = logged_reach(x, y, goal)
        else:
            # when the logged value, smoothed by a 3-point median, first gets there (``perf.first_passage``)
            ahead = grid >= x_now
            hit = first_passage(grid[ahead], curve[ahead], x, y, goal, logged_noise(xs, ys, f))
            target_step = B if hit is None else min(hit, B)
        raw = max(target_step - x_now, 0.0)
        stated = target_fraction is None   # a value the user stated, not a share of the predicted improvement
        lo_s, hi_s = cal.steps_band(frac, stated)
        # the point is the calibrated median (``Calibration.steps_shift``) of a crossing ahead; a crossing
        # behind (a fact) and "only at the budget" (a bound) stay as they are
        steps = raw
        if 0.0 < raw and target_step < B:
            law_step = target_step
            steps = min(raw * math.exp(cal.steps_shift(frac, stated)), B - x_now)
            target_step = x_now + steps
        interval = steps_interval(steps, raw, resolution, (lo_s, hi_s), B - x_now)
    lo_v, hi_v = sorted((float(space.up(final_lo)), float(space.up(final_hi))))
    p_reach = None if goal is None else 1.0 if there else 0.0 if ended else \
        reach_chance(goal, now, final, lo_f, mid_f, hi_f, worst)
    return CurvePrediction(name, x_now, B, float(space.up(final)), (lo_v, hi_v), float(space.up(floor)),
                           None if goal is None else float(space.up(goal)), target_step, steps, interval,
                           grid, np.asarray(space.up(curve), float),
                           fitted if isinstance(fitted, AnnealingCurve) else None, p_reach, resolution, bands,
                           law_step)


def final_interval(final: float, lo: float, hi: float, y, metric: str,
                   space: "MetricSpace") -> tuple[float, float, float]:
    """(low end, high end of the final value's band ``final`` · e^[lo, hi], the worst value logged), lower-is-better.
    An error band is multiplicative: capped at 100 % error, never below 0 accuracy. No worse than the worst value
    logged: the 10 % band reaches e^0.7 above the point, past a sparse log's first value, and none of the 75
    development and public runs ended above its worst logged value at 10, 25 or 50 % observed (layoutlmv3's collapse
    included)."""
    worst = max(float(np.max(y)), final)
    high = min(final * math.exp(hi), worst)
    return final * math.exp(lo), min(high, space.top) if metric == "accuracy" else high, worst


def goal_of(y, final: float, target: float | None, target_fraction: float | None,
            space: "MetricSpace") -> float | None:
    """The target in the lower-is-better space: ``target_fraction`` of the improvement from the first value to
    ``final``, or the stated ``target``; None without either."""
    if target_fraction is not None:
        return float(y[0] - target_fraction * (y[0] - final))
    return None if target is None else float(space.down(space.target(target)))


def logged_reach(x, y, goal: float) -> float:
    """Where the log got to ``goal`` it is at now (a fact, not a prediction): its smoothed crossing, or the last x."""
    crossed = logged_crossing(x, y, goal)
    return float(x[-1]) if crossed is None else min(crossed, float(x[-1]))


def curve_reach(grid, curve, goal: float) -> float:
    """The first x of ``grid`` where the predicted ``curve`` is at or below ``goal``; the grid's end (the budget) if
    never."""
    hit = curve <= goal
    return float(grid[np.argmax(hit)] if hit.any() else grid[-1])


def steps_interval(steps: float, raw: float, resolution: float, band: tuple[float, float],
                   room: float) -> tuple[float, float]:
    """The 80 % band of ``steps``: the log band scales the raw crossing from at least one logging interval (a crossing
    is known no finer, and no factor widens a 0, "already there", the run may still be far from: as 0, it made the
    bands' ends e^20), never past the budget (``room`` from now) and always around ``steps``."""
    base = max(raw, resolution)
    return min(steps, base * math.exp(band[0])), min(room, max(steps, base * math.exp(band[1])))


def one_point_prediction(x, y, space: "MetricSpace", schedule: Schedule, cal: Calibration, metric: str, regime: str,
                         target: float | None, target_fraction: float | None,
                         prior: CurvePrior | None) -> CurvePrediction | None:
    """The prediction from one point after training starts (``perf.one_point``: the weighted median of the finished
    runs' shapes through it, the calibration's one-point bands); None where fewer than ``MIN_MEMBERS`` finished runs
    have a shape to carry. ``y`` lower-is-better."""
    x1, y1, B = float(x[-1]), float(y[-1]), schedule.budget
    if x1 >= B:
        return None
    meta = {"metric": metric, "regime": regime, "decay": schedule.decay}
    curves, w = members(cal.finished_fits(), meta, schedule, x1, y1, (prior or CurvePrior()).drop)
    if len(curves) < MIN_MEMBERS:
        return None
    grid = np.unique(np.concatenate([np.linspace(x1, B, 1024), [B]]))
    lines = np.array([c.value(grid) for c in curves])
    logs = np.log(lines[:, -1])
    curve = lines[int(np.argmin(np.abs(logs - np.quantile(logs, 0.5, weights=w, method="inverted_cdf"))))]
    (lo_f, hi_f), (lo_s, hi_s) = cal.one_point_bands()
    if prior is not None and prior.final is not None:   # a same-task level (--like, the service's finished jobs)
        curve = with_level_prior(grid, curve, x1, prior, (hi_f - lo_f) / (2 * Z_80))
    final = float(curve[-1])
    final_lo, final_hi, worst = final_interval(final, lo_f, hi_f, y, metric, space)
    goal = goal_of(y, final, target, target_fraction, space)
    target_step = steps = interval = None
    resolution = log_interval(x)
    if goal is not None:
        if y1 <= goal:   # already there: where the log got there
            target_step, steps, interval = logged_reach(x, y, goal), 0.0, (0.0, 0.0)
        else:   # the budget where the curve never gets there: one point cannot tell a target unreachable
            target_step = curve_reach(grid, curve, goal)
            steps = target_step - x1
            interval = steps_interval(steps, steps, resolution, (lo_s, hi_s), B - x1)
    p_reach = None if goal is None else reach_chance(goal, y1, final, lo_f, 0.0, hi_f, worst)
    lo_v, hi_v = sorted((float(space.up(final_lo)), float(space.up(final_hi))))
    return CurvePrediction("prior", x1, B, float(space.up(final)), (lo_v, hi_v), float(space.up(0.0)),
                           None if goal is None else float(space.up(goal)), target_step, steps, interval,
                           grid, np.asarray(space.up(curve), float), None, p_reach, resolution, "one_point")


def task_runs_prediction(x, y, space: "MetricSpace", schedule: Schedule, metric: str, target: float | None,
                         target_fraction: float | None, prior: CurvePrior | None) -> CurvePrediction | None:
    """The prediction from the run's task's finished runs alone, before its first point after training starts or
    from one: each run on its schedule (``CurvePrior.level_curves``), their weighted geometric mean the curve (its end is the
    level prior's final) from the last x; the final band the level's predictive log spread; a target's steps band
    where that curve moved to the band's ends crosses it. None without two such runs. ``y`` lower-is-better: an
    evaluation before training, a first point, or none; the goal of ``target_fraction`` is from the first value (the
    curve's first, without one). Never unreachable (floor 0): no point shows where the run flattens; ``p_reach``
    says how likely."""
    if prior is None or prior.final is None or len(prior.level_curves) < 2:
        return None
    B = schedule.budget
    x0 = float(x[-1]) if len(x) else 0.0
    if x0 >= B:
        return None
    # from the LR's peak (the finished runs' fits start past a warm-up: ``perf.fit_window``), at most a tenth in
    # (a one-cycle's rise), never at the law's pole at S1 = 0
    start = max(x0, min(schedule.peak_at(), 0.1 * B), 0.01 * B)
    grid = np.unique(np.concatenate([np.linspace(start, B, 1024), [B]]))
    weights = prior.level_weights or (1.0,) * len(prior.level_curves)
    kept = [(v, w) for c, w in zip(prior.level_curves, weights) if np.all(np.isfinite(v := c.value(grid))) and np.all(v > 0)]
    if len(kept) < 2:
        return None
    lines = [v for v, _ in kept]
    curve = np.exp(np.average(np.log(lines), axis=0, weights=[w for _, w in kept]))
    # Student's t: the spread is estimated from the runs themselves (two runs' spread is a guess: 3.1 σ, not 1.28 σ)
    final, z = float(curve[-1]), float(student_t.ppf(0.9, len(lines) - 1)) * prior.final_sigma
    final_lo, final_hi = final * math.exp(-z), final * math.exp(z)
    first = float(y[0]) if len(y) else float(curve[0])   # the improvement from the evaluation before training
    now = float(y[-1]) if len(y) else math.inf   # nothing logged has reached anything (the curve may start below it)
    goal = goal_of(np.array([first]), final, target, target_fraction, space)
    target_step = steps = interval = None
    if goal is not None:
        there = now <= goal
        target_step = logged_reach(x, y, goal) if there else curve_reach(grid, curve, goal)
        steps = 0.0 if there else target_step - x0
        # where the curve moved to the band's ends gets there
        interval = (0.0, 0.0) if there else (curve_reach(grid, curve * math.exp(-z), goal) - x0,
                                             curve_reach(grid, curve * math.exp(z), goal) - x0)
    p_reach = None if goal is None else reach_chance(goal, now, final, -z, 0.0, z)
    lo_v, hi_v = sorted((float(space.up(final_lo)), float(space.up(min(final_hi, space.top) if metric == "accuracy"
                                                                     else final_hi))))
    return CurvePrediction("prior", x0, B, float(space.up(final)), (lo_v, hi_v), float(space.up(0.0)),
                           None if goal is None else float(space.up(goal)), target_step, steps, interval,
                           grid, np.asarray(space.up(curve), float), None, p_reach, log_interval(x), "task_runs")


def reach_chance(goal: float, now: float, final: float, lo: float, mid: float, hi: float,
                 worst: float = math.inf) -> float:
    """P(final value <= goal), log(true/predicted final) a split normal through the calibrated quantiles: the
    10th (lo), the median (mid) and the 90th (hi), cut at the worst value logged; 1 once the run is there.
    Lower-is-better space."""
    if now <= goal:
        return 1.0
    if goal <= 0 or final <= 0:
        return 0.0

    def below(value: float) -> float:
        error = math.log(value / final) - mid
        sigma = max(((mid - lo) if error < 0 else (hi - mid)) / Z_80, 1e-6)   # each side its own spread
        return NormalDist().cdf(error / sigma)

    cut = below(worst)   # worst > goal here: the run is not there yet, and nothing logged is worse than worst
    return below(goal) / cut if cut > 0 else 0.0
