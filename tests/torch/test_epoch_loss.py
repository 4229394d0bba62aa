"""``EpochLoss``: epoch_end's mean_loss from the committed steps' reported losses."""
import math

import pytest

from dlsched.torch.epoch_loss import EpochLoss


def test_the_mean_is_sample_weighted_counts_each_step_once_and_survives_a_handover():
    e = EpochLoss()
    e.add(2.0, 8, step=1)
    e.add(2.0, 8, step=1)            # counted at next_epoch, then committed at the boundary: once
    e.add(None, 8, step=2)           # no loss reported
    e.add(math.nan, 8, step=3)       # not a number it can average
    carried = EpochLoss(e.sums())    # a resize's End / a checkpoint
    carried.add(5.0, 4, step=4)      # a short last step
    assert carried.close() == pytest.approx((2.0 * 8 + 5.0 * 4) / 12)
    assert carried.sums() == [0.0, 0] and carried.close() is None
