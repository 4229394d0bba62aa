import dataclasses
import json

import numpy as np
import pytest

from dlsched.perf.annealing import AnnealingCurve, CurvePrior, fit_annealing
from dlsched.perf.calibration import Calibration, calibrate, from_dict, load_calibration, quantile_band
from dlsched.perf.curve_predict import anchor, predict_curve, reach_chance
from dlsched.perf.first_passage import first_passage, logged_crossing, logged_noise, median3, running_median
from dlsched.perf.prior import FinishedFit, prior_from_fits
from dlsched.perf.schedule import parse_schedule

B = 1000.0


def law_curve(spec, x, c=0.4):
    return AnnealingCurve(0.5, 1.0, 0.7, c, parse_schedule(spec, B)).value(x)


def test_the_fit_recovers_the_law_and_predicts_a_decay_it_has_seen_begin():
    x = np.arange(10, 1001, 10.0)
    y = law_curve("step:300,700:0.1", x)
    s = parse_schedule("step:300,700:0.1", B)
    f = fit_annealing(x[x <= 500], y[x <= 500], s)
    assert f.value(B) == pytest.approx(y[-1], rel=0.02)


def test_a_prefix_before_any_decay_still_predicts_the_drop_from_the_prior():
    x = np.arange(10, 1001, 10.0)
    y = law_curve("cosine:warmup=50", x)
    s = parse_schedule("cosine:warmup=50", B)
    p = predict_curve(x[x <= 250], y[x <= 250], s, prior=CurvePrior(alpha=0.7, drop=0.4))
    blind = predict_curve(x[x <= 250], y[x <= 250], s, prior=CurvePrior(alpha=0.7, drop=0.0))
    assert p.model == "annealing"
    assert p.final_value < blind.final_value and abs(p.final_value - y[-1]) < abs(blind.final_value - y[-1]) / 2


def test_constant_lr_lets_optimus_compete_and_unreachable_targets_have_no_steps():
    x = np.arange(10, 1001, 10.0)
    y = 1.0 / (2e-3 * x + 1.0) + 0.2
    # a calibration whose runs never went more than 20 % further than predicted
    cal = Calibration((0.1, 1.0), ((-0.2, 0.2),) * 2, ((-0.5, 0.5),) * 2, reach=(0.2, 0.2))
    p = predict_curve(x[:40], y[:40], parse_schedule("constant", B), target=0.05, calibration=cal)
    assert p.model in ("optimus", "annealing")
    assert p.target_step is None and p.steps_to_target is None and not p.reachable
    assert p.final_value_interval_80[0] <= p.final_value <= p.final_value_interval_80[1]
    q = predict_curve(x[:40], y[:40], parse_schedule("constant", B), target_fraction=0.9)
    assert q.reachable and 0 < q.steps_to_target <= B - x[39]
    assert q.interval_80[0] <= q.steps_to_target <= q.interval_80[1]


def test_accuracy_is_modelled_as_error_and_answered_in_accuracy():
    x = np.arange(10, 1001, 10.0)
    acc = 1 - law_curve("linear", x) / 4
    s = parse_schedule("linear", B)
    p = predict_curve(x[:50], acc[:50], s, metric="accuracy", target=float(acc[60]))
    assert p.final_value > acc[49] and p.target == pytest.approx(acc[60])
    assert p.final_value_interval_80[0] <= p.final_value <= p.final_value_interval_80[1]


def test_conformal_band_and_per_fraction_calibration():
    assert quantile_band(range(1, 20)) == (2.0, 18.0)
    cal = calibrate([(0.1, e, 2 * e) for e in np.linspace(-1, 1, 19)] + [(0.5, e / 10, e / 5) for e in np.linspace(-1, 1, 19)])
    lo10, hi10 = cal.final_band(0.1)
    lo50, hi50 = cal.final_band(0.5)
    assert lo10 < lo50 < 0 < hi50 < hi10
    assert isinstance(Calibration.to_json(cal), str)
    assert cal.reach is None
    # how much further than predicted a run may get: pooled with the earlier fractions, so never less than there
    cal = calibrate([(0.1, 0, 0, e) for e in np.linspace(-1, 1, 19)] + [(0.5, 0, 0, e / 10) for e in np.linspace(-1, 1, 19)])
    assert cal.reach_log(0.5) == cal.reach_log(0.1) >= 0.9


def test_a_target_between_the_floor_and_the_band_is_reported_at_the_budget_not_unreachable():
    x = np.arange(10, 1001, 10.0)
    y = law_curve("cosine", x)
    cal = Calibration((0.1, 1.0), ((-0.1, 0.1),) * 2, ((-0.5, 0.5),) * 2, reach=(0.3, 0.3))
    blind = predict_curve(x[:30], y[:30], parse_schedule("cosine", B), calibration=cal)
    now = float(np.median(y[27:30]))
    assert blind.floor == pytest.approx(now - (now - blind.final_value) * np.exp(0.3))   # e^0.3 x the improvement to come
    between = 0.5 * (blind.floor + blind.final_value_interval_80[0])
    p = predict_curve(x[:30], y[:30], parse_schedule("cosine", B), target=between, calibration=cal)
    assert p.reachable and p.target_step == B and p.floor < p.final_value_interval_80[0]
    q = predict_curve(x[:30], y[:30], parse_schedule("cosine", B), target=p.floor * 0.99, calibration=cal)
    assert not q.reachable


def test_the_prior_leans_on_finished_jobs_that_share_metadata():
    fits = [FinishedFit(0.3, 0.2, {"family": "resnet", "dataset": "cifar10"}),
            FinishedFit(1.2, 0.6, {"family": "gru", "dataset": "text"})]
    p = prior_from_fits(fits, {"family": "gru", "dataset": "text"})
    assert p.alpha > 0.9 and p.drop > 0.5
    assert prior_from_fits([], {}) == CurvePrior()


def test_the_prior_is_as_sure_of_the_shape_as_the_finished_runs_agree():
    alike = [FinishedFit(0.5, 0.1, {"dataset": d}) for d in "abcd"]
    apart = [FinishedFit(a, c, {"dataset": d}) for a, c, d in ((0.2, 0.0, "a"), (2.0, 0.6, "b"), (0.5, 0.3, "c"))]
    tight, loose = prior_from_fits(alike, {"dataset": "e"}), prior_from_fits(apart, {"dataset": "e"})
    assert tight.alpha_sigma < loose.alpha_sigma and tight.drop_sigma < loose.drop_sigma
    assert loose.alpha_sigma > CurvePrior().alpha_sigma   # runs of other kinds disagree more than the default says


