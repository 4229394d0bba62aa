"""How well do the convergence models predict a run's end, and the speed model the step time?

Run: PYTHONPATH=src python bench/prediction_accuracy.py [--write-calibration]

Schedule-aware prediction (issue 14). Curves: the development set of real runs (``bench/curves/dev_set.py``:
our digits / char-GRU / char-transformer runs under every schedule family, fine-tune (digits 5-9 accuracy,
char-GRU loss) and over-fitting (breast-cancer loss) runs under four or five, five Pollux apps with the schedules of their training
scripts, the seed ResNet-50 log). Each curve is cut after 10 %, 25 %, 50 % of its budget; the predictor gets
that prefix, the schedule and the budget (the information a user has), and predicts:

* the final value (truth: mean of the last 3 logged points), error |pred/true − 1| in the lower-is-better
  space the models fit (loss, error rate): target <= 5 % median (also printed in the metric's own units, as
  ``final_value`` reports it: 0.95 vs 0.96 accuracy is 1 % there and 20 % as an error rate);
* the remaining steps to 95 % of the total improvement (target from the true curve, as a user's "93 %"
  would be; truth: first x where the 3-point running median reaches it; skipped where the prefix already
  did): target <= 20 % median;
* the steps' point is the law's crossing moved to the median of the other curves' steps errors
  (``Calibration.steps_shift``); the law's own crossing is printed beside it;
* 80 % intervals for both, calibrated leave-one-curve-out (the curve's own errors never set its band):
  coverage target 70–90 %;
* curves wrongly predicted unreachable (target reached by the run, predictor says unreachable): target 0.

The same is printed without the same-task level, cross-task only (the general case), and, as a ceiling that is
not a prediction, with each curve's own full-fit α and c as its prior (what a perfect shape prior would give);
the steps figures also as the crossing's miss in units of the budget and over the curves scored at every
fraction (the relative figure divides by a remaining that shrinks with the fraction).

Side by side, in the same run: Optimus alone (``perf.convergence.fit_curve`` on the same prefix, no schedule,
its residual-bootstrap intervals from ``perf.predict``). Then the prior (``perf.prior``) at 10 % observed:
none, the generic default, and fitted from the other curves' finished fits. Fit time: one prediction on a
1 000-point curve (a dev curve interpolated to 1 000 points): target <= 50 ms.
``--write-calibration`` writes ``perf/calibration.json`` from every dev curve (what the CLI uses), with two tables
for a prediction with a same-task level: ``carried`` (the finals carried to the run's schedule) and ``levelled``
(their plain mean, a job without a schedule), each's leave-one-curve-out coverage printed.

Optimus δ-rule (issue 2). Convergence. Curves: the seed log (``gpu-training/resnet50-p100-v2_per_epoch_from_log.csv``, train loss vs
cumulative steps) and the six Pollux apps (``pollux/traces/<app>/validation-<M0>.csv`` at the initial batch
M0, truncated at the artifact's max_epochs): the "loss" is the validation error (1 − accuracy / F1 / hit
rate) or the metric itself where it falls (deepspeech2 WER, yolov3 loss); x = iterations at M0.
Ground truth: the job really ends at the last epoch of its trace. The owner's threshold δ is the one that
makes the Optimus rule stop there according to the *reference* fit (the default, unweighted fit of the full
curve; fixed, so a fit variant under test never defines its own truth): ``LossCurve.delta_stopping_at``,
the decrease of the epoch that would start at the last step (``converged_step`` stops *before* an epoch that
gains < δ, so the reference fit predicts its own stop exactly — checked and printed). δ is carried in raw
loss units, so the partial fit's own normalisation cannot shift it. We fit only the first 10/25/50 % of
the epochs (at least 3 points), predict the stop step with that δ, and report
|predicted − actual remaining| / actual remaining. (bert has 2 epochs: too few points to fit -> skipped.)
Also printed: the same miss relative to the *total* steps (Optimus Fig. 6's metric); a target loss instead
of δ (the best loss the trace reaches), which is harder: near the asymptote a small loss error is a large
step error (inf = the partial fit never reaches it); and, for comparison with earlier runs, the δ-rule with
the old δ (decrease of the epoch that *ended* at the last step), which stops one epoch early by construction
(a built-in 1/remaining-epochs error, 14 % for ncf at 25 %).
Fit variants (recency weights, leave-one-curve-out): ``bench/convergence_variants.py``.

Speed. For each Pollux app (scalability.csv + placements.csv rows), fit the all-reduce model on 6 designed
samples (see ``design_samples``), on 6 random rows (mean of 5 draws) and on a random half, and predict every
other measured step; and the H100 compute model on 6 of the batch sizes of each model/dataset/precision,
predicting the rest. Targets (issue 2): remaining-steps error ≤ 10 % after 25 %; speed median error ≤ 5 % with ≤ 6 samples.
"""
from __future__ import annotations

import dataclasses
import math
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
from scipy.stats import norm

sys.path.insert(0, str(Path(__file__).resolve().parent / "curves"))

from dev_set import DevCurve, dev_curves  # noqa: E402

from dlsched.perf.annealing import CurvePrior, fit_annealing  # noqa: E402
from dlsched.perf.calibration import TABLE, Z_80, Calibration, calibrate, load_calibration  # noqa: E402
from dlsched.perf.convergence import LossCurve, fit_curve  # noqa: E402
from dlsched.perf.curve_predict import CurvePrediction, MetricSpace, predict_curve  # noqa: E402
from dlsched.perf.predict import remaining_steps  # noqa: E402
from dlsched.perf.one_point import relative_shape  # noqa: E402
from dlsched.perf.prior import finished_fit, has_law_shape, metric_kind, prior_from_fits, regime_of  # noqa: E402
from dlsched.perf.profile import POLLUX_APPS, h100_throughput, pollux_app, seed_log  # noqa: E402
from dlsched.perf.speed import fit_compute, fit_step_time, profiling_rows  # noqa: E402

FRACTIONS = (0.10, 0.25, 0.50)
CAL_FRACTIONS = (0.10, 0.25, 0.50, 0.75)
IMPROVEMENT = 0.95
WIDE = Calibration((0.1, 1.0), ((-5.0, 5.0),) * 2, ((-5.0, 5.0),) * 2)   # nothing unreachable: raw errors


@dataclass(frozen=True)
class Truth:
    final: float            # lower-is-better space
    target: float
    target_x: float
    resolution: float       # the logging interval: the truth's crossing is known to about this


def truth(c: DevCurve) -> Truth:
    """Final value: mean of the last 3 points. 95 % point: where the 3-point running median first reaches
    y0 − 0.95·(y0 − final), interpolated linearly from the point before (the prediction's grid is finer
    than the logging; taking the first logged x would put the truth up to one interval late)."""
    y = MetricSpace.of(c.metric, c.y).down(c.y)
    final = float(np.mean(y[-3:]))
    target = float(y[0] - IMPROVEMENT * (y[0] - final))
    return Truth(final, target, crossing(c, target), float(np.median(np.diff(c.x))))


