"""Which way a logged metric improves, read from its name, for a command not told ``--metric``.

Loggers name their metrics after what they measure: Hugging Face ``eval_accuracy``, Lightning ``val_acc``, timm
``eval_top1``, Ultralytics ``metrics/mAP50(B)``, Keras ``val_accuracy``, speech ``wer``. A name read wrongly is
worse than none: an accuracy predicted as a loss is "already reached" for any target. So a name is read only
through whole words and their known prefixes, and what no rule names stays a loss, with a note where its log rises.
"""
from __future__ import annotations

import re

import numpy as np

# a word (split at anything not a letter or digit, and at camelCase) that starts so is higher-is-better
HIGHER = ("acc", "top1", "top5", "map", "f1", "auc", "iou", "miou", "dice", "bleu", "rouge", "precision", "recall",
          "exact", "em", "r2", "ap", "ap50", "ap75")
# ... and lower-is-better: an error rate; a loss word wins over both (``map_loss`` is a loss)
ERROR = ("err", "error", "wer", "cer", "ter", "top1err", "top5err")
LOSS = ("loss", "nll", "perplexity", "ppl", "bpb", "bpc", "mse", "mae", "rmse", "mape", "smape")


def _words(name: str) -> list[str]:
    spaced = re.sub(r"([a-z])([A-Z])", r"\1 \2", name)
    return [w for w in re.split(r"[^0-9a-z]+", spaced.lower()) if w]


def metric_from_name(name: str) -> str | None:
    """``loss``, ``error`` or ``accuracy`` where the name says so; None where it does not."""
    words = _words(name)
    if any(w in LOSS or w.endswith("loss") for w in words):
        return "loss"
    if any(w in ERROR for w in words):
        return "error"
    if any(w == h or (len(h) > 2 and w.startswith(h) and not w.startswith("accum")) for w in words for h in HIGHER):
        return "accuracy"
    return None


def against_the_grain(y, metric: str) -> bool:
    """The log ended (median of its last 3 points) on the wrong side of where it started (its first 3), for the
    metric's direction: a loss that rose, an accuracy that fell, over the whole log."""
    y = np.asarray(y, float)
    if len(y) < 4:
        return False
    first, last = float(np.median(y[:3])), float(np.median(y[-3:]))
    return last > first if metric in ("loss", "error") else last < first
