"""The opt-in adaptive batch (``loader.autoscale_batch_size``): the decision, and a real 2-worker script."""
from __future__ import annotations

from collections import Counter

import pytest

from dlsched.torch.adaptive_batch import DECIDE_EVERY, MIN_SAMPLES, AdaptiveBatch
from dlsched.torch.noise import GradientNoiseEstimator
from dlsched.train.data import committed_sample_ids
from tests.torch.test_elastic_script import start_script, steps
from tests.train.helpers import events, finish

SAMPLES, BATCH = 480, 8


def _noise(sqr: float, trace: float) -> GradientNoiseEstimator:
    est = GradientNoiseEstimator()
    est._sqr, est._trace, est._weight, est.updates = sqr, trace, 1.0, 10
    return est


def _measured(step_s: float = 0.01) -> AdaptiveBatch:
    a = AdaptiveBatch(64, (2, 32))
    for _ in range(MIN_SAMPLES):
        a.observe(2, 4, step_s)
    return a


def test_noisy_gradients_grow_the_batch_and_clean_ones_keep_it():
    grow = _measured().decide(8, 2, 8, _noise(sqr=1.0, trace=8 * 1000.0))  # noise scale 1000 samples
    assert grow is not None and grow.to_batch == 64 and grow.goodput > grow.from_goodput
    assert _measured().decide(8, 2, 8, _noise(sqr=1.0, trace=8 * 0.5)) is None  # noise scale 0.5 samples


def test_nothing_is_decided_before_steps_and_noise_are_measured():
    assert AdaptiveBatch(64).decide(8, 2, 8, _noise(1.0, 8000.0)) is None
    assert _measured().decide(8, 2, 8, GradientNoiseEstimator()) is None


def test_a_resize_keeps_the_batch_within_the_local_bounds():
    a = AdaptiveBatch(64, (2, 32))
    assert a.feasible(8, 1, 8) == 8 and a.feasible(8, 8, 8) == 16 and a.feasible(64, 1, 8) == 32


@pytest.mark.slow
def test_an_opted_in_script_grows_its_batch_exactly_once_and_one_that_did_not_keeps_it(tmp_path):
    adaptive, plain = tmp_path / "adaptive", tmp_path / "plain"
    args = ("--epochs", "2", "--label-noise", "10", "--ckpt-every", "0", "--noise-every", "2")
    finish(start_script(adaptive, 2, *args, "--autoscale", "64", runtime_args=("--record-samples",)), timeout=300)
    finish(start_script(plain, 2, *args, runtime_args=("--record-samples",)), timeout=300)

    decisions = events(adaptive, "batch_size")
    assert decisions, "label noise 10 leaves the gradient mostly noise: a larger batch is worth more"
    first = decisions[0]
    assert (first["from_batch"], first["workers"]) == (BATCH, 2) and first["to_batch"] > BATCH
    assert first["goodput"] > first["from_goodput"] and first["step"] % DECIDE_EVERY == 0
    batches = [r["batch_size"] for r in steps(adaptive)]
    changed = next(i for i, b in enumerate(batches) if b != BATCH)  # on every rank at once, after a sync step
    assert changed > first["step"] and batches[changed] == first["to_batch"]
    rule = events(adaptive, "lr_rule")[0]  # AdamW: the sqrt rule, from the script's batch
    assert (rule["rule"], rule["from_batch"], rule["to_batch"]) == ("sqrt", BATCH, first["to_batch"])
    assert committed_sample_ids(adaptive) == Counter({i: 2 for i in range(SAMPLES)})

    assert not events(plain, "batch_size") and {r["batch_size"] for r in steps(plain)} == {BATCH}
    assert committed_sample_ids(plain) == Counter({i: 2 for i in range(SAMPLES)})


def test_bad_bounds_are_one_line_naming_the_field():
    from dlsched.errors import UserError

    with pytest.raises(UserError, match="max_batch_size=0"):
        AdaptiveBatch(0)
    with pytest.raises(UserError, match=r"local_bsz_bounds=\(8, 4\)"):
        AdaptiveBatch(64, (8, 4))


def test_two_measured_local_batches_are_fitted_not_assumed():
    a = _measured(0.01)
    for _ in range(MIN_SAMPLES):
        a.observe(2, 8, 0.02)  # twice the time for twice the batch: per-sample cost only, no gain from batching
    assert a.step_time(2)(16) == pytest.approx(0.04, rel=0.05)
    assert a.decide(16, 2, 8, _noise(sqr=1.0, trace=8 * 1000.0)) is None  # throughput flat: stay
