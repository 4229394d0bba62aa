import numpy as np
import pytest

from dlsched.perf.metric_names import against_the_grain, metric_from_name


@pytest.mark.parametrize("name, metric", [
    ("eval_accuracy", "accuracy"), ("val_acc", "accuracy"), ("Accuracy/val", "accuracy"), ("eval_top1", "accuracy"),
    ("top1Accuracy", "accuracy"), ("metrics/mAP50(B)", "accuracy"), ("metrics/mAP50-95(B)", "accuracy"),
    ("eval_f1", "accuracy"), ("val_auc", "accuracy"), ("eval_exact_match", "accuracy"), ("bleu", "accuracy"),
    ("wer", "error"), ("eval_wer", "error"), ("val_error", "error"), ("top1_err", "error"),
    ("loss", "loss"), ("eval_loss", "loss"), ("val/box_loss", "loss"), ("train/map_loss", "loss"), ("val_ppl", "loss"),
    ("val_mape", "loss"), ("lr", None), ("val_metric", None), ("accumulated_tokens", None), ("score", None),
])
def test_the_names_loggers_give_their_metrics(name, metric):
    assert metric_from_name(name) == metric


def test_against_the_grain_compares_the_ends_of_the_whole_log():
    rising = np.array([0.2, 0.25, 0.22, 0.4, 0.5, 0.6])
    assert against_the_grain(rising, "loss") and against_the_grain(rising, "error")
    assert not against_the_grain(rising, "accuracy") and against_the_grain(rising[::-1], "accuracy")
    assert not against_the_grain(rising[:3], "loss")   # too few points to say
