"""Gradient noise from two batch sizes at once, as Pollux/AdaptDL measure it (McCandlish et al. 2018, App. A).

With the mean gradient of b samples g_b, E|g_b|² = |G|² + tr(Σ)/b. A step sees the replicas' local gradients
(b each) and their average (B = n·b), so both unknowns follow from two equations per step; each estimate is
unbiased but noisy, hence EMA-smoothed (with bias correction) before the ratio is taken.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass
class GradientNoiseEstimator:
    """EMA of |G|² (``sqr``) and tr(Σ) (per-sample gradient covariance trace, ``trace``)."""

    smoothing: float = 0.9
    _sqr: float = 0.0
    _trace: float = 0.0
    _weight: float = 0.0  # EMA bias correction: sum of the weights given so far
    updates: int = 0  # steps measured so far

    def update(self, local_sqr: float, local_batch: float, total_sqr: float, total_batch: float) -> None:
        """``local_sqr``: mean over replicas of |g_b|²; ``total_sqr``: |g_B|² of their average."""
        if not total_batch > local_batch > 0:
            return
        # the two equations E|g_b|² = |G|² + tr/b at b and B, solved per step
        sqr = (total_batch * total_sqr - local_batch * local_sqr) / (total_batch - local_batch)
        trace = (local_sqr - total_sqr) / (1.0 / local_batch - 1.0 / total_batch)
        theta = self.smoothing
        self._sqr = theta * self._sqr + (1 - theta) * sqr
        self._trace = theta * self._trace + (1 - theta) * trace
        self._weight = theta * self._weight + (1 - theta)
        self.updates += 1

    @property
    def measured(self) -> bool:
        return self._weight > 0

    @property
    def sqr(self) -> float:
        return self._sqr / self._weight if self._weight else 0.0

    @property
    def trace(self) -> float:
        return self._trace / self._weight if self._weight else 0.0

    def variance(self, batch: float) -> float:
        """Pollux's ``grad_var`` at ``batch``: the variance of a batch-mean gradient, tr(Σ)/batch."""
        return max(self.trace, 0.0) / batch

    def record(self, reference_batch: int) -> dict | None:
        """What a step record carries (``grad_noise``; the service reads it), None before any measurement."""
        if not self.measured:
            return None
        return {"sqr": max(self.sqr, 0.0), "var": self.variance(reference_batch), "reference_batch": reference_batch}

    def state_dict(self) -> dict:
        return {"smoothing": self.smoothing, "sqr": self._sqr, "trace": self._trace, "weight": self._weight,
                "updates": self.updates}

    def load_state_dict(self, state: dict) -> None:
        self.smoothing, self._sqr, self._trace, self._weight = (state["smoothing"], state["sqr"], state["trace"],
                                                                state["weight"])
        self.updates = state.get("updates", 1 if self._weight else 0)  # checkpoints from before the count