def test_the_shape_prior_pools_finished_runs_of_the_same_metric_kind_once_there_are_enough():
    lm = [FinishedFit(0.3, 0.05, {"dataset": d, "metric": "loss"}) for d in "abc"]
    vision = [FinishedFit(1.0, 0.5, {"dataset": d, "metric": m}) for d, m in zip("def", ("error", "accuracy", "error"))]
    assert prior_from_fits(lm + vision, {"dataset": "g", "metric": "accuracy"}).drop == pytest.approx(0.5)
    assert prior_from_fits(lm + vision, {"dataset": "g", "metric": "loss"}).drop == pytest.approx(0.05)
    few = prior_from_fits(lm + vision[:2], {"dataset": "g", "metric": "error"})   # 2 of its kind: all runs
    assert 0.05 < few.drop < 0.5 and 0.3 < few.alpha < 1.0


def test_the_shipped_prior_follows_the_declared_metric():
    bands = ((-0.1, 0.1),)
    fits = ((0.3, 0.05, "loss", "anneal"),) * 3 + ((1.0, 0.5, "error", "step"),) * 3 + ((0.5, None, "loss", "none"),)
    cal = Calibration((0.1,), bands, bands, prior=(0.4, 0.2), fits=fits)
    assert cal.curve_prior("accuracy", parse_schedule("step:300:0.1", B)).drop == pytest.approx(0.5)
    assert cal.curve_prior("loss", parse_schedule("cosine", B)).drop == pytest.approx(0.05)
    assert cal.curve_prior() == CurvePrior(0.4, 0.2)


def test_a_shipped_table_without_a_task_pools_no_fit_of_that_task():
    bands = ((-0.1, 0.1),)
    fits = ((1.0, 0.5, "error", "step", "scratch", "vision"),) * 3 + ((0.3, 0.05, "error", "step", "scratch", "lm"),) * 3
    cal = Calibration((0.1,), bands, bands, fits=fits)
    step = parse_schedule("step:300:0.1", B)
    assert cal.without_task("lm").curve_prior("error", step).drop == pytest.approx(0.5)
    assert cal.without_task("vision").curve_prior("error", step).drop == pytest.approx(0.05)
    assert 0.05 < cal.curve_prior("error", step).drop < 0.5
    assert from_dict(json.loads(cal.to_json())).without_task("lm").fits == fits[:3]   # the label survives the file


def test_a_level_prior_comes_only_from_finished_runs_of_the_same_task():
    task = {"dataset": "text", "metric": "loss"}
    fits = [FinishedFit(0.3, 0.1, dict(task), final=1.5), FinishedFit(0.3, 0.1, dict(task), final=1.7),
            FinishedFit(0.3, 0.1, {"dataset": "digits", "metric": "loss"}, final=0.1)]
    p = prior_from_fits(fits, task)
    assert 1.5 < p.final < 1.7 and 0 < p.final_sigma < 0.5
    assert prior_from_fits(fits, {"dataset": "digits", "metric": "loss"}).final is None   # one run: no spread
    assert prior_from_fits(fits[:2], {"dataset": "text", "metric": "error"}).final is None


def test_a_level_prior_carries_the_task_s_finals_to_the_new_run_s_schedule():
    # two finished runs of one task that followed the same law under a decay: a constant-LR run of that task
    # misses the decay's drop and ends where their law says, not at their mean final
    task = {"dataset": "text", "metric": "loss"}
    runs = [AnnealingCurve(0.5, 1.0, 0.7, 0.4, parse_schedule(spec, B)) for spec in ("cosine", "step:500:0.1")]
    fits = [FinishedFit(0.7, 0.4, dict(task), final=float(r.value([B])[0]), curve=r) for r in runs]
    constant = parse_schedule("constant", B)
    law_end = float(AnnealingCurve(0.5, 1.0, 0.7, 0.4, constant).value([B])[0])
    plain, carried = prior_from_fits(fits, task), prior_from_fits(fits, task, schedule=constant)
    assert carried.final == pytest.approx(law_end, rel=1e-6) and plain.final < 0.9 * law_end
    # a finished run without its fit keeps its final as logged
    bare = [dataclasses.replace(f, curve=None) for f in fits]
    assert prior_from_fits(bare, task, schedule=constant).final == pytest.approx(plain.final)


def test_a_finished_fit_stored_as_json_carries_its_final_as_before():
    """``fit_record``/``fit_from_record``: what the service stores per finished job (its SQLite row) reads back
    into the same prior, a NaN drop and a missing fit included; a logged LR's knot per record is thinned to the
    areas' own resolution."""

    from dlsched.perf.prior import fit_from_record, fit_record, transferred_final
    from dlsched.perf.schedule import GRID, Schedule

    task = {"dataset": "d", "metric": "loss"}
    x = np.arange(0.0, B + 0.1, 0.1)
    logged = Schedule.from_points(x, 0.5 * (1 + np.cos(np.pi * x / B)), B)
    fits = [FinishedFit(0.7, 0.4, task, 1.1, AnnealingCurve(0.5, 1.0, 0.7, 0.4, parse_schedule(
                "cosine", B))),
            FinishedFit(0.6, float("nan"), task, 1.0, AnnealingCurve(0.5, 1.2, 0.6, 0.3, logged, 0.1)),
            FinishedFit(0.5, 0.2, task, 1.2)]
    back = [fit_from_record(json.loads(json.dumps(fit_record(f)))) for f in fits]
    assert len(back[1].curve.schedule.xs) == GRID < len(logged.xs) and np.isnan(back[1].drop)
    assert back[2].curve is None and back[0] == fits[0]
    constant = parse_schedule("constant", B)
    for f, g in zip(fits, back):
        assert transferred_final(g, constant, 0.3) == pytest.approx(transferred_final(f, constant, 0.3), rel=1e-4)
    assert prior_from_fits(back, task, schedule=constant).final == pytest.approx(
        prior_from_fits(fits, task, schedule=constant).final, rel=1e-4)


