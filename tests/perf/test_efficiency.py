import numpy as np
import pytest

from dlsched.perf.efficiency import GradientNoise, efficiency, load_noise_trace, progress_gain


def test_base_batch_has_efficiency_one_and_gain_one():
    n = GradientNoise(sqr=2.0, var=3.0)
    assert efficiency(n, 64, 64) == pytest.approx(1.0)
    assert progress_gain(n, 64, 64) == pytest.approx(1.0)


def test_gain_formula_matches_pollux_definition():
    # (var+sqr)/(var/scale+sqr) with scale 4: (3+1)/(0.75+1)
    n = GradientNoise(sqr=1.0, var=3.0)
    assert progress_gain(n, 256, 64) == pytest.approx(4 / 1.75)
    assert efficiency(n, 256, 64) == pytest.approx(4 / 1.75 / 4)
    assert n.noise_scale(64) == pytest.approx(192)


def test_noise_dominated_gradient_scales_perfectly_and_noiseless_not_at_all():
    assert efficiency(GradientNoise(sqr=0.0, var=5.0), 1024, 32) == pytest.approx(1.0)
    assert progress_gain(GradientNoise(sqr=5.0, var=0.0), 1024, 32) == pytest.approx(1.0)
    assert progress_gain(GradientNoise(0.0, 0.0), 1024, 32) == 1.0


def test_efficiency_decreases_with_batch_vectorised():
    eff = efficiency(GradientNoise(1.0, 10.0), np.array([32, 64, 128, 1024]), 32)
    assert np.all(np.diff(eff) < 0) and eff[0] == pytest.approx(1.0)


def test_cifar10_trace_noise_grows_during_training(data_dir):
    # shared/data/pollux/traces/cifar10/validation-*.csv
    t = load_noise_trace(data_dir / "pollux" / "traces" / "cifar10")
    assert t.base_batch == 128 and t.batches[-1] == 4096 and t.epochs == 100
    early, late = t.efficiency_at(0.0, 2048), t.efficiency_at(35000.0, 2048)
    assert 0 < early < 0.3 < 0.9 < late <= 1.0
    # Between validated sizes the noise is linearly interpolated.
    lo, hi, mid = t.noise(1024, 5), t.noise(2048, 5), t.noise(1536, 5)
    assert mid.sqr == pytest.approx((lo.sqr + hi.sqr) / 2) and mid.var == pytest.approx((lo.var + hi.var) / 2)
    assert t.epoch_at(0.0) == 0 and t.epoch_at(1e12) == 99


def test_batch_outside_validated_range_is_rejected(data_dir):
    t = load_noise_trace(data_dir / "pollux" / "traces" / "cifar10")
    with pytest.raises(ValueError, match="outside"):
        t.noise(64, 0)
