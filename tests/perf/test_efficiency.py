import numpy as np
import pytest

from dlsched.perf.efficiency import GradientNoise, efficiency, progress_gain


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