def test_a_level_prior_never_makes_a_target_unreachable_that_the_fit_alone_reaches():
    x = np.arange(10, 1001, 10.0)
    y = law_curve("cosine", x)
    s = parse_schedule("cosine", B)
    bands = ((-0.1, 0.1),) * 2, ((-0.5, 0.5),) * 2
    # the fit alone: runs went up to e^1 further than predicted; with a level prior, never further at all
    cal = Calibration((0.1, 1.0), *bands, reach=(1.0, 1.0), levelled=Calibration((0.1, 1.0), *bands, reach=(0.0, 0.0)))
    blind = predict_curve(x[:30], y[:30], s, calibration=cal)
    level = CurvePrior(0.7, 0.4, final=1.3 * blind.final_value, final_sigma=0.01)   # runs of the task ended higher
    p = predict_curve(x[:30], y[:30], s, prior=level, target=blind.final_value, calibration=cal)
    assert p.final_value > 1.2 * blind.final_value
    assert p.reachable and p.floor <= blind.final_value


def test_a_level_prior_pulls_the_final_value_but_the_curve_starts_where_the_run_is():
    x = np.arange(10, 1001, 10.0)
    y = law_curve("cosine:warmup=50", x)
    s = parse_schedule("cosine:warmup=50", B)
    base = CurvePrior(alpha=0.7, drop=0.4)
    blind = predict_curve(x[:20], y[:20], s, prior=base)
    high = 2 * blind.final_value
    p = predict_curve(x[:20], y[:20], s, prior=CurvePrior(0.7, 0.4, final=high, final_sigma=0.05))
    assert blind.final_value < p.final_value < high
    now = np.searchsorted(p.curve_x, x[19])
    assert p.curve_y[now] == pytest.approx(blind.curve_y[now], rel=1e-6)


def test_the_logged_noise_is_the_relative_scatter_around_the_fit():
    x = np.arange(1, 2001, 1.0)
    f = lambda q: 1.0 / np.sqrt(q)  # noqa: E731
    y = f(x) * (1 + 0.1 * np.random.default_rng(0).standard_normal(len(x)))
    assert logged_noise(x, y, f) == pytest.approx(0.1, rel=0.15)
    assert logged_noise(x, f(x), f) == 0.0


def test_a_noisy_log_first_reaches_a_target_on_a_flat_end_before_its_mean_does():
    x = np.arange(10, 201, 10.0)
    grid = np.linspace(200, 1000, 801)
    curve = 1.0 + 0.2 * np.exp(-(grid - 200) / 200)      # mean reaches 1.02 at x ≈ 660
    y = np.full(len(x), curve[0])
    exact = first_passage(grid, curve, x, y, 1.02, sigma=0.0)
    assert exact == pytest.approx(200 + 200 * np.log(10), abs=1.0)
    noisy = first_passage(grid, curve, x, y, 1.02, sigma=0.01)
    assert 200 < noisy < exact - 20
    assert noisy == first_passage(grid, curve, x, y, 1.02, sigma=0.01)   # fixed draws
    assert first_passage(grid, curve, x, y, 0.9, sigma=0.01) is None


def test_the_three_point_median_is_numpys_exactly_nan_and_infinities_included():
    """``median3`` replaced np.median over the stacked windows (first_passage's draws, running_median): the same
    values, bit for bit, so every prediction is unchanged."""
    seq = np.random.default_rng(3).standard_normal((64, 502)).round(1)   # rounded: ties too
    seq[3, 10], seq[5, 7], seq[6, 8], seq[7, 9:12] = np.nan, np.inf, -np.inf, 0.5
    a, b, c = seq[:, :-2], seq[:, 1:-1], seq[:, 2:]
    assert np.array_equal(median3(a, b, c), np.median(np.stack([a, b, c]), axis=0), equal_nan=True)
    y = seq[0]
    inner = np.median(np.lib.stride_tricks.sliding_window_view(y, 3), axis=1)
    assert np.array_equal(running_median(y), [(y[0] + y[1]) / 2, *inner, (y[-2] + y[-1]) / 2])
    assert running_median([1.0, 2.0]).tolist() == [1.5, 1.5] and running_median([4.0]).tolist() == [4.0]

def test_the_shipped_shape_prior_carries_its_spread_when_the_table_has_one():
    bands = ((-0.1, 0.1),)
    assert Calibration((0.1,), bands, bands).curve_prior() == CurvePrior()
    assert Calibration((0.1,), bands, bands, prior=(0.4, 0.1)).curve_prior() == CurvePrior(0.4, 0.1)
    p = Calibration((0.1,), bands, bands, prior=(0.4, 0.1, 0.9, 0.25)).curve_prior()
    assert (p.alpha, p.drop, p.alpha_sigma, p.drop_sigma) == (0.4, 0.1, 0.9, 0.25)


def test_one_glitched_evaluation_does_not_bend_the_fit():
    x = np.arange(10, 1001, 10.0)
    s = parse_schedule("cosine:warmup=50", B)
    y = law_curve("cosine:warmup=50", x)
    glitched = y.copy()
    glitched[35] *= 1.8
    clean, robust = fit_annealing(x[:50], y[:50], s), fit_annealing(x[:50], glitched[:50], s)
    assert robust.value(B) == pytest.approx(clean.value(B), rel=0.03)


def test_an_accuracy_target_on_the_other_scale_is_read_on_the_data_s():
    """--target 93 against 0–1 accuracy was unreachable (1 − 93 < 0), 0.93 against % data reached long ago."""
    x = np.arange(10, 1001, 10.0)
    acc = 1 - law_curve("linear", x) / 4
    s = parse_schedule("linear", B)
    want = predict_curve(x[:50], acc[:50], s, metric="accuracy", target=float(acc[60]))
    for data, target in ((acc, 100 * acc[60]), (100 * acc, acc[60]), (100 * acc, 100 * acc[60])):
        p = predict_curve(x[:50], data[:50], s, metric="accuracy", target=float(target))
        assert p.target_step == pytest.approx(want.target_step) and p.reachable
    with pytest.raises(ValueError, match="accuracy target"):
        predict_curve(x[:50], acc[:50], s, metric="accuracy", target=150.0)
    with pytest.raises(ValueError, match="finite"):
        predict_curve(x[:50], acc[:50], s, metric="accuracy", target=float("nan"))