def crossing(c: DevCurve, level: float) -> float:
    """Where the run's 3-point running median first got to ``level`` (lower-is-better space)."""
    y = MetricSpace.of(c.metric, c.y).down(c.y)
    smooth = pd.Series(y).rolling(3, center=True, min_periods=1).median().to_numpy()
    below = np.flatnonzero(smooth <= level)
    if not len(below):   # a noisy end whose median stays above its last 3 points' mean: it got there at its end
        return float(c.x[-1])
    i = int(below[0])
    if i > 0 and smooth[i - 1] > smooth[i]:
        return float(np.interp(level, [smooth[i], smooth[i - 1]], [c.x[i], c.x[i - 1]]))
    return float(c.x[i])


# stated targets (``--target``, a job's target loss or metric): the values these shares of the way from a run's
# first value to its final one, which it reached; fixed before the prediction, unlike --target-fraction's goal
STATED_SHARES = (0.5, 0.8, 0.9, 0.95, 0.99)


def stated_predictions(c: DevCurve, frac: float, cal: Calibration,
                       prior) -> list[tuple[float, float, CurvePrediction]]:
    """(share, remaining, prediction) of each stated target still at least ``MIN_INTERVALS`` logging intervals ahead
    of the prefix (remaining: x from the last observed point to the run's crossing), predicted as ``predict curve
    --target VALUE`` would from ``frac`` of the curve."""
    t, n = truth(c), prefix(c, frac)
    space = MetricSpace.of(c.metric, c.y)
    y0 = float(space.down(c.y[:1])[0])
    out = []
    for share in STATED_SHARES:
        level = y0 - share * (y0 - t.final)   # lower-is-better space
        remaining = crossing(c, level) - float(c.x[n - 1])
        if remaining >= MIN_INTERVALS * t.resolution:
            p = predict_curve(c.x[:n], c.y[:n], c.schedule, metric=c.metric, target=float(space.up(level)),
                              prior=prior, calibration=cal, regime=c.meta.get("regime", "scratch"))
            out.append((share, remaining, p))
    return out


def stated_records(c: DevCurve, frac: float, cal: Calibration, prior) -> list[tuple]:
    """Calibration records of the stated targets (``calibrate``'s last two columns): log(true / predicted steps),
    and the same where the crossing is predicted ahead, before the budget (what the median shift moves)."""
    out = []
    for _, remaining, p in stated_predictions(c, frac, cal, prior):
        if p.steps_to_target is None:
            continue
        err = math.log(remaining / max(p.steps_to_target, p.resolution, 1e-9 * c.schedule.budget))
        ahead = err if 0 < p.steps_to_target and p.target_step < c.schedule.budget else math.nan
        out.append((frac, math.nan, math.nan, math.nan, math.nan, err, ahead))
    return out


# Steps are scored only where the run still had at least this many logging intervals to go: the truth's
# crossing is a 3-point running median's, known to about one interval, so a remaining of one or two
# intervals would score the logging grid, not the predictor (those rows are counted in the report).
MIN_INTERVALS = 3


