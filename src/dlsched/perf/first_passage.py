"""When a *logged* metric first reaches a target.

A run "reaches 93 %" at the first logged point whose 3-point running median gets there (what a user reads off
the log, and the development benchmark's truth). Near a flat end, noise makes that happen well before the
expected curve gets there: every logged point is another chance to dip below. So the predicted curve is
sampled at the run's own logging interval with its own noise, smoothed the same way, and the prediction is
the median first crossing over a fixed set of draws (deterministic).
"""
from __future__ import annotations

import numpy as np

DRAWS = 128
MAX_POINTS = 1000     # a finer log is sampled coarser: < 1 ms per prediction
TAIL = 0.2


def _tail(n: int) -> int:
    """The newest points the noise and the logging interval are read from: a fifth, at least 5."""
    return min(n, max(5, int(round(TAIL * n))))


def log_interval(x) -> float:
    """The logging interval of the newest fifth of the points (at least 5): how finely a crossing can be told."""
    k = _tail(len(x))
    return float(np.median(np.diff(np.asarray(x, float)[-k:]))) if len(x) > 1 else 0.0


def value_grain(y) -> float:
    """The step a quantized log's values move by: a metric of a small evaluation set by one sample (1/171 of an
    accuracy), sitting flat between such steps; a loss logged to 4 decimals by 1e-4. A log is quantized where a
    value repeats; else (every value its own) 0: the gaps of a smooth curve are its slope, not a grain."""
    y = np.asarray(y, float)
    distinct = np.unique(y)
    return float(np.diff(distinct).min()) if 1 < len(distinct) < len(y) else 0.0


def logged_noise(x, y, f) -> float:
    """Relative noise of the logged values around the fit ``f``, from the newest fifth (at least 5 points):
    1.4826·MAD of the relative residuals (robust to a spike), capped at 0.5."""
    k = _tail(len(x))
    r = y[-k:] / f(x[-k:])
    r = r / np.median(r) - 1
    sigma = 1.4826 * float(np.median(np.abs(r - np.median(r))))
    return min(0.5, sigma) if np.isfinite(sigma) else 0.0


def median3(a, b, c):
    """The elementwise median of three arrays, as np.median of them stacked gives it (NaN where one is NaN), without
    its partition: that was most of ``first_passage``'s time, and so of a service refit of a job with a target."""
    return np.maximum(np.minimum(a, b), np.minimum(np.maximum(a, b), c))


def running_median(y) -> np.ndarray:
    """The logged values' centred 3-point running median, two points' mean at the ends (one point: itself)."""
    y = np.asarray(y, float)
    if len(y) < 2:
        return y
    ends = [(y[0] + y[1]) / 2], [(y[-2] + y[-1]) / 2]
    # two points: their mean at each (no window of 3 fits: numpy raised, and the service stored a refit without its
    # stated target's prediction whenever a second evaluation came in)
    inner = median3(y[:-2], y[1:-1], y[2:])
    return np.concatenate([ends[0], inner, ends[1]])


def logged_crossing(x, y, goal: float) -> float | None:
    """Where the logged values' centred 3-point running median (two points at the ends) first got to ``goal``
    (lower-is-better), interpolated from the point before as the truth is; None if it never did."""
    x, y = np.asarray(x, float), np.asarray(y, float)
    if len(y) < 2:
        return float(x[0]) if len(y) and y[0] <= goal else None
    med = running_median(y)
    hits = np.flatnonzero(med <= goal)
    if not len(hits):
        return None
    i = int(hits[0])
    if i > 0 and med[i - 1] > med[i]:
        return float(np.interp(goal, [med[i], med[i - 1]], [x[i], x[i - 1]]))
    return float(x[i])


def first_passage(grid, curve, x, y, goal: float, sigma: float, seed: int = 0) -> float | None:
    """x where the 3-point running median of the logged values first gets to ``goal`` (lower-is-better), for
    a run following ``curve`` (on ``grid``, from the last observed x on) with relative noise ``sigma``,
    logged every median interval of ``x``; interpolated between the logged points, like the truth. None when
    most draws never get there by the end of ``grid``."""
    x_now, end = float(x[-1]), float(grid[-1])
    if end <= x_now:
        return None
    dx = max(log_interval(x) if len(x) > 1 else end - x_now, (end - x_now) / MAX_POINTS)
    xs = np.minimum(x_now + dx * np.arange(1, int(np.ceil((end - x_now) / dx)) + 1), end)
    mean = np.interp(xs, grid, curve)
    rng = np.random.default_rng(seed)
    sim = mean * (1 + sigma * rng.standard_normal((DRAWS, len(xs))))
    seq = np.concatenate([np.broadcast_to(np.asarray(y[-2:], float), (DRAWS, 2)), sim,
                          sim[:, -1:]], axis=1)   # the last point repeated: its median sees it twice
    med = median3(seq[:, :-2], seq[:, 1:-1], seq[:, 2:])   # med[:, j] centred on seq j+1
    prev, cur = med[:, :-1], med[:, 1:]       # cur[:, i] is the median at xs[i]; prev at the point before
    hit = cur <= goal
    first = np.where(hit.any(axis=1), hit.argmax(axis=1), -1)
    rows = np.flatnonzero(first >= 0)
    if 2 * len(rows) <= DRAWS:
        return None
    i = first[rows]
    p, c = prev[rows, i], cur[rows, i]
    x_prev = np.where(i > 0, xs[np.maximum(i - 1, 0)], x_now)
    # the median at the point before already there (only at x_now, which no draw's hit test sees): that point
    frac = np.where(p <= goal, 0.0, np.where(p > c, np.clip((p - goal) / np.where(p > c, p - c, 1.0), 0.0, 1.0), 1.0))
    cross = np.full(DRAWS, np.inf)
    cross[rows] = x_prev + frac * (xs[i] - x_prev)
    return float(np.median(cross))