def test_a_long_curve_fits_in_single_threaded_dot_products():
    """OpenBLAS threads dot products over 10 000 elements; on a busy machine those threads spin and a 20 000-point
    curve took 3–30 s. Long vectors are summed in pieces below that size (short ones: one call, as before)."""
    import time

    from dlsched.perf.annealing import DOT_CHUNK, _dot

    u, v = np.random.default_rng(0).random((2, 3 * DOT_CHUNK + 5))
    assert _dot(u, v) == pytest.approx(u @ v, rel=1e-12) and _dot(u[:100], v[:100]) == u[:100] @ v[:100]
    x = np.arange(1, 20001.0)
    y = 0.8 + 2 * (1 + x / 500) ** -0.7 + 0.02 * np.random.default_rng(1).standard_normal(x.size)
    t = time.perf_counter()
    p = predict_curve(x, y, parse_schedule("cosine", 60000), target=1.0)
    assert time.perf_counter() - t < 5 and p.reachable


# a real run: a 13-16-3 MLP on wine (45 held-out samples), SGD under cosine over 300 steps, evaluated every 10
WINE_ACC = [0.7556, 0.9111, 0.9333, 0.9111, 0.9556, 0.9556, 0.9778, 0.9778, 0.9778, 0.9778] + [1.0] * 20


def test_an_accuracy_of_100_percent_is_fitted_below_the_target_and_the_log_reached_it():
    """A small held-out set is all right at times (wine from step 110 on): the predictor refused the whole log
    ("accuracy values must leave a positive error: 1 at x = 110", exit 2) and the service kept no prediction of
    such a job. Such a point is fitted at half the smallest error logged, below a stated goal: a target of 99 %
    is reached where the log got there, and the run is predicted to end where it is."""
    x, acc = np.arange(10, 301, 10.0), np.array(WINE_ACC)
    p = predict_curve(x[:15], acc[:15], parse_schedule("cosine", 300), metric="accuracy", target=0.99)
    assert p.reached and 100 <= p.target_step <= 120 and p.steps_to_target == 0
    assert 0.98 < p.final_value < 1.0 and p.final_value_interval_80[1] <= 1.0
    with pytest.raises(ValueError, match="positive loss: -0.2 at x = 30"):   # a loss not bounded by 0: no stand-in
        predict_curve(x[:5], [1.0, 0.5, -0.2, 0.3, 0.2], parse_schedule("constant", 300))


def test_a_logged_median_already_at_the_goal_crosses_now():
    """The log's 3-point median at the last observed x (its two last points and the next one) is already at the
    goal: the crossing is that x, as the truth's running median puts it, whether the next median is lower or not
    (it was one logging interval later when the next median was not lower)."""
    x = np.arange(10, 101, 10.0)
    y = np.array([2.0, 1.8, 1.6, 1.4, 1.2, 1.0, 0.9, 0.8, 0.5, 0.7])   # median of the last 3: 0.7 > goal
    grid = np.linspace(100, 200, 101)
    flat = np.full_like(grid, 0.58)   # next points at 0.58: medians 0.58 at x = 100 and at x = 110
    assert first_passage(grid, flat, x, y, 0.6, sigma=0.0) == 100.0
    falling = np.linspace(0.58, 0.3, 101)   # the next median lower: this case was right before
    assert first_passage(grid, falling, x, y, 0.6, sigma=0.0) == 100.0


def test_a_target_already_reached_has_an_interval_of_at_least_a_logging_interval():
    """A band of factors cannot widen 0 steps: a target the predictor calls reached got [0, 0] whatever the
    calibration said (and its calibration records, log(remaining / 1e-9·budget) ≈ 20, pushed the bands' ends to
    the budget). The band now scales max(steps, the log's interval)."""
    x = np.arange(10, 301, 10.0)
    cal = Calibration((0.1, 1.0), ((-0.1, 0.1),) * 2, ((-0.5, 0.5),) * 2)
    p = predict_curve(x, law_curve("cosine", x), parse_schedule("cosine", B), target=10.0, prior=None,
                      calibration=cal)
    assert p.steps_to_target == 0 and p.resolution == 10
    assert p.interval_80 == pytest.approx((0.0, 10 * np.exp(0.5)))


def test_a_target_the_log_already_passed_is_placed_where_the_log_got_there():
    """``target_step`` is where the logged 3-point running median first got to the target (as the docs and the
    bench's truth define it), not the last observed x; the steps from now stay 0."""
    x = np.arange(10, 301, 10.0)
    y = law_curve("cosine", x)
    goal = float(y[9])   # passed at x = 100, long before the last point (300)
    p = predict_curve(x, y, parse_schedule("cosine", B), target=goal, prior=None)
    assert p.steps_to_target == 0
    assert p.target_step == pytest.approx(100.0, abs=10.0) and p.target_step < 300


def test_a_target_the_log_already_reached_is_never_out_of_reach_even_where_the_fit_ends_above_it():
    """A run that plateaus, then collapses at the end of its prefix (a fine-tune that finds the task late): the fit
    ends above the value now, and its floor (the final band's low end) was above it too, so a target the log had
    passed was called unreachable. The floor is at most the value now; the target is reached where the log got
    there."""
    x = np.arange(10, 211, 10.0)
    y = np.where(x <= 140, 1.57 - 0.0012 * x, 1.4 * np.exp(-(x - 140) / 15.0))
    now = float(np.median(y[-3:]))
    p = predict_curve(x, y, parse_schedule("linear:warmup=400", 420.0), target=0.04, regime="finetune")
    assert p.final_value > 0.04 > now   # the case: the fit's end above the target the log passed
    assert p.floor <= now
    assert p.steps_to_target == 0 and p.target_step == pytest.approx(194.0, abs=10.0)


def test_no_target_is_out_of_reach_before_the_lr_peaks():
    """A one-cycle run whose loss rises with the LR during the warm-up: before the peak the prefix has seen none of
    the run's main phase, so the floor is 0 and a low target is put at the budget with its chance, not called
    unreachable; once the run is past the peak and the fit has its descent, the same target is out of reach."""
    s = parse_schedule("onecycle:pct=0.3", B)
    assert s.peak_at() == pytest.approx(0.3 * B, abs=10.0)   # the cosine rise is within 0.1 % of its top from ~294
    x = np.arange(25, 251, 25.0)
    y = 1.7 + 0.4 * (x / 250) ** 2
    early = predict_curve(x, y, s, target=0.3)
    assert early.floor == 0 and early.target_step == B and early.p_reach < 0.5
    x2 = np.arange(25, 501, 25.0)
    late = predict_curve(x2, np.concatenate([y, 2.1 - 0.002 * (x2[len(x):] - 250)]), s, target=0.3)
    assert late.floor > 0.3 and late.steps_to_target is None


