"""The distribution of job sizes a scheduler without remaining-work information can still learn: the run times of
the jobs that finished, with the running ones' run times as right-censored observations (a job still running is at
least that long), as a Kaplan-Meier estimate. ``goodput``'s ``residual_release`` reads from it when capacity is
expected to free (``release_horizon.expected_release_horizons``).

The history is the one state a policy keeps between decisions: a job seen at one decision and absent at the next
has finished (or left) at its last run time. Decisions stay pure in (history, jobs, cluster).

Measured and not kept (docs/policies.md, "Without predictions: where `none` loses, and when capacity frees"):
the Gittins index on this distribution as the urgency weight (Tiresias' Gittins mode; non-monotone in age, it
nearly doubled restarts), and each running job's mean residual life as its end in the predicted-mode release
horizon (no gain).
"""
from __future__ import annotations

import numpy as np

MIN_FINISHED = 10          # finished jobs before the distribution is used
MAX_HISTORY = 2000         # finished sizes kept (the most recent)


class SizeHistory:
    """Run times of departed jobs, learned from the sequence of decisions (``observe``)."""

    def __init__(self) -> None:
        self._last: dict[str, float] = {}
        self.sizes: list[float] = []

    def observe(self, ages: dict[str, float]) -> None:
        """``ages``: job id -> run time of the jobs present now; any job present before and absent now has left at
        its last run time."""
        for job_id, age in self._last.items():
            if job_id not in ages and age > 0:
                self.sizes.append(age)
        if len(self.sizes) > MAX_HISTORY:
            del self.sizes[: len(self.sizes) - MAX_HISTORY]
        self._last = dict(ages)


def kaplan_meier(sizes: np.ndarray, censored: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Support points and probability masses of the size distribution from finished ``sizes`` and right-censored
    run times; the mass the last censored points leave is put at the largest point."""
    times = np.concatenate((sizes, censored))
    event = np.concatenate((np.ones(len(sizes), bool), np.zeros(len(censored), bool)))
    order = np.lexsort((~event, times))          # events before censorings at equal times
    times, event = times[order], event[order]
    at_risk = len(times) - np.arange(len(times))
    factor = np.where(event, 1.0 - 1.0 / at_risk, 1.0)
    surv = np.cumprod(factor)
    before = np.concatenate(([1.0], surv[:-1]))
    mass = np.where(event, before - surv, 0.0)
    keep = mass > 0
    points, inverse = np.unique(times[keep], return_inverse=True)
    mass = np.bincount(inverse, weights=mass[keep], minlength=len(points))
    if len(points):
        mass[-1] += surv[-1]
    return points, mass
