import pytest
import torch

from dlsched.train.scaling import (BatchMode, LrRamp, global_batch_after_resize, local_batch_sizes, micro_batches,
                                   set_lr_compensated)


def test_gamma_sequence_matches_lin_et_al_eq6():
    ramp = LrRamp(base_lr=0.1, k=2.0, t0=100)
    assert [ramp.gamma(t) for t in range(99, 110)] == [1.0, 1.0, 1.125, 1.25, 1.375, 1.5, 1.625, 1.75, 1.875, 2.0, 2.0]
    assert ramp.lr(108) == pytest.approx(0.2)
    down = LrRamp(base_lr=0.4, k=0.25, t0=0)  # scale-in: k < 1 ramps down the same way
    assert [down.gamma(t) for t in (0, 4, 8)] == [1.0, 0.625, 0.25]


def test_rescaled_ramp_starts_from_the_lr_in_use():
    ramp = LrRamp(base_lr=0.1, k=2.0, t0=0).rescaled(current_lr=0.15, old_batch=64, new_batch=32, t0=4)
    assert (ramp.base_lr, ramp.k, ramp.lr(4), ramp.lr(12)) == (0.15, 0.5, 0.15, pytest.approx(0.075))


def test_local_batches_split_like_or_et_al_and_modes():
    assert local_batch_sizes(10, 4) == [3, 3, 2, 2]
    assert sum(local_batch_sizes(97, 5)) == 97
    assert global_batch_after_resize(BatchMode.FIXED_GLOBAL, 64, 2, 4) == 64
    assert global_batch_after_resize(BatchMode.FIXED_LOCAL, 64, 2, 4) == 128


def test_micro_batches_accumulate_past_memory_limit():
    assert micro_batches(64, None) == [64]
    assert micro_batches(64, 32) == [32, 32]
    assert micro_batches(70, 32) == [24, 23, 23]


def test_compensated_lr_change_keeps_velocity_continuous():
    """Form (4): after η→kη the next update uses the old velocity μ·v, not k·μ·v (eq. 5)."""
    w = torch.nn.Parameter(torch.zeros(1))
    opt = torch.optim.SGD([w], lr=0.1, momentum=0.9)
    w.grad = torch.ones(1)
    opt.step()  # v = 0.1
    set_lr_compensated(opt, 0.4)
    w.grad = torch.zeros(1)
    before = w.detach().clone()
    opt.step()
    assert (before - w.detach()).item() == pytest.approx(0.9 * 0.1)  # naive lr change would give 0.36