def test_a_short_prefix_says_never_only_at_the_widest_reach():
    """Five evaluations that fall to a plateau: the reach of the 25 % row was calibrated on dense prefixes, so with
    fewer than ONSET_MIN points "never" takes the earliest (widest) row's; a target below the plateau is put at the
    budget with its chance. With 8 points of the same curve it is out of reach again."""
    s = parse_schedule("linear", 2000.0)
    said = {}
    for n in (5, 8):
        x = np.arange(1, n + 1) * 100.0
        said[n] = predict_curve(x, 0.02 + 0.3 * np.exp(-x / 60), s, target=0.012, regime="finetune")
    assert said[5].target_step == 2000.0 and said[5].p_reach < 0.5 and said[5].floor < 0.012
    assert said[8].steps_to_target is None and said[8].floor > 0.012


def test_logged_crossing_interpolates_like_the_truth_and_says_never():
    x = np.array([0.0, 10, 20, 30, 40])
    y = np.array([4.0, 3.0, 2.0, 1.0, 0.5])   # running medians 3.5, 3, 2, 1, 0.75
    assert logged_crossing(x, y, 2.5) == pytest.approx(15.0)
    assert logged_crossing(x, y, 0.1) is None
    # two points (a second evaluation): each end's 2-point mean, as at the ends of a longer log; numpy raised
    assert logged_crossing([6.0, 12.0], [1.0, 0.8], 0.95) == pytest.approx(6.0)
    assert logged_crossing([6.0, 12.0], [1.0, 0.8], 0.5) is None


def test_a_level_carried_to_the_schedule_takes_the_carried_bands_and_a_plain_mean_the_levelled_ones():
    """Two level tables (``Calibration.level_table``): a carried level is several times more accurate than a plain
    mean, so one table would be too wide for the first or too tight for the second. The choice follows what the
    prior did (``final_carried``): a job without a schedule, or a finished run stored without its fit, gets a
    plain mean. A table from before ``carried`` existed still loads and serves both from ``levelled``."""


    task = {"dataset": "text", "metric": "loss"}
    runs = [AnnealingCurve(0.5, 1.0, 0.7, 0.4, parse_schedule(spec, B)) for spec in ("cosine", "step:500:0.1")]
    fits = [FinishedFit(0.7, 0.4, dict(task), final=float(r.value([B])[0]), curve=r) for r in runs]
    s = parse_schedule("cosine", B)
    carried, plain = prior_from_fits(fits, task, schedule=s), prior_from_fits(fits, task)
    partial = prior_from_fits([fits[0], dataclasses.replace(fits[1], curve=None)], task, schedule=s)
    assert carried.final_carried and not plain.final_carried and not partial.final_carried
    band = lambda w: ((-w, w),) * 2   # noqa: E731
    cal = Calibration((0.1, 1.0), band(0.1), band(0.5), levelled=Calibration((0.1, 1.0), band(0.3), band(0.5)),
                      carried=Calibration((0.1, 1.0), band(0.02), band(0.5)))
    x = np.arange(10, 1001, 10.0)
    y = law_curve("cosine", x)

    def log_width(cal, prior):
        p = predict_curve(x[:30], y[:30], s, prior=prior, calibration=cal)
        lo, hi = p.final_value_interval_80
        return np.log(hi / lo)

    assert log_width(cal, carried) == pytest.approx(0.04)
    assert log_width(cal, plain) == pytest.approx(0.6) == log_width(cal, partial)
    old = from_dict({k: v for k, v in json.loads(cal.to_json()).items() if k != "carried"})
    assert from_dict(json.loads(cal.to_json())) == cal and old.carried is None
    assert log_width(old, carried) == pytest.approx(0.6)


def test_an_accuracy_band_stays_within_0_and_100_percent():
    # a run still near chance: its error is near 100 %, and the error band's multiplicative high end passes it
    x = np.arange(1, 21) * 10.0
    acc = 3.0 + 2.0 * np.log1p(x / 50.0)
    p = predict_curve(x, acc, parse_schedule("cosine", budget=800), metric="accuracy")
    lo, hi = p.final_value_interval_80
    assert 0.0 <= lo <= p.final_value <= hi <= 100.0


@pytest.mark.parametrize("points", [2, 3])
def test_a_sparse_log_s_two_or_three_points_are_predicted_with_the_calibration_s_widest_band(points):
    """An evaluation every few epochs (MLPerf, DAWNBench) has 1-3 points at 10-25 %: refused before. Its band is the
    earliest calibrated fraction's, not that of prefixes of 4 or more points, its upper end cut at the worst value
    logged (that band reaches e^0.7 above the point, past the first loss)."""
    import pandas as pd

    from dlsched.perf.calibration import load_calibration
    from tests.commands.test_predict_curve import RUN

    d = pd.read_csv(RUN).iloc[9::10]   # charlm-step, one evaluation in 10: steps 100, 200, ... 800
    s = parse_schedule("step:400,600:0.1", 800)
    cal = load_calibration()
    x, y = d.step.to_numpy(float), d.loss.to_numpy(float)
    p = predict_curve(x[:points], y[:points], s)
    lo, hi = cal.final_band(cal.fractions[0])
    top = np.log(y[:points].max() / p.final_value)   # the band's upper end is cut at the worst value logged
    assert hi > top and p.final_value_interval_80[1] == pytest.approx(y[:points].max())
    assert np.log(p.final_value_interval_80[0] / p.final_value) == pytest.approx(lo)
    assert cal.final_band(100 * points / 800) != (lo, hi)
    assert 0.9 * y[-1] < p.final_value < y[points - 1]     # the decays still to come: below the last point


