"""A logged value that leaves nothing to model: an accuracy of 100 % (a small held-out set: wine's 45 samples
all right), a training loss logged as 0 (float32 underflow on an easy batch). The models are relative
(log-space), so such a point stands in at half the smallest positive value logged (an error of 0 is below one
sample's 1/N), and never above a positive goal, so that a target the log reached stays reached. Negative
values (a loss that is not bounded below by 0) are not this: they stay refused."""
from __future__ import annotations

import numpy as np


def stand_in(y, goal: float | None = None) -> float | None:
    """The positive value a 0 of ``y`` (lower-is-better) is fitted as; None where ``y`` has no 0 or no positive
    value to scale it by."""
    y = np.asarray(y, float)
    positive = y[y > 0]
    if not (y == 0).any() or not positive.size:
        return None
    value = float(positive.min()) / 2
    return min(value, goal / 2) if goal is not None and goal > 0 else value


def with_stand_in(y, goal: float | None = None) -> np.ndarray:
    """``y`` with its zeros at ``stand_in`` (as it is where there is none)."""
    y = np.asarray(y, float)
    value = stand_in(y, goal)
    return y if value is None else np.where(y == 0, value, y)
