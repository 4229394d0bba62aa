"""Human lines for progress records."""
from dlsched.train.progress_lines import event_line


def test_an_epoch_end_without_a_mean_loss_says_no_placeholder():
    assert event_line({"event": "epoch_end", "epoch": 2, "mean_loss": 0.25}, None).endswith("epoch 2 done: mean loss 0.25")
    line = event_line({"event": "epoch_end", "epoch": 2}, None)    # a dlsched.torch script's epoch
    assert line.endswith("epoch 2 done") and "-" not in line.split("epoch 2")[-1], line