def test_one_point_is_predicted_from_the_finished_runs_shapes_with_the_one_point_bands_and_nothing_unreachable():
    """MLPerf's first evaluation comes at about 10 % of the run: one point, refused before. The finished runs' shapes
    carried through it give the curve (``perf.one_point``), the calibration's one-point percentiles its bands; one
    point never calls a target unreachable. Without a finished run's shape (an uncalibrated table) it is refused, as
    is a log with no point after training starts."""
    import pandas as pd

    from dlsched.perf.calibration import UNCALIBRATED, load_calibration
    from tests.commands.test_predict_curve import RUN

    d = pd.read_csv(RUN).iloc[9::10]   # charlm-step, one evaluation in 10: steps 100, 200, ... 800
    s = parse_schedule("step:400,600:0.1", 800)
    cal = load_calibration().without_task("charlm")
    x, y = d.step.to_numpy(float), d.loss.to_numpy(float)
    p = predict_curve(np.array([0.0, x[0]]), np.array([4.6, y[0]]), s, target_fraction=0.95, calibration=cal)
    (lo, hi), (steps_lo, steps_hi) = cal.one_point_bands()
    assert p.model == "prior" and p.floor == 0 and p.reachable
    assert np.log(p.final_value_interval_80[0] / p.final_value) == pytest.approx(lo)
    assert p.final_value_interval_80[1] == pytest.approx(min(p.final_value * np.exp(hi), 4.6))
    assert 0.5 * y[-1] < p.final_value < y[0]               # below the point, by the decays still to come
    assert p.target == pytest.approx(4.6 - 0.95 * (4.6 - p.final_value)) and 0 < p.steps_to_target < 700
    assert p.interval_80[0] == pytest.approx(p.steps_to_target * np.exp(steps_lo))
    assert 0 < p.p_reach < 1
    unreachable = predict_curve(x[:1], y[:1], s, target=0.01, calibration=cal)
    assert unreachable.reachable and unreachable.target_step == 800 and unreachable.p_reach < 0.05
    with pytest.raises(ValueError, match="need at least 2 observed points after training starts"):
        predict_curve(x[:1], y[:1], s, calibration=UNCALIBRATED)
    with pytest.raises(ValueError, match="need at least 2 observed points after training starts"):
        predict_curve(np.array([0.0]), np.array([4.6]), s)


def test_the_steps_point_is_the_calibrated_median_and_the_band_stays_on_the_law_s_crossing():
    """``calibrate`` keeps the median of the steps errors per fraction; the point estimate of a crossing ahead
    is the law's crossing times exp(that median), its 80 % band unchanged. A crossing already behind (a fact)
    and one only at the budget (a bound) are not moved; a table without medians moves nothing."""
    errors = [(0.1, e, e) for e in np.linspace(-0.5, 0.1, 19)] + [(0.5, e, e) for e in np.linspace(-0.3, 0.1, 19)]
    cal = calibrate(errors)
    assert cal.steps_median == pytest.approx((-0.2, -0.1))
    assert cal.steps_shift(0.1) == pytest.approx(-0.2) and cal.steps_shift(0.9) == pytest.approx(-0.1)
    x = np.arange(10, 1001, 10.0)
    y = law_curve("cosine", x)
    s = parse_schedule("cosine", B)
    ahead = float(y[69])   # reached at x = 700, in the cosine's decay
    law = predict_curve(x[:30], y[:30], s, target=ahead, prior=None, calibration=dataclasses.replace(cal, steps_median=None))
    p = predict_curve(x[:30], y[:30], s, target=ahead, prior=None, calibration=cal)
    assert law.steps_to_target > 0 and law.target_step < B
    assert p.steps_to_target == pytest.approx(law.steps_to_target * np.exp(cal.steps_shift(0.3)))
    assert p.target_step == pytest.approx(p.x_now + p.steps_to_target)
    assert p.interval_80 == pytest.approx(law.interval_80)
    assert p.interval_80[0] <= p.steps_to_target <= p.interval_80[1]
    for kw in ({"target": float(y[9])}, {"target": p.final_value * 0.99}):   # behind; below the point: at the budget
        moved, kept = (predict_curve(x[:30], y[:30], s, prior=None, calibration=c, **kw)
                       for c in (cal, dataclasses.replace(cal, steps_median=None)))
        assert (moved.target_step, moved.steps_to_target) == (kept.target_step, kept.steps_to_target)
        assert kept.target_step in (B, pytest.approx(100.0, abs=10.0))
    assert Calibration((0.1,), ((-1.0, 1.0),), ((-1.0, 1.0),)).steps_shift(0.1) == 0.0


def test_a_stated_target_takes_the_stated_steps_band_and_a_share_of_the_improvement_the_other():
    """``calibrate``'s last two record columns are the steps errors of stated targets (a fixed value: ``--target``, a
    job's target): their own band and median; a ``--target-fraction`` goal keeps the other (it moves with the
    predicted final, and misses by more). A table without them serves both from the one band."""
    share = [(0.1, 0.0, e, np.nan, e, np.nan, np.nan) for e in np.linspace(-1.0, 0.2, 19)]
    stated = [(0.1, np.nan, np.nan, np.nan, np.nan, e, e) for e in np.linspace(-0.3, 0.3, 19)]
    cal = calibrate(share + stated)
    assert cal.steps_band(0.1) == pytest.approx(quantile_band(np.linspace(-1.0, 0.2, 19)))
    assert cal.steps_band(0.1, stated=True) == pytest.approx(quantile_band(np.linspace(-0.3, 0.3, 19)))
    assert (cal.steps_shift(0.1), cal.steps_shift(0.1, stated=True)) == pytest.approx((-0.4, 0.0))
    assert from_dict(json.loads(cal.to_json())) == cal
    x = np.arange(10, 1001, 10.0)
    y = law_curve("cosine", x)
    s = parse_schedule("cosine", B)
    goal = predict_curve(x[:30], y[:30], s, target_fraction=0.95, prior=None, calibration=cal)
    fixed = predict_curve(x[:30], y[:30], s, target=goal.target, prior=None, calibration=cal)
    raw = goal.steps_to_target / np.exp(cal.steps_shift(0.3))   # the law's crossing, the same for both
    assert fixed.steps_to_target == pytest.approx(raw) and fixed.interval_80 == pytest.approx(
        [raw * np.exp(b) for b in cal.steps_band(0.3, stated=True)])
    assert goal.interval_80 == pytest.approx([raw * np.exp(b) for b in cal.steps_band(0.3)])
    old = dataclasses.replace(cal, stated_steps=None, stated_steps_median=None)
    assert old.steps_band(0.1, stated=True) == old.steps_band(0.1) and old.steps_shift(0.1, stated=True) == -0.4
    assert "stated_steps" in json.loads(load_calibration().to_json())   # the shipped table has them


