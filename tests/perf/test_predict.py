import numpy as np
import pytest

from dlsched.perf.convergence import LossCurve, fit_curve
from dlsched.perf.efficiency import GradientNoise
from dlsched.perf.predict import (Estimate, allreduce_configurations, best_workers, leave_one_out_error,
                                  ps_configurations, remaining_steps)
from dlsched.perf.profile import optimus_table2, seed_log
from dlsched.perf.speed import AllReduceSpeedModel, ComputeTime, NetworkTime, OptimusSyncSpeed, StepTimeParams


@pytest.fixture(scope="module")
def table2(data_dir):
    # shared/data/tables/optimus2018_tables.csv, Table 2 sync coefficients; M = 64 as in the seed notebook
    return OptimusSyncSpeed(optimus_table2(data_dir / "tables" / "optimus2018_tables.csv")["sync"], 64)


def test_table2_best_workers_follow_the_math_not_the_claim(table2):
    assert best_workers(table2, 2, 19) == 5
    assert best_workers(table2, 4, 19) == 7
    # continuous optimum sqrt(θ0·M·p/(θ2 + θ3·p)) = 5.15 and 7.28
    t = table2.theta
    assert np.sqrt(t[0] * 64 * 2 / (t[2] + t[3] * 2)) == pytest.approx(5.15, abs=0.01)


def test_table2_time_to_train_curve_shape(table2):
    # 25 000 steps, as the notebook assumed. It printed 195.3 h (p=2) and 144.1 h (p=4) with θ1 = 2.73, a
    # transcription error of the paper's 2.78; with 2.78 the same argmin gives 195.7 h and 144.4 h.
    steps = Estimate(25000, 25000, 25000)
    for p, w_best, hours in ((2, 5, 195.67), (4, 7, 144.42)):
        rows = [c for c in ps_configurations(table2, steps, 19 + p, max_ps=p) if c.ps == p]  # servers count
        by_w = {c.workers: c.seconds.value / 3600 for c in rows}
        curve = np.array([by_w[w] for w in range(1, 20)])
        assert int(np.argmin(curve)) + 1 == w_best
        assert by_w[w_best] == pytest.approx(hours, rel=1e-3)
        assert np.all(np.diff(curve[:w_best]) < 0) and np.all(np.diff(curve[w_best - 1:]) > 0)  # U-shaped
    assert by_w[4] > by_w[7]  # "about 4 workers" is not optimal with 4 PS


def test_remaining_steps_interval_brackets_point_and_is_deterministic(data_dir):
    log = seed_log(path=data_dir / "gpu-training" / "resnet50-p100-v2_per_epoch_from_log.csv").iloc[:30]
    fit = fit_curve(log.steps_cum_assumed, log.train_loss)
    a = remaining_steps(fit, 11700, delta=1e-3, steps_per_epoch=390, n_boot=40)
    b = remaining_steps(fit, 11700, delta=1e-3, steps_per_epoch=390, n_boot=40)
    assert a == b
    assert a.low <= a.value <= a.high and a.high > a.low
    assert a.value == pytest.approx(fit.curve.remaining_steps(11700, delta=1e-3, steps_per_epoch=390))


def test_unreachable_target_is_infinite_not_nan():
    k = np.arange(1, 30) * 100.0
    fit = fit_curve(k, LossCurve(1e-3, 1.0, 0.2).loss(k), preprocess=False)
    e = remaining_steps(fit, k[-1], target_loss=0.1 / fit.curve.scale, n_boot=10)
    assert e.value == float("inf") and not np.isnan(e.high)


def test_estimate_scaling_widens_with_speed_error():
    e = Estimate(100, 90, 120).scaled(0.5, 0.1)
    assert e.value == 50 and e.low == pytest.approx(45 / 1.1) and e.high == pytest.approx(60 / 0.9)


def test_allreduce_best_batch_trades_throughput_for_efficiency():
    params = StepTimeParams(ComputeTime(0.0, 0.02, 1e-4), NetworkTime(0.0, (0.01, 0.0, 0.0), (0.05, 0.0, 0.0)), 1.0)
    work = Estimate(1e6, 1e6, 1e6)  # base-batch samples
    noisy = AllReduceSpeedModel({"V100": params}, "V100", GradientNoise(1.0, 100.0), base_batch=64)
    clean = AllReduceSpeedModel({"V100": params}, "V100", GradientNoise(1.0, 0.01), base_batch=64)
    best_noisy = allreduce_configurations(noisy, work, 8, 4, [64, 256, 1024])[0]
    best_clean = allreduce_configurations(clean, work, 8, 4, [64, 256, 1024])[0]
    assert best_noisy.global_batch > best_clean.global_batch  # large batches only pay off when gradients are noisy
    assert best_clean.seconds.value == pytest.approx(1e6 / clean.goodput(best_clean.num_gpus, best_clean.num_nodes, best_clean.global_batch))


def test_leave_one_out_error_is_honest_for_a_line():
    x = np.arange(6.0)
    y = 1 + 2 * x + np.array([0, 0.1, 0, -0.1, 0, 0.1])

    def fp(mask, i):
        b, a = np.polyfit(x[mask], y[mask], 1)
        return a + b * x[i], y[i]

    assert 0 < leave_one_out_error(6, fp) < 0.05
