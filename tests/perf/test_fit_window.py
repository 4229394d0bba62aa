from pathlib import Path

import numpy as np
import pytest

from dlsched.perf.annealing import AnnealingCurve, CurvePrior
from dlsched.perf.curve_predict import predict_curve
from dlsched.perf.fit_window import convex_onset, fit_start, warmup_end
from dlsched.perf.schedule import parse_schedule

B = 1000.0


def test_the_fit_starts_where_the_warm_up_ends_while_enough_points_remain():
    s = parse_schedule("cosine:warmup=100", B)
    x = np.arange(10, 301, 10.0)
    assert x[warmup_end(x, s)] == 100
    assert x[fit_start(x, 1 / x, s)] == 100
    short = x[x <= 120]                         # three points past the warm-up: fewer than four, keep them all
    assert fit_start(short, 1 / short, s) == 0
    assert warmup_end(x, parse_schedule("constant", B)) == 0


def test_a_logged_warm_up_ends_at_the_point_nearest_its_peak_not_the_first_after_it():
    """A run's logged LR meets its peak between two logging points (charlm-cosine: 0.975 of it at step 40, the warm-up
    ends at 41): the point at 40 is past the warm-up as a SPEC's `warmup=40` puts it. The first point at the peak
    itself was step 50: one point fewer of four or five after a 10 % prefix's warm-up (bench/live_lr.py)."""
    import pandas as pd

    from dlsched.perf.schedule import Schedule

    d = pd.read_csv(Path(__file__).resolve().parents[2] / "bench" / "curves" / "charlm-cosine.csv")
    logged = Schedule.from_points(d.step, d.lr, 800.0)
    x = d.step.to_numpy(float)
    assert x[warmup_end(x, logged)] == x[warmup_end(x, parse_schedule("cosine:warmup=40", 800.0))] == 40


def test_a_slow_start_after_the_warm_up_is_left_out_too():
    k = np.arange(1, 401.0)
    tail = 0.2 + 1.0 / (0.05 * np.maximum(k - 60, 0) + 1.0)
    slow = np.where(k < 60, 1.3 - 0.001 * k, tail)
    assert 60 <= k[fit_start(k, slow, parse_schedule("constant", 400.0))] <= 120
    assert convex_onset(k, 0.2 + 1.0 / (0.05 * k + 1.0)) <= 20


def test_a_warm_up_the_law_does_not_describe_does_not_bend_the_prediction():
    """The loss sits near its initial value through a warm-up, then follows the law: fitted through the
    warm-up, the convex law bends toward an early floor; from the warm-up's end it predicts the law's end."""
    s = parse_schedule("cosine:warmup=100", B)
    law = AnnealingCurve(0.5, 1.0, 0.7, 0.1, s)
    x = np.arange(10, 1001, 10.0)
    y = np.where(x < 100, 2.3 - 0.002 * x, law.value(x))
    seen = x <= 300
    p = predict_curve(x[seen], y[seen], s, prior=CurvePrior(alpha=0.7, drop=0.1))
    assert p.final_value == pytest.approx(y[-1], rel=0.03)
    assert p.curve_x[0] == 100                 # the curve is drawn from the first point fitted, not through the warm-up