def test_the_chance_of_a_target_reads_the_calibrated_median_of_a_skewed_band():
    """``calibrate`` keeps the median of the final errors per fraction; the chance by the budget is a split normal
    through the band's ends and that median. On a band skewed toward worse finals (-0.1 .. +0.7 about a median of 0)
    a target at the predicted final value has an even chance (a normal on the band's middle gave 16 %), and the
    band's ends are its 10 % and 90 % points. A table without medians reads 0, kept inside the band."""
    skewed = np.concatenate([np.linspace(-0.2, 0.0, 10), np.linspace(0.08, 1.0, 9)])
    errors = [(f, e, 0.0) for f in (0.1, 0.5) for e in skewed]
    cal = calibrate(errors)
    assert cal.final_centre(0.1) == pytest.approx(0.0) and from_dict(json.loads(cal.to_json())) == cal
    lo, hi = cal.final_band(0.3)
    assert lo < -0.1 and hi > 0.5   # skewed: the middle is far above the median
    x = np.arange(10, 1001, 10.0)
    y = law_curve("cosine", x)
    s = parse_schedule("cosine", B)
    at = lambda target: predict_curve(x[:30], y[:30], s, target=target, prior=None, calibration=cal)   # noqa: E731
    final = at(None).final_value
    assert at(final).p_reach == pytest.approx(0.5, abs=1e-6)
    assert at(final * np.exp(lo)).p_reach == pytest.approx(0.1, abs=1e-3)
    assert at(final * np.exp(hi)).p_reach == pytest.approx(0.9, abs=1e-3)
    assert reach_chance(1.0, 2.0, 1.0, -0.5, 0.0, 0.5) == pytest.approx(0.5)
    # cut at the worst value logged (the band's upper end is there): just below it, all but certain
    assert reach_chance(1.0, 2.0, 1.0, -0.5, 0.0, 0.5, worst=1.2) > 0.5
    assert reach_chance(1.199, 2.0, 1.0, -0.5, 0.0, 0.5, worst=1.2) == pytest.approx(1.0, abs=0.01)
    old = Calibration((0.1,), ((-0.1, 0.7),), ((-1.0, 1.0),))
    assert old.final_centre(0.1) == 0.0 and Calibration((0.1,), ((0.1, 0.7),), ((-1.0, 1.0),)).final_centre(0.1) == 0.1


def test_a_short_prefix_is_anchored_on_its_newer_half_not_on_its_first_fast_falling_point():
    """The anchor reads the newest fifth, at least 5 points: on a 5-point prefix that was every point, and a
    first evaluation far above a fit that weighs the newest most scaled the whole curve to twice the fit."""
    x = np.array([100.0, 200, 300, 400, 500])
    y = np.array([0.09, 0.02, 0.016, 0.015, 0.012])
    fit = lambda q: np.full_like(np.asarray(q, float), 0.015)  # noqa: E731
    assert anchor(x, y, fit) == pytest.approx(np.mean(y[-3:]) / 0.015)
    long = np.arange(10, 1001, 10.0)
    assert anchor(long, np.full_like(long, 0.03), fit) == pytest.approx(2.0)   # 100 points: the last 20, as before


def test_a_noisy_curve_is_fitted_through_its_middle_not_far_below_it():
    """Per-step minibatch losses scatter around the curve (here log-normally, σ = 0.35). Residuals divided by the
    noisy point weigh most the points noise pulled down, and the fit sank 14 % below the curve (the demo's
    resnet20: a quarter below its data, then lifted whole by the anchor, so the plotted curve ran above its first
    half); the refits' log-like residuals leave half of that or less."""
    s = parse_schedule("constant", 400.0)
    x = np.arange(1.0, 401.0)
    true = AnnealingCurve(0.3, 2.0, 0.5, 0.0, s).value(x)
    ratios = [np.median(fit_annealing(x, true * np.exp(np.random.default_rng(seed).normal(0, 0.35, len(x))), s,
                                      CurvePrior(weight=0.0)).value(x) / true) for seed in range(6)]
    assert np.mean(ratios) > 0.91


def test_before_the_first_point_the_tasks_finished_runs_carried_to_its_schedule_predict_it():
    """Issue 14's prior before the first point: two finished runs of the task (one at a constant LR, one stepped), each
    carried to the new run's cosine by its own law, give its curve (their geometric mean), its final (the level
    prior's) and the time to a target, with bands that contain the run's truth; one point predicts the same, from
    there. Without two such runs there is nothing to predict from."""
    from dlsched.perf.prior import finished_fit

    def done(spec, scale):
        law = dataclasses.replace(AnnealingCurve(0.5, 1.0, 0.7, 0.4, parse_schedule(spec, B)), l0=0.5 * scale,
                                  a=scale)
        return finished_fit(law, {"dataset": "d", "metric": "loss"}, float(law.value([B])[0]))
    runs = [done("constant", 1.0), done("step:500,800:0.1", 1.04)]
    s = parse_schedule("cosine", B)
    prior = prior_from_fits(runs, {"dataset": "d", "metric": "loss"}, schedule=s)
    truth = AnnealingCurve(0.51, 1.02, 0.7, 0.4, s)
    x = np.arange(10, 1001, 10.0)
    y = truth.value(x)
    target = float(y[59])   # reached at x = 600
    p = predict_curve([], [], s, target=target, prior=prior)
    assert (p.model, p.bands, p.x_now, p.floor) == ("prior", "task_runs", 0.0, 0.0) and p.reachable
    assert p.final_value == pytest.approx(prior.final, rel=1e-9)
    assert p.final_value_interval_80[0] < y[-1] < p.final_value_interval_80[1]
    assert p.interval_80[0] <= 600 <= p.interval_80[1] and abs(p.target_step / 600 - 1) < 0.1
    one = predict_curve(x[:1], y[:1], s, target=target, prior=prior)
    assert (one.model, one.bands, one.x_now) == ("prior", "task_runs", 10.0)
    assert one.final_value == pytest.approx(p.final_value) and one.target_step == pytest.approx(p.target_step, abs=1)
    # a target the carried curve starts below (it starts at a tenth of the budget): ahead, never "reached" by a log
    # that has no point (it raised IndexError)
    early = predict_curve([], [], s, target=float(p.curve_y[0]) * 1.01, prior=prior)
    assert early.target_step == pytest.approx(float(p.curve_x[0])) and early.steps_to_target > 0 and not early.reached
    lone = prior_from_fits(runs[:1], {"dataset": "d", "metric": "loss"}, schedule=s)
    with pytest.raises(ValueError, match=r"need at least 2 observed points after training starts, got 0 \(or two "
                                         "finished runs of its task\\)"):
        predict_curve([], [], s, target=target, prior=lone)


