"""Human lines for progress records."""
from dlsched.train.progress_lines import event_line


def test_an_epoch_end_without_a_mean_loss_says_no_placeholder():
    assert event_line({"event": "epoch_end", "epoch": 2, "mean_loss": 0.25}, None).endswith("epoch 2 done: mean loss 0.25")
    line = event_line({"event": "epoch_end", "epoch": 2}, None)    # a dlsched.torch script's epoch
    assert line.endswith("epoch 2 done") and "-" not in line.split("epoch 2")[-1], line


def test_a_resume_names_the_step_it_restored_or_says_it_started_over():
    # the coordinator's record says restored_step; the line printed "resumed from step None"
    assert event_line({"event": "resumed", "new_generation": 2, "restored_step": 10,
                       "checkpoint": "/j/ckpt/step-10"}, None) == "resumed from the checkpoint of step 10 (generation 2)"
    assert event_line({"event": "resumed", "new_generation": 1, "restored_step": 0, "checkpoint": None},
                      None) == "restarted from the beginning (no checkpoint) (generation 1)"
    assert event_line({"event": "resumed", "new_generation": 1, "restored_step": 10, "checkpoint": "/j/ckpt/step-10",
                       "batch_size": 64, "from_batch_size": 32}, None) == \
        "resumed from the checkpoint of step 10 (generation 1) at batch 64 (the checkpoint's: 32)"


def test_an_lr_rule_line_says_the_factor_the_rule_and_the_batches():
    """It printed a bare `lr_rule`, no detail, before the resize it went with."""
    assert event_line({"event": "lr_rule", "rule": "linear", "from_batch": 32, "to_batch": 64, "factor": 2.0,
                       "ramp_steps": 8}, None) == "LR x2 (linear rule, batch 32 -> 64, over 8 steps)"
    assert event_line({"event": "lr_rule", "rule": "sqrt", "from_batch": 32, "to_batch": 128, "factor": 2.0,
                       "ramp_steps": 0}, None) == "LR x2 (sqrt rule, batch 32 -> 128)"   # at once
