"""The LR rule on a batch change: factors, the SGD ramp with momentum compensation, the Adam-family default."""
import math

import pytest
import torch

from dlsched.torch.lr_rule import LrFactor, compensate_momentum, default_rule, target_factor
from dlsched.torch.noise import GradientNoiseEstimator


def test_factors_per_rule_for_a_doubled_batch():
    noise = GradientNoiseEstimator()
    assert target_factor("linear", 128, 64, noise) == 2.0
    assert target_factor("sqrt", 128, 64, noise) == pytest.approx(math.sqrt(2))
    assert target_factor("none", 128, 64, noise) == 1.0
    assert target_factor("adascale", 128, 64, noise) == 2.0  # nothing measured yet: linear
    noise.update(local_sqr=3.0, local_batch=32, total_sqr=2.0, total_batch=64)  # |G|² = 1, tr Σ = 64
    assert target_factor("adascale", 128, 64, noise) == pytest.approx((1 + 1) / (0.5 + 1))


def test_sgd_defaults_to_linear_and_adam_family_to_sqrt():
    p = [torch.nn.Parameter(torch.zeros(1))]
    assert default_rule(torch.optim.SGD(p, lr=0.1)) == "linear"
    assert default_rule(torch.optim.AdamW(p)) == "sqrt" and default_rule(torch.optim.Adam(p)) == "sqrt"


def test_the_factor_ramps_over_its_steps_and_momentum_keeps_lr_times_velocity():
    f = LrFactor().retarget(step=0, target=1.0, ramp=8, batch=64)  # the first setting takes effect at once
    g = f.retarget(step=10, target=3.0, ramp=8, batch=192)
    assert [g.at(s) for s in (9, 10, 14, 18, 30)] == [1.0, 1.0, 2.0, 3.0, 3.0]
    p = torch.nn.Parameter(torch.ones(2))
    opt = torch.optim.SGD([p], lr=0.1, momentum=0.9)
    p.grad = torch.ones(2)
    opt.step()
    before = opt.state[p]["momentum_buffer"].clone()
    compensate_momentum(opt, 1.0, 2.0)
    assert torch.allclose(opt.state[p]["momentum_buffer"] * 2.0, before)