def thinned(c: DevCurve, points: int) -> DevCurve:
    """``c`` logged about ``points`` times (MLPerf and DAWNBench evaluate every few epochs)."""
    k = max(1, len(c.x) // points)
    keep = np.arange(k - 1, len(c.x), k)
    return dataclasses.replace(c, x=c.x[keep], y=c.y[keep])


ONE_POINT_THINNINGS = (6, 8, 10, 12, 16)   # evaluations per run whose first one is a one-point prediction's prefix


def one_point_rows(curves, cal: Calibration) -> pd.DataFrame:
    """One row per prediction from a curve's first evaluation at each thinning, with the shapes of the other tasks'
    fits only (``cal.without_task``): its task, log(true/predicted) of the final value (``final``) and of the
    remaining steps to ``--target-fraction 0.95``'s goal where at least ``MIN_INTERVALS`` remained (``steps``),
    and the log of the band's cap over the point (the worst value logged, ``cap``)."""
    rows = []
    for points in ONE_POINT_THINNINGS:
        for c in curves:
            t = thinned(c, points)
            try:
                p = predict_curve(t.x[:1], t.y[:1], t.schedule, metric=t.metric, target_fraction=IMPROVEMENT,
                                  calibration=cal.without_task(t.meta.get("dataset")),
                                  regime=t.meta.get("regime", "scratch"))
            except ValueError:   # no finished run's shape to carry, or the first evaluation before training
                continue
            space, truth_t = MetricSpace.of(t.metric, t.y), truth(t)
            pred = float(space.down(p.final_value))
            remaining = truth_t.target_x - float(t.x[0])
            ahead = remaining >= MIN_INTERVALS * truth_t.resolution and p.steps_to_target
            rows.append({"task": t.meta.get("dataset"), "kind": metric_kind(t.metric),
                         "final": math.log(truth_t.final / pred),
                         "steps": math.log(remaining / p.steps_to_target) if ahead else math.nan,
                         "cap": math.log(max(float(space.down(t.y[0])), pred) / pred)})
    return pd.DataFrame(rows)


def prefix(c: DevCurve, frac: float) -> int:
    return max(4, int(np.searchsorted(c.x, frac * c.schedule.budget, side="right")))


def evaluate(c: DevCurve, frac: float, cal: Calibration, prior: CurvePrior | None | str) -> dict:
    """One prediction from ``frac`` of curve ``c``, scored against the truth (lower-is-better space). ``prior`` as
    ``predict_curve`` takes it: "shipped" is the CLI's default (``cal``'s prior for the curve's metric and decay).

    Steps (the issue's "remaining steps to 95 % of the total improvement"): what a user running
    ``--target-fraction 0.95`` gets, i.e. the predictor's own 95 % point (from the first value to *its*
    predicted final value), against the x where the run really reached 95 % of *its* improvement, both from
    the last observed point. Also scored: the steps to the true curve's 95 % value given as a fixed
    ``--target`` (a level error of 1 % moves a crossing on a flat end by many steps), and whether that target,
    which every run reached, is called unreachable."""
    t, n = truth(c), prefix(c, frac)
    space = MetricSpace.of(c.metric, c.y)
    args = (c.x[:n], c.y[:n], c.schedule)
    regime = c.meta.get("regime", "scratch")   # what the user declares (``--regime``): the shipped prior's pool
    p = predict_curve(*args, metric=c.metric, target_fraction=IMPROVEMENT, prior=prior, calibration=cal, regime=regime)
    fixed = predict_curve(*args, metric=c.metric, target=float(space.up(t.target)), prior=prior, calibration=cal,
                          regime=regime)
    final = float(space.down(p.final_value))
    lo, hi = sorted(space.down(np.array(p.final_value_interval_80)))
    remaining = t.target_x - p.x_now
    now = float(np.median(space.down(c.y[n - 3:n])))
    row = {"curve": c.name, "observed": frac, "model": p.model, "final_err": abs(final / t.final - 1),
           # in the metric's own units, as ``final_value`` reports it (an accuracy's, not its error's; same for a loss)
           "final_err_own": abs(p.final_value / float(space.up(t.final)) - 1),
           "reach_log": math.log((now - t.final) / (now - final)) if now > max(t.final, final) else math.nan,
           "final_width": (hi - lo) / final if final > 0 else math.nan,
           "final_log": math.log(t.final / final) if final > 0 else math.nan, "final_cov": lo <= t.final <= hi,
           "unreachable": fixed.steps_to_target is None, "steps_err": math.nan, "steps_log": math.nan,
           "steps_cov": math.nan, "ahead_log": math.nan, "fixed_err": math.nan, "cross_err": math.nan,
           "grain": math.nan, "goal_miss": math.nan, "said_reached": False}
    row["too_close"] = 0 < remaining < MIN_INTERVALS * t.resolution
    # every "already reached" answer (0 steps), scored or not: the score sees only those the run had not made yet
    row["reached_call"] = p.steps_to_target == 0
    row["run_there"] = remaining <= 0
    if remaining >= MIN_INTERVALS * t.resolution:
        row["steps_err"] = abs(p.steps_to_target / remaining - 1)
        # the truth's crossing is known to about one logging interval: that interval over the remaining is
        # the part of the relative error the log's granularity alone can make
        row["grain"] = t.resolution / remaining
        # why a steps error is large (diagnostic, the score is unchanged): the predictor's own 95 % value misses
        # the truth's by this share of the distance the run still had to go to it; >= 1 puts it at or past the
        # value now, i.e. "already reached" (0 steps, an error of exactly 100 %) or at the wrong end of a flat stretch
        row["goal_miss"] = abs(float(space.down(p.target)) - t.target) / (now - t.target) if now > t.target else math.nan
        row["said_reached"] = p.steps_to_target == 0
        row["cross_err"] = abs(p.target_step - t.target_x) / c.schedule.budget
        # as the predictor's band scales it (``CurvePrediction.resolution``); it was 1e-9·budget, so a prediction
        # of 0 steps (already reached) gave e^20 and made the steps band at 50 and 75 % reach the budget
        row["steps_log"] = math.log(remaining / max(p.steps_to_target, p.resolution, 1e-9 * c.schedule.budget))
        row["steps_cov"] = p.interval_80[0] <= remaining <= p.interval_80[1]
        # the rows the steps' median shift applies to (a crossing ahead, before the budget): its calibration
        row["ahead_log"] = row["steps_log"] if 0 < p.steps_to_target and p.target_step < c.schedule.budget else math.nan
        if fixed.steps_to_target is not None:
            row["fixed_err"] = abs(fixed.steps_to_target / remaining - 1)
    return row


# targets per prediction: below the value now by these shares of the improvement so far (the band's own spread
# would make the targets depend on the formula being scored)
REACH_STEPS = (0.05, 0.1, 0.2, 0.4, 0.8)


def reach_rows(c: DevCurve, frac: float, cal: Calibration, prior: CurvePrior | None | str) -> list[dict]:
    """The chance by the budget (``p_reach``) of targets below the value now, each against whether the run's final
    value got there (lower-is-better space). "a normal": the chance as a normal through the reported 80 % final
    band, what a reader of the interval alone would take (the predictor's own formula before the bands' medians
    were calibrated: a skewed band put a target at the predicted final value near 16 %)."""
    n, t = prefix(c, frac), truth(c)
    space = MetricSpace.of(c.metric, c.y)
    y = space.down(c.y[:n])
    now = float(np.median(y[-3:]))
    if y[0] <= now:
        return []   # no improvement yet to set targets by
    regime = c.meta.get("regime", "scratch")
    rows = []
    for k in REACH_STEPS:
        goal = now - k * (y[0] - now)
        if goal <= 0:
            continue
        p = predict_curve(c.x[:n], c.y[:n], c.schedule, metric=c.metric, target=float(space.up(goal)), prior=prior,
                          calibration=cal, regime=regime)
        final = float(space.down(p.final_value))
        lo, hi = sorted(math.log(float(space.down(v)) / final) for v in p.final_value_interval_80)
        normal = float(norm.cdf((math.log(goal / final) - (lo + hi) / 2) / max((hi - lo) / (2 * Z_80), 1e-6)))
        rows.append({"observed": frac, "now": p.p_reach, "normal": normal, "reached": t.final <= goal})
    return rows


def reach_report(rows: list[dict], indent: str = "  ") -> None:
    """Brier score of the chance by the budget, beside a normal through the reported band, and its reliability."""
    d = pd.DataFrame(rows)
    shares = "/".join(f"{int(100 * k)}" for k in REACH_STEPS)
    print(f"{indent}chance by the budget (p_reach) of targets below the value now by {shares} % of the improvement "
          "so far, against whether the run got there: Brier score of p_reach / of a normal through the reported 80 % band (lower is better; 0.25 is a "
          "coin), and p_reach's mean vs the share reached where it is < 1/3, 1/3-2/3, > 2/3")
    for f, g in d.groupby("observed"):
        cells = []
        for a, b in ((0, 1 / 3), (1 / 3, 2 / 3), (2 / 3, 1.01)):
            band = g[(g.now >= a) & (g.now < b)]
            cells.append(f"{pct(band.now.mean()).strip()} vs {pct(band.reached.mean()).strip()} (n={len(band)})"
                         if len(band) else "-")
        brier = lambda col: float(((g[col] - g.reached) ** 2).mean())   # noqa: E731
        print(f"{indent}  {int(100 * f):2d} % observed: Brier {brier('now'):.3f} / {brier('normal'):.3f} (n={len(g)});"
              f" now: {'; '.join(cells)}")


def evaluate_optimus(c: DevCurve, frac: float) -> dict:
    """Optimus alone on the same prefix: no schedule; residual-bootstrap intervals (``perf.predict``); its 95 %
    point from the first value to its own predicted final value, as ``--target-fraction`` does."""
    t, n = truth(c), prefix(c, frac)
    y = MetricSpace.of(c.metric, c.y).down(c.y)
    fit = fit_curve(c.x[:n], y[:n])
    B, x_now = c.schedule.budget, float(c.x[n - 1])
    final = float(fit.curve.raw_loss(B))
    rng = np.random.default_rng(0)
    fitted = fit.curve.loss(fit.steps)
    boots = []
    for _ in range(50):
        yb = np.maximum(fitted + rng.choice(fit.residuals, size=len(fitted)), 1e-9)
        cb = fit_curve(fit.steps, yb, preprocess=False).curve
        boots.append(float(cb.raw_loss(B)) * fit.curve.scale)
    lo, hi = np.quantile(boots, [0.1, 0.9])
    goal = y[0] - IMPROVEMENT * (y[0] - final)
    est = remaining_steps(fit, x_now, target_loss=goal / fit.curve.scale, n_boot=50)
    fixed = remaining_steps(fit, x_now, target_loss=t.target / fit.curve.scale, n_boot=0)
    remaining = t.target_x - x_now
    row = {"curve": c.name, "observed": frac, "model": "optimus", "final_err": abs(final / t.final - 1),
           "final_cov": min(lo, final) <= t.final <= max(hi, final), "unreachable": x_now + fixed.value > B,
           "steps_err": math.nan, "steps_cov": math.nan, "fixed_err": math.nan}
    if remaining >= MIN_INTERVALS * t.resolution:
        steps = min(max(est.value, 0.0), B - x_now)
        row["steps_err"] = abs(steps / remaining - 1)
        row["steps_cov"] = est.low <= remaining <= est.high
        if x_now + fixed.value <= B:
            row["fixed_err"] = abs(fixed.value / remaining - 1)
    return row


def calibration_records(curves, prior_of, cal_of=lambda c: WIDE) -> dict[str, list]:
    """Per curve: ``calibrate``'s records (fraction, log final error, log steps error, ...; the stated targets' rows
    after) of the predictor with uncalibrated intervals
    (``cal_of(c)`` may carry the fit-alone bands a level prior is weighed against)."""
    out = {}
    for c in curves:
        out[c.name] = [(f, r["final_log"], r["steps_log"], r["reach_log"], r["ahead_log"], math.nan, math.nan)
                       for f in CAL_FRACTIONS for r in [evaluate(c, f, cal_of(c), prior_of(c))]]
        out[c.name] += [r for f in CAL_FRACTIONS for r in stated_records(c, f, cal_of(c), prior_of(c))]
    return out


def others(records: dict, name: str) -> list:
    return [r for n, rs in records.items() if n != name for r in rs]


def loco_calibrations(curves, prior_of, cross_of, plain_of) -> tuple[dict[str, Calibration], dict, dict, dict]:
    """Each curve's calibration from the other curves of its metric kind only (loss, or accuracy and error:
    ``Calibration.error_kind``); the records of all, merged."""
    out = ({}, {}, {}, {})
    for kind in ("loss", "error"):
        part = loco_kind_calibrations([c for c in curves if metric_kind(c.metric) == kind], prior_of, cross_of, plain_of)
        for whole, piece in zip(out, part):
            whole.update(piece)
    cals, blind, carried, plain = out
    # an error curve's steps shifts are the loss curves' (``Calibration.with_shifts_of``), none of them its own: the
    # error curves' own, from the few crossings still ahead at 50 %, flipped sign between a stated target's (+0.44) and
    # a fraction's (-0.91)
    loss = [c.name for c in curves if metric_kind(c.metric) == "loss"]
    if loss and len(loss) < len(curves):
        of = lambda records: [r for n in loss for r in records.get(n, ())]  # noqa: E731
        shifts = dataclasses.replace(calibrate(of(blind)), levelled=calibrate(of(plain)) if of(plain) else None,
                                     carried=calibrate(of(carried)) if of(carried) else None)
        for c in curves:
            if metric_kind(c.metric) != "loss":
                cals[c.name] = cals[c.name].with_shifts_of(shifts)
    return out


def loco_kind_calibrations(curves, prior_of, cross_of, plain_of) -> tuple[dict[str, Calibration], dict, dict, dict]:
    """Each curve's calibration from the other curves only. Two passes: the fit alone with the shape prior of
    the *other tasks* (``cross_of``: what a job of a new kind gets, and what the shipped bands serve) gives
    the main bands, which a level prior is also weighed against; the curves that have a same-task level
    prior, predicted with it, give the level bands: ``carried`` with the finals carried to the curve's
    schedule (``prior_of``), ``levelled`` with their plain mean (``plain_of``: a job that declared none)."""
    if not curves:
        return {}, {}, {}, {}
    blind = calibration_records(curves, cross_of)
    main = {c.name: calibrate(others(blind, c.name)) for c in curves}
    wide = ((-5.0, 5.0),) * len(CAL_FRACTIONS)
    with_level = [c for c in curves if prior_of(c).final is not None]
    cal_of = lambda c: Calibration(CAL_FRACTIONS, main[c.name].final, wide,   # noqa: E731
                                   levelled=Calibration(CAL_FRACTIONS, wide, wide))
    carried, plain = calibration_records(with_level, prior_of, cal_of), calibration_records(with_level, plain_of, cal_of)
    return {c.name: dataclasses.replace(main[c.name], levelled=calibrate(others(plain, c.name)),
                                        carried=calibrate(others(carried, c.name)))
            for c in curves}, blind, carried, plain


def other_task_shifts(curves, cals: dict, blind: dict, carried: dict, plain: dict) -> dict[str, Calibration]:
    """``cals`` with each table's steps median (``Calibration.steps_shift``) from the *other tasks'* curves only
    (another dataset): the shift of a job of a new kind; the bands stay leave-one-curve-out."""
    task = {c.name: (c.meta.get("dataset"), metric_kind(c.metric)) for c in curves}
    def median(records, name):   # of the same metric kind (its own table)
        rs = [r for n, rs in records.items() if task[n][0] != task[name][0] and task[n][1] == task[name][1] for r in rs]
        return calibrate(rs).steps_median if rs else None
    out = {}
    for name, cal in cals.items():
        sub = {k: dataclasses.replace(getattr(cal, k), steps_median=median(records, name))
               for k, records in (("carried", carried), ("levelled", plain)) if getattr(cal, k) is not None}
        out[name] = dataclasses.replace(cal, steps_median=median(blind, name), **sub)
    return out


def level_coverage(records: dict, table_records: dict) -> list[tuple[float, float, float, int]]:
    """Per calibration fraction: (fraction, coverage, median log width, n) of the 80 % final-value band that
    ``table_records`` of the *other* curves give each curve's errors in ``records`` (leave-one-curve-out)."""
    hits = {f: [] for f in CAL_FRACTIONS}
    for name, rs in records.items():
        table = calibrate(others(table_records, name))
        for f, err, *_ in rs:
            lo, hi = table.final_band(f)
            if math.isfinite(err):
                hits[f].append((lo <= err <= hi, hi - lo))
    return [(f, float(np.mean([h for h, _ in v])), float(np.median([w for _, w in v])), len(v))
            for f, v in hits.items() if v]


def unshifted(cal: Calibration) -> Calibration:
    """``cal`` without the steps' median shift (``Calibration.steps_shift``): the law's own crossing."""
    sub = {k: unshifted(v) for k in ("levelled", "carried") if (v := getattr(cal, k)) is not None}
    return dataclasses.replace(cal, steps_median=None, stated_steps_median=None, **sub)


def without_level(p: CurvePrior | None) -> CurvePrior | None:
    return None if p is None else dataclasses.replace(p, final=None, final_sigma=math.inf, level_curves=())


def full_fits(curves) -> dict:
    """Each curve's fit on all its points and the value it ended at, as a finished job leaves them
    (``perf.prior.finished_fit``)."""
    fits = {}
    for c in curves:
        y = MetricSpace.of(c.metric, c.y).down(c.y)
        fits[c.name] = finished_fit(fit_annealing(c.x, y, c.schedule, None), c.meta, truth(c).final)
    return fits


def loco_prior(curves, carry: bool = True):
    """Each curve's prior from the other curves' full fits (its own finished fit never counts); the same task's
    finals carried to the curve's schedule (``perf.prior``), or, ``carry=False``, their plain mean (a job that
    declared no schedule)."""
    fits = full_fits(curves)
    return lambda c: prior_from_fits([f for n, f in fits.items() if n != c.name], {"decay": c.schedule.decay, **c.meta},
                                     schedule=c.schedule if carry else None)


def cross_task_prior(curves):
    """Each curve's α/drop prior from the full fits of *other tasks* only (another dataset), no level: what a
    new kind of job gets from this development set, as on the independent check's curves."""
    fits = full_fits(curves)
    task = {c.name: c.meta.get("dataset") for c in curves}
    return lambda c: without_level(prior_from_fits([f for n, f in fits.items() if task[n] != task[c.name]],
                                                   {"decay": c.schedule.decay, **c.meta}))


def oracle_shape_prior(curves):
    """Each curve's own full-fit α and c held tight, no level: not a prediction (it knows the curve's end), the
    ceiling of a better shape prior; what remains is the prefix fit's level and s0, and the crossing's noise."""
    fits, cross = full_fits(curves), cross_task_prior(curves)
    def prior(c):
        f = fits[c.name]
        p = dataclasses.replace(cross(c), alpha=f.alpha, alpha_sigma=0.05)
        return dataclasses.replace(p, drop=f.drop, drop_sigma=0.01) if math.isfinite(f.drop) else p
    return prior


def fit_time(curves) -> float:
    c = next(c for c in curves if c.name.startswith("charlm-cosine")) if any(
        c.name.startswith("charlm-cosine") for c in curves) else curves[0]
    x = np.linspace(c.x[0], c.x[-1] * 0.5, 1000)
    y = np.interp(x, c.x, c.y)
    best = math.inf
    for _ in range(5):
        t0 = time.perf_counter()
        predict_curve(x, y, c.schedule, metric=c.metric)
        best = min(best, time.perf_counter() - t0)
    return best


def observed_beyond(curves) -> list[str]:
    """The rows whose prefix reaches well past their fraction: a short curve, where the predictor's minimum of 4
    points is more than the fraction (each is scored as that row)."""
    return [f"{c.name} at {int(100 * f)} % ({pct(c.x[prefix(c, f) - 1] / c.schedule.budget).strip()})"
            for c in curves for f in FRACTIONS if c.x[prefix(c, f) - 1] > 1.2 * f * c.schedule.budget]


def pct(v) -> str:
    return "   n/a " if not np.isfinite(v) else f"{100 * v:6.1f}%"


def schedule_report(write_calibration: bool = False) -> None:
    curves = dev_curves(with_accuracy=True)
    prior_of, cross_of = loco_prior(curves), cross_task_prior(curves)
    cals, blind, carried, plain = loco_calibrations(curves, prior_of, cross_of, loco_prior(curves, carry=False))
    if write_calibration:
        # what the CLI ships: bands from every curve, and the prior from every curve's finished fit
        # (the records here used leave-one-out priors, close to what a new job's prior is)
        # (the table's fits serve only the shape prior: a run that over-fits is left out, ``perf.prior``)
        every = prior_from_fits(list(full_fits(curves).values()))
        shipped = [(f.alpha, f.drop if math.isfinite(f.drop) else None, f.meta["metric"], f.meta["decay"],
                    regime_of(f.meta), f.meta["dataset"],
                    *(v if math.isfinite(v) else None for v in relative_shape(f.curve)))
                   for f in full_fits(curves).values() if has_law_shape(f)]
        kind = {c.name: metric_kind(c.metric) for c in curves}

        def pooled(k: str) -> Calibration:   # the bands of one metric kind, from its curves' records
            of = lambda records: [r for n, rs in records.items() if kind[n] == k for r in rs]  # noqa: E731
            return dataclasses.replace(calibrate(of(blind)), levelled=calibrate(of(plain)), carried=calibrate(of(carried)))
        table = dataclasses.replace(pooled("loss"), prior=(every.alpha, every.drop, every.alpha_sigma, every.drop_sigma),
                                    fits=tuple(shipped), error_kind=pooled("error").with_shifts_of(pooled("loss")))
        one = one_point_rows(curves, table)
        table = dataclasses.replace(table, one_point=tuple(float(v) for v in (
            *np.quantile(one.final, [0.1, 0.9]), *np.quantile(one.steps.dropna(), [0.1, 0.9]))))
        TABLE.write_text(table.to_json() + "\n")
        print(f"  wrote {TABLE}")
    rows, opt, curve_only, cross, oracle, law, new_task = [], [], [], [], [], [], []
    shifts = other_task_shifts(curves, cals, blind, carried, plain)
    oracle_of = oracle_shape_prior(curves)
    for c in curves:
        for f in FRACTIONS:
            # the ceiling's shape is not the predictor's: the median shift calibrated on the predictor's errors
            # is not its own
            oracle.append(evaluate(c, f, unshifted(cals[c.name]), oracle_of(c)))
            rows.append(evaluate(c, f, cals[c.name], prior_of(c)))
            law.append(evaluate(c, f, unshifted(cals[c.name]), prior_of(c)))
            new_task.append(evaluate(c, f, shifts[c.name], prior_of(c)))
            curve_only.append(evaluate(c, f, cals[c.name], without_level(prior_of(c))))
            cross.append(evaluate(c, f, cals[c.name], cross_of(c)))
            opt.append(evaluate_optimus(c, f))
    df, od, bd, xd, qd, ld, nd = (pd.DataFrame(r) for r in (rows, opt, curve_only, cross, oracle, law, new_task))
    print(f"== schedule-aware prediction: {len(curves)} real curves, schedule + budget given, "
          f"intervals calibrated leave-one-curve-out")
    print(f"  steps: --target-fraction {IMPROVEMENT} (the predictor's own 95 % point) vs the x where the run reached 95 % "
          f"of its improvement, relative to the true remaining; scored where >= {MIN_INTERVALS} logging intervals remained")
    print(f"  {'curve':24s} " + " ".join(f"{'final@' + str(int(100 * f)) + '%':>9s} {'steps':>7s} {'model':>9s}"
                                          for f in FRACTIONS) + "   | Optimus alone: final / steps per fraction"
          "   | cross-task prior only: final / steps per fraction")
    for name, g in df.groupby("curve", sort=False):
        o, x = od[od.curve == name], xd[xd.curve == name]
        cells = " ".join(f"{pct(r.final_err):>9s} {pct(r.steps_err):>7s} {r.model[:9]:>9s}" for r in g.itertuples())
        ocells = " ".join(f"{pct(r.final_err)}/{pct(r.steps_err)}" for r in o.itertuples())
        xcells = " ".join(f"{pct(r.final_err)}/{pct(r.steps_err)}" for r in x.itertuples())
        print(f"  {name:24s} {cells}   | {ocells}   | {xcells}")
    beyond = observed_beyond(curves)
    if beyond:   # a short curve: the predictor's minimum of 4 points is more than the fraction (scored as that row)
        print(f"  observed beyond the row's fraction (the predictor needs >= 4 points): {', '.join(beyond)}")
    print(f"  {'':24s} {'schedule-aware':>40s} {'|':>30s} Optimus alone")
    cov = lambda d: pct(d.steps_cov.dropna().astype(float).mean())  # noqa: E731
    for f in FRACTIONS:
        s, o, raw, nt = df[df.observed == f], od[od.observed == f], ld[ld.observed == f], nd[nd.observed == f]
        print(f"  after {int(100 * f):2d} %: median final error {pct(s.final_err.median())} (<= 5 %)"
              f" [in the metric's own units {pct(s.final_err_own.median()).strip()}]"
              f"  steps-to-95 % {pct(s.steps_err.median())} (<= 20 %; n={s.steps_err.notna().sum()},"
              f" the law's own crossing {pct(raw.steps_err.median()).strip()},"
              f" shifted by the other tasks' median {pct(nt.steps_err.median()).strip()},"
              f" {int(s.too_close.sum())} under {MIN_INTERVALS} intervals left out) [true target fixed {pct(s.fixed_err.median())}]"
              f"  80 % coverage final {pct(s.final_cov.mean())} steps {cov(s)} (70-90 %)"
              f"  wrongly unreachable {int(s.unreachable.sum())} (0)"
              f"  interval width {pct(s.final_width.median())} of the value"
              f"   | Optimus: final {pct(o.final_err.median())} steps {pct(o.steps_err.median())} [{pct(o.fixed_err.median())}]"
              f" cov {pct(o.final_cov.mean())}/{cov(o)}"
              f" unreachable {int(o.unreachable.sum())}")
    # the steps score reads only rows the run had not reached (>= 3 intervals still to go): an "already reached"
    # answer scores 100 % there and is never scored where it is right, so its precision is printed beside it
    for f in FRACTIONS:
        s = df[(df.observed == f) & df.reached_call]
        print(f"  after {int(100 * f):2d} %: 'already reached' (0 steps) said in {len(s)} rows: the run was there in "
              f"{int(s.run_there.sum())} (not scored), within {MIN_INTERVALS} intervals of it in {int(s.too_close.sum())}"
              f" (not scored), further in {int(s.steps_err.notna().sum())} (scored 100 %); of the "
              f"{int((df[df.observed == f].run_there).sum())} rows the run was there, said so in {int(s.run_there.sum())}")
    kinds = df.curve.map({c.name: metric_kind(c.metric) for c in curves})
    for kind, label in (("loss", "loss curves"), ("error", "accuracy and error curves (their own bands)")):
        k = df[kinds == kind]
        print(f"  {label}, {k.curve.nunique()} of them:")
        for f in FRACTIONS:
            s = k[k.observed == f]
            print(f"    after {int(100 * f):2d} %: median final error {pct(s.final_err.median())}"
                  f" [own units {pct(s.final_err_own.median()).strip()}]  steps-to-95 % {pct(s.steps_err.median())}"
                  f" (n={s.steps_err.notna().sum()})  80 % coverage final {pct(s.final_cov.mean())} steps {cov(s)}"
                  f"  wrongly unreachable {int(s.unreachable.sum())}")
    print("  (information: both sides see the same prefix; schedule-aware also gets the schedule and budget and the "
          "other curves' finished fits: α/drop from all, the final level from those of the same dataset and metric; "
          "unreachable counts are of targets every run did reach; [brackets]: steps to the true curve's 95 % value "
          "given as a fixed --target)")
    reach_report([r for c in curves for f in FRACTIONS for r in reach_rows(c, f, cals[c.name], prior_of(c))])
    level_report(carried, plain)
    levelled = sum(prior_of(c).final is not None for c in curves)
    for label, d in ((f"without the same-task level ({levelled} of {len(curves)} curves have one): the fit and "
                      "α/drop prior from all other curves", bd),
                     ("cross-task only (the general case): α/drop prior from the other tasks' curves, no level", xd),
                     ("ceiling, not a prediction: the curve's own full-fit α and c as the prior, no level", qd)):
        print(f"  {label}")
        # the later the fraction, the fewer curves still have their 95 % point ahead, and those are the ones
        # where it lies on a flat stretch (a constant LR, a late decay): a median over the same curves, and
        # the crossing's miss in units of the budget (the relative figure divides by a remaining that shrinks)
        steady = [n for n, g in d.groupby("curve") if g.steps_err.notna().sum() == len(FRACTIONS)]
        for f in FRACTIONS:
            b = d[d.observed == f]
            print(f"  after {int(100 * f):2d} %: median final error {pct(b.final_err.median())} (<= 5 %)"
                  f"  steps-to-95 % {pct(b.steps_err.median())} (<= 20 %) [true target fixed {pct(b.fixed_err.median())}]"
                  f"  80 % coverage final {pct(b.final_cov.mean())} steps {cov(b)} (70-90 %)"
                  f"  wrongly unreachable {int(b.unreachable.sum())} (0)"
                  f"  crossing off by {pct(b.cross_err.median())} of the budget; steps on the {len(steady)} curves scored"
                  f" at every fraction {pct(b[b.curve.isin(steady)].steps_err.median())}"
                  f"; one logging interval is {pct(b.grain.median())} of the remaining (granularity)"
                  f"; the predicted 95 % value misses the true one by {pct(b.goal_miss.median())} of the distance still"
                  f" to go to it, predicted already reached in {int(b.said_reached.sum())} scored rows")
    # Where the error comes from: medians per source of curves (ours per task; Pollux + seed have no same-task level)
    group = lambda names: names.str.split("-").str[0].replace({"pollux": "pollux+seed", "seed": "pollux+seed"})  # noqa: E731
    print("  per source, median final error / steps-to-95 % at 10 / 25 / 50 % (cross-task only in brackets):")
    for g, rows_g in df.groupby(group(df.curve), sort=False):
        b = xd[group(xd.curve) == g]
        cells = "  ".join(f"{pct(rows_g[rows_g.observed == f].final_err.median())}/{pct(rows_g[rows_g.observed == f].steps_err.median())}"
                          f" [{pct(b[b.observed == f].final_err.median())}/{pct(b[b.observed == f].steps_err.median())}]"
                          for f in FRACTIONS)
        print(f"    {g:12s} ({rows_g.curve.nunique():2d} curves) {cells}")
    # Prior at 10 %: no prior, the generic default, and one from the other curves' finished fits.
    line = []
    for label, prior_for in (("none", lambda c: None), ("generic default", lambda c: CurvePrior()),
                             ("from other tasks' finished jobs", cross_of), ("from finished jobs", prior_of)):
        errs = [evaluate(c, 0.10, cals[c.name], prior_for(c))["final_err"] for c in curves]
        line.append(f"{label} {pct(np.median(errs))}")
    print("  prior at 10 % observed, median final error: " + ", ".join(line))
    narrowing_report(curves, df, cals, prior_of)
    print(f"  fit time per 1 000-point curve: {1e3 * fit_time(curves):.1f} ms (<= 50 ms)")


def first_trained(c: DevCurve) -> int:
    """The index of the curve's first point after any LR was applied (an evaluation at x = 0 comes before it)."""
    return int(np.argmax(c.x > 0))


def early_row(c: DevCurve, points: int, cal: Calibration, prior: CurvePrior | None) -> dict | None:
    """A prediction from the curve's first ``points`` points after training starts (0: before any, from the same
    task's finished runs carried to its schedule; 1: their shapes through the point), scored as ``evaluate``
    scores a final and the steps to the true 95 % value given as a fixed ``--target``; None where the predictor has
    nothing to predict from."""
    t, n = truth(c), first_trained(c) + points
    space = MetricSpace.of(c.metric, c.y)
    try:
        p = predict_curve(c.x[:n], c.y[:n], c.schedule, metric=c.metric, target=float(space.up(t.target)),
                          prior=prior, calibration=cal, regime=c.meta.get("regime", "scratch"), scale=space.top)
    except ValueError:
        return None
    final = float(space.down(p.final_value))
    lo, hi = sorted(space.down(np.array(p.final_value_interval_80)))
    remaining = t.target_x - p.x_now
    ahead = p.steps_to_target is not None and remaining >= MIN_INTERVALS * t.resolution
    return {"curve": c.name, "final_err": abs(final / t.final - 1), "final_cov": lo <= t.final <= hi,
            "final_width": (hi - lo) / final, "model": p.model,
            "fixed_err": abs(p.steps_to_target / remaining - 1) if ahead else math.nan,
            "fixed_cov": p.interval_80[0] <= remaining <= p.interval_80[1] if ahead else math.nan}


def narrowing_report(curves, df: pd.DataFrame, cals: dict, prior_of) -> None:
    """Item 5 of issue 14: the prediction a new job starts with, before its first point, and how its final-value band
    narrows as points arrive; on the curves whose task has two or more other finished runs (a level prior)."""
    levelled = [c for c in curves if len(prior_of(c).level_curves) >= 2]
    shipped = load_calibration()
    names = {c.name for c in levelled}
    print(f"  before the first point and as points arrive ({len(levelled)} curves with 2+ finished runs of their task, "
          "leave-one-curve-out; steps: to the true 95 % value as a fixed --target, from the last point):")
    for label, rows in (("0 points (the task's runs carried to the schedule)", [early_row(c, 0, cals[c.name], prior_of(c))
                                                                                 for c in levelled]),
                        # with 2+ runs of the task, one point is predicted from them too (the one-point shapes, the
                        # shipped fits of the other tasks, are the fallback without)
                        ("1 point (the same, from there)",
                         [early_row(c, 1, dataclasses.replace(cals[c.name], fits=shipped.without_task(
                             c.meta.get("dataset")).fits, one_point=shipped.one_point), prior_of(c)) for c in levelled]),
                        *((f"{int(100 * f)} % observed", df[(df.observed == f) & df.curve.isin(names)]) for f in FRACTIONS)):
        d = pd.DataFrame([r for r in rows if r is not None]) if isinstance(rows, list) else rows
        steps_cov = d.fixed_cov.dropna().astype(float).mean() if "fixed_cov" in d else math.nan
        print(f"    {label:52s} final error {pct(d.final_err.median())}, 80 % band {pct(d.final_width.median())} of the "
              f"value wide, covers {pct(d.final_cov.mean())}; steps {pct(d.fixed_err.median())}"
              + (f", covered {pct(steps_cov)}" if math.isfinite(steps_cov) else "")
              + f" (n={len(d)}, steps n={d.fixed_err.notna().sum()})")
    print("  (information: the curve's schedule and budget, and its task's other runs' fits and finals; none of its own "
          "points at 0)")


def level_report(carried: dict, plain: dict) -> None:
    """Coverage of the final-value bands of a prediction with a same-task level, leave-one-curve-out, for the
    two kinds of level the service gives (``Calibration.level_table``), and each with the other's table."""
    print(f"  80 % final-value bands with a same-task level ({len(carried)} curves), leave-one-curve-out, at "
          + " / ".join(f"{int(100 * f)}" for f in CAL_FRACTIONS) + " % observed: coverage (70-90 %), median log width")
    for label, recs, table in (("finals carried to the schedule, `carried` bands", carried, carried),
                               ("plain mean of the finals (no schedule), `levelled` bands", plain, plain),
                               ("[one table] carried level, plain-mean bands", carried, plain),
                               ("[one table] plain-mean level, carried bands", plain, carried)):
        cov = level_coverage(recs, table)
        print(f"    {label:58s} " + " / ".join(pct(c).strip() for _, c, _, _ in cov)
              + "   width " + " / ".join(f"{w:.3f}" for _, _, w, _ in cov) + f"   (n={cov[0][3]} per fraction)")
    print("  (information: each curve's prefix, schedule and budget, the other curves' finished fits and finals; its own "
          "errors never set its band. With one error per curve, a table from the same kind of errors covers the same "
          "count whenever they are distinct (conformal ranks): its width, and the other table's coverage, tell them apart)")


def optimus_curves() -> dict[str, pd.DataFrame]:
    out = {}
    log = seed_log()
    out["seed-resnet50"] = pd.DataFrame({"step": log.steps_cum_assumed, "loss": log.train_loss})
    for app in POLLUX_APPS:
        out[app] = pollux_app(app).loss_curve()
    return out


@dataclass(frozen=True)
class StopTruth:
    """A curve, where its job really stops (its last step) and the owner's δ, in raw loss units."""

    steps: np.ndarray
    losses: np.ndarray
    steps_per_epoch: float
    delta_raw: float
    delta_raw_old: float  # decrease of the last observed epoch: stops one epoch early (kept for comparison)


def reference_fit(steps, losses) -> LossCurve:
    """The fit under test by default, and always the one that defines the ground truth."""
    return fit_curve(steps, losses).curve


def stop_truth(curve: pd.DataFrame) -> StopTruth:
    k, l = curve.step.to_numpy(float), curve.loss.to_numpy(float)
    E = float(np.median(np.diff(k)))
    full = reference_fit(k, l)
    return StopTruth(k, l, E, full.delta_stopping_at(k[-1], E) * full.scale,
                     float(full.loss(k[-1] - E) - full.loss(k[-1])) * full.scale)


def convergence_errors(curve: pd.DataFrame, frac: float, fit=reference_fit) -> tuple[float, float, float, float]:
    """Signed relative error (negative = stops too early) of the remaining steps predicted after ``frac`` of the
    epochs by ``fit(steps, losses) -> LossCurve``: (δ-rule vs remaining, target loss vs remaining,
    δ-rule vs total steps, old off-by-one δ vs remaining)."""
    t = stop_truth(curve)
    k, l, E = t.steps, t.losses, t.steps_per_epoch
    n = max(3, int(round(frac * len(k))))
    part = fit(k[:n], l[:n])
    actual = k[-1] - k[n - 1]
    by_delta = part.remaining_steps(k[n - 1], delta=t.delta_raw / part.scale, steps_per_epoch=E)
    by_old = part.remaining_steps(k[n - 1], delta=t.delta_raw_old / part.scale, steps_per_epoch=E)
    by_target = part.remaining_steps(k[n - 1], target_loss=l.min() / part.scale)
    return ((by_delta - actual) / actual, (by_target - actual) / actual, (by_delta - actual) / k[-1],
            (by_old - actual) / actual)


def reference_self_check(curve: pd.DataFrame) -> float:
    """Largest |error| of the reference fit predicting its own stop from 10/25/50 %: 0 when δ is coherent."""
    t = stop_truth(curve)
    full = reference_fit(t.steps, t.losses)
    errs = []
    for f in FRACTIONS:
        k_now = t.steps[max(3, int(round(f * len(t.steps)))) - 1]
        pred = full.remaining_steps(k_now, delta=t.delta_raw / full.scale, steps_per_epoch=t.steps_per_epoch)
        errs.append(abs(pred - (t.steps[-1] - k_now)) / (t.steps[-1] - k_now))
    return max(errs)


def design_samples(d: pd.DataFrame) -> pd.DataFrame:
    """The recommended profiling plan (``speed.PROFILING_PLAN``, where the why is): 1 GPU at the smallest local
    batch, one full node at the largest, then 3 nodes x 8 GPUs (middle batch), 4 x 16 (smallest), 8 x 32
    (largest) and 16 x 32 (smallest)."""
    return d.loc[profiling_rows(d)]


def speed_error(train: pd.DataFrame, test: pd.DataFrame) -> float:
    p = fit_step_time(train.num_replicas, train.num_nodes, train.local_bsz, train.step_time, train.sync_time)
    pred = p.step_time(test.num_replicas.to_numpy(), test.num_nodes.to_numpy(), test.local_bsz.to_numpy())
    return float(np.median(np.abs(pred / test.step_time.to_numpy() - 1)))


def repeat_scatter(d: pd.DataFrame) -> float:
    """Median |row / mean of the other measurements of the same (nodes, replicas, local batch) − 1|: the noise no
    model of those three inputs can remove (placements differ in GPUs per node; runs differ)."""
    g = d.groupby(["num_nodes", "num_replicas", "local_bsz"]).step_time
    count, total = g.transform("size"), g.transform("sum")
    rep = count > 1
    others = (total[rep] - d.step_time[rep]) / (count[rep] - 1)
    return float(np.median(np.abs(d.step_time[rep] / others - 1)))


def h100_errors(fit_on_all: bool = False) -> list[float]:
    """Per model/precision: median error on the batch sizes outside 6 evenly spread ones, fitted on those 6
    (or, ``fit_on_all``, on every batch size: the best this family does on the same points)."""
    out = []
    for _, g in h100_throughput().groupby(["model", "dataset", "precision"]):
        g = g.sort_values("batch_size")
        idx = np.unique(np.linspace(0, len(g) - 1, 6).round().astype(int))
        tr, te = (g if fit_on_all else g.iloc[idx]), g.drop(index=g.index[idx])
        if te.empty:
            continue
        c = fit_compute(tr.batch_size, tr.step_time)
        out.append(float(np.median(np.abs(c(te.batch_size.to_numpy()) / te.step_time.to_numpy() - 1))))
    return out


def speed_report() -> None:
    print("== speed: all-reduce step-time model, median |rel. error| on the rows not fitted (target <= 5 % with <= 6 samples)")
    print(f"  {'app':12s} {'6 designed':>11s} {'6 random (5 draws)':>19s} {'random half':>12s}"
          f" {'| floor: all rows':>17s} {'repeat scatter':>15s} {'full-node 2x2':>14s}")
    res = []
    for app in POLLUX_APPS:
        d = pollux_app(app).step_samples()
        tr = design_samples(d)
        designed = speed_error(tr, d.drop(index=tr.index))
        rnd = float(np.mean([speed_error(t, d.drop(index=t.index)) for t in (d.sample(6, random_state=s) for s in range(5))]))
        idx = np.random.default_rng(0).permutation(len(d))
        half = speed_error(d.iloc[idx[: len(d) // 2]], d.iloc[idx[len(d) // 2:]])
        # why 5 % is out of reach: the same model fitted on every row, scored on the rows the plan leaves out
        # (the best parameters this family has), and the scatter between repeats of one configuration
        floor = speed_error(d, d.drop(index=tr.index))
        scatter = repeat_scatter(d)
        # a plan of one shape for contrast: 4 and 8 full nodes x smallest/largest batch, 1 GPU, 1 full node
        fact = d.loc[profiling_rows(d, ((1, 1, 0.0), (1, 4, 1.0), (4, 16, 0.0), (4, 16, 1.0), (8, 32, 0.0), (8, 32, 1.0)))]
        factorial = speed_error(fact, d.drop(index=fact.index))
        res.append((designed, rnd, half, floor, scatter, factorial))
        print(f"  {app:12s} {100 * designed:10.1f} % {100 * rnd:18.1f} % {100 * half:11.1f} %"
              f" {100 * floor:15.1f} % {100 * scatter:14.1f} % {100 * factorial:12.1f} %")
    med = np.median(np.array(res), axis=0)
    print(f"  {'median':12s} {100 * med[0]:10.1f} % {100 * med[1]:18.1f} % {100 * med[2]:11.1f} %"
          f" {100 * med[3]:15.1f} % {100 * med[4]:14.1f} % {100 * med[5]:12.1f} %")
    raw = h100_throughput()
    spread = (pd.to_numeric(raw.step_ms_p90) - pd.to_numeric(raw.step_ms_p10)) / raw.step_ms_median
    six, every = h100_errors(), h100_errors(fit_on_all=True)
    print(f"  H100 compute model, 6 batch sizes -> others: median over {len(six)} model/precision pairs "
          f"{100 * np.median(six):.1f} %  (target <= 5 %); floor: fitted on all 8 batch sizes "
          f"{100 * np.median(every):.1f} % on the same points, the table's own p10-p90 "
          f"spread is ±{50 * spread.median():.1f} % of the median step")


def delta_rule_report() -> None:
    print("== Optimus δ-rule (issue 2): median |error| of remaining steps over 6 curves (target <= 10 % after 25 %)")
    rows = []
    checks = []
    for name, c in optimus_curves().items():
        if len(c) < 6:
            print(f"  {name}: {len(c)} epochs only, skipped")
            continue
        checks.append(reference_self_check(c))
        for f in FRACTIONS:
            rows.append((name, f, *np.abs(convergence_errors(c, f))))
    df = pd.DataFrame(rows, columns=["curve", "observed", "err_delta_rule", "err_target_loss", "err_total", "err_old_delta"])
    print(df.pivot(index="curve", columns="observed", values="err_delta_rule").map(lambda x: f"{100 * x:7.1f} %")
          .to_string(header=[f"δ-rule @{int(100 * f)}%" for f in FRACTIONS]))
    for f in FRACTIONS:
        s = df[df.observed == f]
        print(f"  after {int(100 * f):2d} %: median error δ-rule {100 * s.err_delta_rule.median():6.1f} %"
              + ("  (target <= 10 %)" if f == 0.25 else " " * 17)
              + f"   δ-rule on total steps {100 * s.err_total.median():5.1f} %   target-loss {100 * s.err_target_loss.median():6.1f} %"
              f"   [old off-by-one δ: {100 * s.err_old_delta.median():5.1f} %]")
    print(f"  self-check: the reference full-curve fit predicts its own stop with max error {100 * max(checks):.1e} %")



def main() -> None:
    schedule_report("--write-calibration" in sys.argv)
    delta_rule_report()
    speed_report()


if __name__ == "__main__":
    main()
