"""A prediction from one point after training starts: an evaluation every few epochs (MLPerf's first comes at about
10 % of the run) leaves too few points to fit the law's two linear terms (``perf.annealing``).

Each finished run's fitted law, with its LR area counted in shares of its budget's (u = S1 / S1(budget)), is a
member: its shape (α, the floor's share L0 / A_u and the offset s0 / S1(budget)) is carried to the new run's
schedule, with its drop c (the prior's where its LR never fell), and scaled through the point. The members' finals,
weighed as ``perf.prior`` weighs finished runs (``shape_pool``, ``kernel_weights``), give the prediction: the weighted
median member is the curve. It assumes a run at the same share of its budget's LR area is as far along its own law
as the finished runs were; another task's run may not be, so the bands are the calibration's (``Calibration.
one_point``: the development curves' own misses from one point, other tasks' shapes only), not the members' spread,
which covered 39 % of those finals. A target is never called unreachable from one point (the floor is 0): one point
cannot show where a curve flattens.
"""
from __future__ import annotations

import dataclasses
import math

import numpy as np

from dlsched.perf.annealing import AnnealingCurve
from dlsched.perf.prior import FinishedFit, kernel_weights, shape_pool
from dlsched.perf.schedule import Schedule, areas


def relative_shape(curve: AnnealingCurve) -> tuple[float, float]:
    """(L0 / A_u, s0 / S1(budget)) of a fitted law: its shape with the LR area in shares of its budget's."""
    s1_end = float(areas(curve.schedule, [curve.schedule.budget])[0][0])
    a_u = curve.a * s1_end ** (-curve.alpha)
    return (curve.l0 / a_u if a_u > 0 else math.inf), curve.s0 / s1_end


def member(f: FinishedFit, schedule: Schedule, x1: float, y1: float, drop: float) -> AnnealingCurve | None:
    """Finished run ``f``'s shape on ``schedule``, through (x1, y1); None without a shape (no fit, no relative
    shape) or where the shape has no positive value at x1."""
    shape = f.relative_shape or (None if f.curve is None else relative_shape(f.curve))
    if shape is None:
        return None
    ratio, offset = shape
    s1_end = float(areas(schedule, [schedule.budget])[0][0])
    c = f.drop if math.isfinite(f.drop) else drop
    flat = math.isinf(ratio)   # all floor
    unit = AnnealingCurve(1.0 if flat else ratio, 0.0 if flat else s1_end ** f.alpha, f.alpha, c, schedule,
                          offset * s1_end)
    at = float(unit.value([x1])[0])
    if not (math.isfinite(at) and at > 0):
        return None
    k = y1 / at
    return dataclasses.replace(unit, l0=unit.l0 * k, a=unit.a * k)


def members(fits: list[FinishedFit], meta: dict, schedule: Schedule, x1: float, y1: float,
            drop: float) -> tuple[list[AnnealingCurve], np.ndarray]:
    """The members (module doc) of the finished runs ``perf.prior`` pools for a run of ``meta``, and their weights."""
    pool = shape_pool(fits, meta, lambda f: True)
    out = [(m, w) for f, w in zip(pool, kernel_weights(pool, meta))
           if (m := member(f, schedule, x1, y1, drop)) is not None]
    return [m for m, _ in out], np.array([w for _, w in out], float)
