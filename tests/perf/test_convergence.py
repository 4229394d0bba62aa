import numpy as np
import pytest

from dlsched.perf.convergence import LossCurve, OnlineConvergence, fit_curve, normalise, remove_outliers
from dlsched.perf.profile import seed_log


def test_seed_log_fit_reaches_reference_rmse(data_dir):
    # shared/data/gpu-training/resnet50-p100-v2_per_epoch_from_log.csv; reference beta (1.092e-3, 0.6751, 0.06638), RMSE 0.0085
    log = seed_log(path=data_dir / "gpu-training" / "resnet50-p100-v2_per_epoch_from_log.csv")
    fit = fit_curve(log.steps_cum_assumed, log.train_loss)
    assert fit.rmse <= 0.01
    assert fit.curve.beta0 == pytest.approx(1.092e-3, rel=0.05)
    assert fit.curve.beta1 == pytest.approx(0.6751, rel=0.05)
    assert fit.curve.beta2 == pytest.approx(0.06638, rel=0.05)
    assert fit.curve.scale == pytest.approx(log.train_loss.max())


def test_recovers_exact_parameters_and_is_deterministic():
    k = np.arange(0, 20000, 200.0)
    true = LossCurve(2e-3, 1.0, 0.1)
    l = true.loss(k)
    a, b = fit_curve(k, l, preprocess=False), fit_curve(k, l, preprocess=False)
    assert a.curve == b.curve
    assert a.rmse < 1e-6
    # Normalised by l(0) = 1.1: beta0, beta1 scale by 1.1 and beta2 by 1/1.1; raw losses are reproduced.
    assert a.curve.beta0 == pytest.approx(2.2e-3, rel=1e-3) and a.curve.beta2 == pytest.approx(0.1 / 1.1, rel=1e-3)
    assert np.allclose(a.curve.raw_loss(k), l, atol=1e-6)


def test_parameters_are_non_negative_even_for_rising_loss():
    fit = fit_curve([0, 1, 2, 3, 4], [1.0, 1.1, 1.2, 1.3, 1.4], preprocess=False)
    c = fit.curve
    assert min(c.beta0, c.beta1, c.beta2) >= 0


def test_outlier_spike_is_replaced_by_neighbour_mean():
    l = np.array([1.0, 0.9, 0.8, 3.0, 0.7, 0.65, 0.6, 0.55])
    out = remove_outliers(l)
    assert out[3] == pytest.approx(0.75)
    assert np.array_equal(np.delete(out, 3), np.delete(l, 3))


def test_normalise_by_own_max():
    n, s = normalise([2.0, 4.0, 1.0])
    assert s == 4.0 and n.max() == 1.0


def test_remaining_steps_to_target_and_to_delta_rule():
    c = LossCurve(1e-3, 1.0, 0.1)
    # l = 0.2 -> x = 10 -> k = 9000
    assert c.steps_to_loss(0.2) == pytest.approx(9000)
    assert c.remaining_steps(4000, target_loss=0.2) == pytest.approx(5000)
    assert c.steps_to_loss(0.1) == float("inf")
    assert c.steps_to_loss(5.0) == 0.0
    E, delta = 100, 1e-3
    k = c.converged_step(delta, E)
    drop = lambda kk: c.loss(kk) - c.loss(kk + E)  # noqa: E731
    assert drop(k) == pytest.approx(delta, rel=1e-9)
    assert drop(k - E) > delta
    assert c.remaining_steps(k + 10, delta=delta, steps_per_epoch=E) == 0.0


def test_too_few_points_rejected():
    with pytest.raises(ValueError, match="at least 3"):
        fit_curve([0, 1], [1.0, 0.5])


def test_online_refit_tracks_new_points():
    c = LossCurve(1e-3, 1.0, 0.1)
    on = OnlineConvergence()
    for k in range(0, 600, 100):
        on.add(k, float(c.loss(k)) * 3)
        if len(on) < 3:
            assert on.refit() is None
    first = on.refit()
    assert on.refit() is first  # cached until a new point arrives
    on.add(600, float(c.loss(600)) * 3)
    assert on.refit() is not first and on.refit().rmse < 1e-4
    with pytest.raises(ValueError):
        on.add(600, 1.0)


def test_delta_stopping_at_is_the_inverse_of_converged_step():
    c = LossCurve(1e-3, 1.0, 0.1)
    E = 100
    for k in (5000.0, 20000.0):
        assert c.converged_step(c.delta_stopping_at(k, E), E) == pytest.approx(k, rel=1e-9)
    # The decrease of the epoch that *ended* at k is larger: used as δ it stops one epoch early.
    early = c.loss(20000 - E) - c.loss(20000)
    assert c.converged_step(early, E) == pytest.approx(20000 - E, rel=1e-9)


def test_partial_fit_of_an_optimus_curve_predicts_where_the_owner_threshold_stops():
    # Raw losses (scale 2) on 80 epochs of 100 steps; the owner's δ (raw units) stops the job at the last step.
    E, true = 100.0, LossCurve(1e-3, 1.0, 0.1, scale=2.0)
    k = E * np.arange(1, 81)
    raw = true.raw_loss(k)
    delta_raw = true.delta_stopping_at(k[-1], E) * true.scale
    part = fit_curve(k[:20], raw[:20], preprocess=False).curve
    pred = part.remaining_steps(k[19], delta=delta_raw / part.scale, steps_per_epoch=E)
    assert pred == pytest.approx(k[-1] - k[19], rel=1e-4)
