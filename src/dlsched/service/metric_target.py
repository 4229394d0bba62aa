"""When a job reaches a stated value of a metric its script reports (``spec.MetricTarget``: an evaluation's accuracy
between steps, a training accuracy inside them, ...): the schedule-aware fit (``perf.curve_predict``, as ``dlsched
predict curve`` makes it) of that metric's points, on the x, schedule and budget of the job's loss fit
(``service.refit``)."""
from __future__ import annotations

import math
from typing import Callable, Iterable

import numpy as np

from dlsched.perf.annealing import CurvePrior
from dlsched.perf.calibration import Calibration
from dlsched.perf.curve_predict import MetricSpace, predict_curve
from dlsched.perf.first_passage import logged_crossing
from dlsched.perf.schedule import Schedule
from dlsched.spec import MetricTarget

# the runtime's event for a metric reported between steps (``dlsched.torch``'s ``report``), as the service stores it
METRICS_EVENT = "job_metrics"
CURVE_POINTS = 121   # as the loss fit's drawn curve (``service.refit.fit_loss``)


def reported(values: Iterable[tuple[float, float]]) -> tuple[np.ndarray, np.ndarray]:
    """(steps, values), ascending, of a metric's reports (``Store.metric_values``); a step reported twice keeps its
    last value (an evaluation repeated after a restart, or one after the step that also reported it)."""
    at = dict(values)
    steps = np.array(sorted(at))
    return steps, np.array([at[s] for s in steps])


def predict_target(target: MetricTarget, x: np.ndarray, values: np.ndarray, schedule: Schedule, regime: str,
                   prior: CurvePrior | None = None, calibration: Calibration | None = None) -> dict | None:
    """``{"metric", "kind", "target", "final", "final_80", "bands", "target_step", "target_step_80", "target_reached",
    "target_chance", "target_beyond_final", "observed_until", "target_step_law", "points", "curve", "fitted"}`` (x in the loss fit's units;
    values in the job's own, an accuracy in % or as a fraction as it reports it; ``target_step`` None: not by the
    budget; ``target_step_80`` its 80 % band, None unless ahead (``CurvePrediction.target_step_80``);
    ``target_reached``: the log got there; ``target_beyond_final``: past the predicted final value, ``target_step``
    the budget's (``CurvePrediction.beyond_final``); ``target_step_law`` and ``observed_until`` as ``refit.fit_loss``'s;
    ``curve``: [x, value] from the first point fitted to the budget, drawn as the loss fit's is; ``fitted``: the
    annealing fit, in fractions (``reported_scale``), not JSON). Raises ValueError, saying why, where the predictor
    refuses (values it cannot model, such as an accuracy of 100 % at every point; no point and fewer than two
    finished runs of the task): the refit stores why as its row's ``metric_target_missing`` (``missing``). No point, or one
    (a first evaluation), is predicted from the task's finished runs, one without two of them from other runs' shapes
    (``perf.curve_predict``). ``prior``: from the
    finished jobs' fits of such targets (``service.job_models``); None: the shipped prior of the target's kind.
    ``calibration``: the bands (None: the shipped table; the service's: ``service.own_calibration``)."""
    if target.kind == "accuracy" and len(values) and (high := float(np.nanmax(values))) > 100.0:
        # read as %, 101 became 1.01, which the predictor read as % again: a final of 427 %
        raise ValueError(f"accuracy reports must be in 0–1 or 0–100 %, got {high:g}")
    scale = reported_scale(target, values)
    # in fractions: the finished jobs' finals the prior carries are (``ended_at``); the target's 93 reads 0.93
    p = predict_curve(x, np.asarray(values, float) / scale, schedule, metric=target.kind, target=target.value,
                      regime=regime, prior="shipped" if prior is None else prior, calibration=calibration)
    grid = np.linspace(max(float(x[0]), float(p.curve_x[0])) if len(x) else float(p.curve_x[0]), schedule.budget,
                       CURVE_POINTS)
    drawn = np.interp(grid, p.curve_x, p.curve_y) * scale
    return {"metric": target.metric, "kind": target.kind, "target": target.value, "final": p.final_value * scale,
            "final_80": [v * scale for v in p.final_value_interval_80], "bands": p.bands, "target_step": p.target_step,
            "target_step_80": p.target_step_80, "target_reached": p.reached, "target_chance": p.p_reach,
            "target_beyond_final": p.beyond_final(target.kind), "observed_until": p.x_now, "target_step_law": p.law_step, "points": len(x),
            "curve": [[float(a), float(b)] for a, b in zip(grid, drawn)], "fitted": p.fitted}


def missing(target: MetricTarget, why: Exception) -> dict:
    """A refit's ``metric_target_missing``: the stated target it could not predict, and why (the predictor's one
    line). A row without the target's prediction and without a word on it read, on the dashboard and in ``show``
    (both read the newest row), as if the target had been dropped."""
    return {"metric": target.metric, "target": target.value, "why": str(why)}


def reached_at(target: MetricTarget, x: np.ndarray, values: np.ndarray) -> float | None:
    """The x where the job's reports of its target's metric first got there, as a 3-point median
    (``perf.first_passage.logged_crossing``, the truth the calibration's crossings are); None if they never did."""
    if not len(values):
        return None
    down, scale = fit_space(target, values), reported_scale(target, values)
    goal = MetricSpace.of(target.kind, np.asarray(values, float) / scale).target(target.value)
    return logged_crossing(x, [down(v) for v in values], float(MetricSpace(target.kind).down(goal)))


def reported_scale(target: MetricTarget, values) -> float:
    """100 for an accuracy the job reports in %, else 1. A target's fit, and the final its finished fit keeps, are
    in fractions, so that jobs reporting either way pool as one level (``perf.prior.level_prior``): in their own
    units one job's 0.24 error and another's 24 were averaged as two runs 100x apart."""
    if not len(values):   # none yet (a prediction before the first): as the target is stated, 93 in %
        return 100.0 if target.kind == "accuracy" and target.value > 1.0 else 1.0
    return MetricSpace.of(target.kind, values).top


def target_meta(meta: dict, target: MetricTarget) -> dict:
    """A job's ``perf.prior`` metadata (``service.job_models.job_meta``) as its stated target's: the metric it names,
    of the target's kind (``perf.prior.kind_of``)."""
    return meta | {"metric": target.metric, "kind": target.kind}


def fit_space(target: MetricTarget, values) -> Callable[[float], float]:
    """A value of the target's metric in the job's units (``values``: its reports) -> the lower-is-better space its
    fit and finished fit are in (an accuracy's error as a fraction)."""
    scale, space = reported_scale(target, values), MetricSpace(target.kind)
    return lambda v: float(space.down(v / scale))


def ended_at(target: MetricTarget, values: np.ndarray) -> float:
    """Where a target's metric is, as a finished fit keeps it (``perf.prior.FinishedFit.final``): the median of its
    last 3 reports, in its fit's space (``fit_space``)."""
    if not len(values):
        return math.nan
    down = fit_space(target, values)
    return float(np.median([down(v) for v in np.asarray(values, float)[-3:]]))
