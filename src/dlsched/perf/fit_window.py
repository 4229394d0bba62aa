"""Where a loss model's fit starts: the first point the convex laws describe.

Both loss models (the annealing law, Optimus) are convex and decreasing in their driver, but a run's first
points often are not: a linear LR warm-up from 0 (S1 grows quadratically there while the loss passes through
its fastest transient — a language model learning its unigram statistics, a classifier leaving its
initialisation) and a slow start (a plateau at the initial loss, then an accelerating fall). Fitted through
those points, the convex law spends its exponent on them: it bends toward a fast saturation and extrapolates
a floor far too high (measured in ``docs/curve-prediction.md``: "Fit window").

``fit_start`` skips the warm-up (the points before the LR first reaches 95 % of its peak), then a slow start in what
remains (``convex_onset``), each only while at least ``min_points`` points stay to fit. The LR areas still
count from x = 0: only the fit's rows change, not the law.
"""
from __future__ import annotations

import numpy as np
from scipy.ndimage import median_filter

from dlsched.perf.schedule import Schedule

ONSET_SPAN = 1 / 2    # the part of the observed steps in which a slow start may end
ONSET_MIN = 8         # fewer points than this: no slow start is looked for (one noisy point would decide it)
# a logged LR meets its peak between two points: the one just before it is past the warm-up, as a SPEC's
# round warm-up keeps it (docs/curve-prediction.md: "A run still training")
WARM = 0.95


def convex_onset(k: np.ndarray, l: np.ndarray) -> int:
    """Index of the first point the loss models describe: where the median-smoothed curve, past its steepest
    descent in the first half of the steps seen, falls at half that rate. A curve falling fastest at its start
    keeps (nearly) every point."""
    k, l = np.asarray(k, float), np.asarray(l, float)
    if len(k) < ONSET_MIN:
        return 0
    smooth = median_filter(l, size=max(3, len(l) // 10), mode="nearest")
    slope = np.gradient(smooth, k)
    early = int(np.searchsorted(k, k[0] + ONSET_SPAN * np.ptp(k), side="right"))
    steepest = int(np.argmin(slope[:max(early, 1)]))
    if steepest == 0:
        return 0
    eased = np.flatnonzero(slope[steepest:early] >= 0.5 * slope[steepest])
    return steepest + int(eased[0]) if len(eased) else steepest


def warmup_end(x: np.ndarray, schedule: Schedule) -> int:
    """Index of the first point at which the LR has reached ``WARM`` of its peak over the budget (0 without a warm-up;
    ``len(x)`` when the prefix ends before the peak)."""
    x = np.asarray(x, float)
    peak = float(np.max(schedule.lr(np.linspace(0.0, schedule.budget, 4096))))
    at = np.flatnonzero(schedule.lr(x) >= WARM * peak)
    return int(at[0]) if len(at) else len(x)


def fit_start(x, y, schedule: Schedule, min_points: int = 4) -> int:
    """Index of the first point to fit (module doc): past the warm-up, then past a slow start, each only while
    ``min_points`` points remain."""
    start = warmup_end(x, schedule)
    if len(x) - start < min_points:
        start = 0
    onset = start + convex_onset(np.asarray(x)[start:], np.asarray(y)[start:])
    return onset if len(x) - onset >= min_points else start