def test_a_flat_stretch_of_a_metric_that_moves_one_sample_at_a_time_is_not_its_end():
    """A real run (an MLP on scikit-learn's breast cancer set, constant LR, 171 validation samples) a quarter through:
    its accuracy sat at 154/171 for 60 steps, and 0.93 was called unreachable (exit 3); the run got there at step 370
    and ended at 0.947. The reach of its remaining improvement counts at least one step of the logged values."""
    acc = [0.6842, 0.7836, 0.8246, 0.8596, 0.8655, 0.883, 0.8889, 0.8947, 0.9006, 0.9006, 0.9006, 0.9006, 0.9006,
           0.9006, 0.9064]
    x = np.arange(10, 160, 10.0)
    p = predict_curve(x, acc, parse_schedule("constant", 600), metric="accuracy", target=0.93)
    assert p.reachable and p.floor > 0.93


def test_a_target_the_logs_running_median_got_to_is_reached_though_the_value_now_is_back_below_it():
    """A digits MLP's validation accuracy (SGD at 0.1, step decay at 600 of 1 200), every 20 steps to 400: its
    3-point running median got to 93 % at 320 (the benchmark's truth), then the last three fell back to a median of
    92.4 %. The prediction's first passage fell on the last point: "already reached, at step 400 of the log" with a
    p_reach of 0.90. It is reached where the log got there, at 0 steps and p_reach 1."""
    x = np.arange(20, 401, 20.0)
    acc = np.array([0.2426, 0.6074, 0.7593, 0.7370, 0.8407, 0.7981, 0.8630, 0.8833, 0.9037, 0.9093, 0.9056, 0.9037,
                    0.9074, 0.9111, 0.9204, 0.9315, 0.9370, 0.9241, 0.9352, 0.9222])
    assert np.median(acc[-3:]) < 0.93 and logged_crossing(x, 1 - acc, 0.07) == pytest.approx(317.3, abs=0.1)
    p = predict_curve(x, acc, parse_schedule("step:600,900:0.1", 1200.0), metric="accuracy", target=0.93)
    assert p.reached and p.steps_to_target == 0 and p.p_reach == 1.0
    assert p.target_step == pytest.approx(317.3, abs=0.1)


def test_before_the_lrs_peak_the_final_band_is_the_earliest_fractions():
    """A one-cycle run seen to 25 %, still rising to its peak at 30 %, has seen none of its main phase: its band is the
    earliest (widest) calibrated fraction's, not the 25 % one, set on runs past their peak (a hold-out run's 25 % band
    missed its final by 3x and gave a target it reached a chance under 1 %). Past the peak the observed fraction's."""
    x = np.arange(10, 1001, 10.0)
    cal = Calibration((0.1, 0.5), ((-1.0, 1.0), (-0.1, 0.1)), ((-1.0, 1.0), (-0.1, 0.1)))
    rising = parse_schedule("onecycle:pct=0.3", B)
    p = predict_curve(x[:25], law_curve("onecycle:pct=0.3", x)[:25], rising, calibration=cal, prior=None)
    lo, hi = p.final_value_interval_80
    assert hi / p.final_value == pytest.approx(np.e, rel=1e-6) and p.floor == 0
    past = predict_curve(x[:25], law_curve("cosine", x)[:25], parse_schedule("cosine", B), calibration=cal, prior=None)
    assert past.final_value_interval_80[1] / past.final_value < np.exp(0.9)


def test_a_level_prior_above_the_fits_final_keeps_an_accuracys_predicted_curve_rising():
    """The shift toward the prior's level is in log space; its progress was linear: a digits error curve fitted from
    0.22 toward 0.0025 and levelled to 0.02 rose to 0.53 before it fell (accuracy predicted 78 % -> 47 % -> 98 %)."""
    x = np.arange(10, 801, 10.0)
    err = 0.9 * np.exp(-x / 40) + 0.004 * (x / 800) ** -0.5
    s = parse_schedule("cosine:warmup=40", 800)
    p = predict_curve(x[:8], 1 - err[:8], s, metric="accuracy",
                      prior=CurvePrior(0.6, 0.3, final=0.02, final_sigma=0.05))
    ahead = p.curve_y[p.curve_x >= x[7]]
    assert np.all(np.diff(ahead) >= -1e-12), ahead.min()
    assert p.final_value == pytest.approx(0.98, abs=0.01)


def test_a_run_at_its_budget_has_not_reached_a_target_its_log_never_got_to():
    """A finished run (a real one: examples/stdlib_lm.py, 3 epochs of 36 steps, held-out perplexity 11.49, 9.69,
    9.55) asked for 9: it was "at the newest point, step 108, if the next evaluation stays there (chance by the budget
    75 %)", exit 0, for a run with no step left. Now out of reach (exit 3 in the CLI), its floor the lowest its
    3-point running median got to; a target the log got to is reached as before."""
    x, ppl = np.array([36.0, 72.0, 108.0]), np.array([11.492010554694465, 9.692209025946859, 9.55401025218286])
    s = parse_schedule("cosine:warmup=20", 108)
    p = predict_curve(x, ppl, s, target=9.0)
    assert not p.reachable and p.steps_to_target is None and p.p_reach == 0.0
    assert p.floor == pytest.approx((9.692209025946859 + 9.55401025218286) / 2)
    # its final is where the log ended, with no band: the fit's value at the budget sat below the floor
    assert p.final_value == pytest.approx(p.floor) and p.final_value_interval_80 == (p.final_value, p.final_value)
    assert not predict_curve(x, ppl, s, target=9.6).reachable
    p = predict_curve(x, ppl, s, target=9.63)
    assert p.reached and p.steps_to_target == 0 and p.p_reach == 1.0


def test_an_accuracy_above_100_percent_is_named_as_such():
    """101 on % data said "accuracy values must leave a positive error: 101", as if the run had been too good."""
    with pytest.raises(ValueError, match="accuracy values must be in 0–1 or 0–100 %, got 101 at x = 5"):
        predict_curve([1, 2, 3, 4, 5], [50, 60, 70, 80, 101], parse_schedule("constant", 10), metric="accuracy")
