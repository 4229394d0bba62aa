"""The loss a script's ``epoch_end`` record carries: the epoch's reported step losses, sample-weighted.

Each committed step's ``loss`` (what rank 0 passed to ``report``, the step record's) counts once, weighted by the
step's samples, as the make_job worker weighs its steps. The sums ride in a resize's End and in the checkpoint, so
the mean is the whole epoch's across resizes and restarts (a restart replays the steps after its checkpoint).
"""
from __future__ import annotations

import math

from dlsched.numbers import is_number


class EpochLoss:
    def __init__(self, sums: list[float] | None = None):
        self.total, self.samples = (float(sums[0]), int(sums[1])) if sums else (0.0, 0)
        self.last_step: int | None = None  # counted already (a step the loop broke out after, before its commit)

    def sums(self) -> list[float]:
        return [self.total, self.samples]

    def add(self, loss, samples: int, step: int) -> None:
        """Step ``step``'s reported loss (None or not a finite number: not counted)."""
        if step == self.last_step or not is_number(loss) or not math.isfinite(loss):
            return
        self.total, self.samples, self.last_step = self.total + float(loss) * samples, self.samples + samples, step

    def close(self) -> float | None:
        """The epoch's mean (None when no step reported a loss); the next epoch starts from zero."""
        mean = self.total / self.samples if self.samples else None
        self.total, self.samples = 0.0, 0
        return mean
