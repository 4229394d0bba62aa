"""A prior for a new job's curve from the fits of finished jobs (the seed study regresses the curve on model
depth and GPU type; we do the same on whatever metadata the jobs carry: model family, depth, dataset, batch).

Each finished job contributes its fitted exponent α and its annealing drop c (``AnnealingCurve``: the
fraction of the loss a full decay removes; none from a run whose LR never fell). The prior for a new job is their kernel-weighted mean in
log space, a finished job weighing 4^(number of metadata fields it shares with the new one): same family and
dataset dominate, everything else still counts. The prior's weight in points grows with how many finished
jobs matched, so it stays a hint the new job's own points soon outweigh.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from dlsched.perf.annealing import AnnealingCurve, CurvePrior
from dlsched.perf.schedule import areas

FIELDS = ("family", "depth", "dataset", "batch", "metric")


@dataclass(frozen=True)
class FinishedFit:
    """One finished job: its metadata and the two shape numbers its full-curve fit gives."""

    alpha: float
    drop: float
    meta: dict = field(default_factory=dict)


def finished_fit(curve: AnnealingCurve, meta: dict | None = None) -> FinishedFit:
    _, s2_end = areas(curve.schedule, [curve.schedule.budget])
    # a run whose LR never fell says nothing about the drop a decay brings
    return FinishedFit(curve.alpha, curve.c if s2_end[0] > 0.05 else math.nan, dict(meta or {}))


def prior_from_fits(fits: list[FinishedFit], meta: dict | None = None, default: CurvePrior = CurvePrior()) -> CurvePrior:
    """Kernel-weighted mean of the finished fits (see the module docstring); ``default`` when there are none."""
    if not fits:
        return default
    meta = meta or {}
    w = np.array([4.0 ** sum(1 for k in FIELDS if k in meta and f.meta.get(k) == meta[k]) for f in fits])
    alpha = math.exp(float(np.average(np.log([max(f.alpha, 1e-3) for f in fits]), weights=w)))
    # drop ratios can be 0: average them plainly, a log would make one zero dominate
    seen = np.array([math.isfinite(f.drop) for f in fits])
    drop = float(np.average([f.drop for f in fits if math.isfinite(f.drop)], weights=w[seen])) \
        if seen.any() else default.drop
    matched = float(w.sum() / w.max())  # effective number of equally relevant finished jobs
    return CurvePrior(alpha, drop, weight=default.weight * min(2.0, 1.0 + 0.1 * matched))
