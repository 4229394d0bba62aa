"""service/progress_axis.py: x is the step while the batch stays; after a change, samples over the first batch,
mapped back to steps along the records and at the batch now ahead."""
import numpy as np

from dlsched.service.progress_axis import ProgressAxis
from dlsched.service.progress_history import ProgressHistory


def history(batches, replay=()):
    recs, samples = [], 0
    for step, b in enumerate(batches, start=1):
        samples += b
        recs.append({"step": step, "samples": samples, "batch_size": b})
    return ProgressHistory.of(recs + list(replay))


def test_one_batch_keeps_the_steps():
    assert ProgressAxis.of(history([8] * 10)) is None
    assert ProgressAxis.of(ProgressHistory()) is None


def test_after_a_change_x_counts_the_first_batchs_steps_and_maps_back_to_steps():
    axis = ProgressAxis.of(history([8] * 4 + [16] * 3 + [4] * 2))
    assert axis.unit == 8 and axis.batch_now == 4
    assert axis.past_x.tolist() == [1, 2, 3, 4, 6, 8, 10, 10.5, 11]
    assert axis.steps([4, 7, 11]).tolist() == [4, 5.5, 9]
    assert axis.steps([13]).tolist() == [13]          # ahead: 2 x of 8 samples are 4 steps at the batch now
    plan = {"step": 9, "batch_size": 4, "samples": 88, "lr_factor": 0.5, "steps": [10, 12], "lr": [0.1, 0.1]}
    assert axis.plan_x(plan).tolist() == [11.5, 12.5]
    assert axis.plan_x({k: v for k, v in plan.items() if k != "samples"}) is None


def test_a_replayed_step_counts_once_and_samples_that_do_not_grow_give_no_axis():
    replay = [{"step": 5, "samples": 48, "batch_size": 16}]   # restarted from step 4's checkpoint: step 5 again
    axis = ProgressAxis.of(history([8] * 4 + [16] * 2, replay))
    assert axis.past_steps.tolist() == [1, 2, 3, 4, 5, 6] and axis.past_x.tolist() == [1, 2, 3, 4, 6, 8]
    broken = [{"step": 7, "samples": 10, "batch_size": 16}]
    assert ProgressAxis.of(history([8] * 4 + [16] * 2, broken)) is None
    assert np.isfinite(ProgressAxis.of(history([8, 16])).steps([0.5, 1.5])).all()
