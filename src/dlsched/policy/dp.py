"""Separable GPU allocation: split K GPUs among jobs to maximise the sum of per-job value curves.

Each job j has a value curve ``u_j[g]`` for ``g = 0..G_j`` GPUs (``-inf`` where g is infeasible; ``u_j[0] = 0``
lets the job wait, ``-inf`` forces it to run). The problem ``max sum_j u_j[g_j] s.t. sum_j g_j <= K`` is the
max-plus knapsack of Saxena et al. (MASCOTS'20, see docs/algorithms.md §4.2-4.3).

Exact solvers, cheapest first (:func:`solve` picks):

* :func:`knapsack_dp` — the DP ``P_j[k] = max_g P_{j-1}[k-g] + u_j[g]``. The inner max over g is vectorised as
  a (K+1) x (G_j+1) sliding window over ``P_{j-1}``, so one job costs a few numpy calls, not K*G Python steps.
* :func:`concave_greedy` — when every curve is concave from g = 0 (diminishing marginal gains), taking the K largest
  positive marginal gains over all jobs is optimal (the classic result for separable concave resource allocation),
  and costs one sort. :func:`solve` picks it whenever it applies; tests check it agrees with the DP.
* :func:`hull_greedy` — for large non-concave instances (an all-reduce cost that appears at the second GPU, node
  boundaries, a hysteresis bump), the same greedy on each curve's concave envelope; when every job lands on a
  point where its curve touches its envelope the result is provably optimal;
* :func:`pruned_dp` — otherwise Lagrangian reduced-cost fixing leaves one or two GPU counts per job and a small
  DP finishes the job (exact); the plain DP is the last resort.

Ties are broken towards earlier jobs (the order given), so callers pass jobs in priority order (FIFO).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np
from numpy.lib.stride_tricks import as_strided

NEG_INF = -np.inf
SMALL_DP_CELLS = 1_000_000     # below this many DP cells the plain DP beats the envelope machinery


@dataclass(frozen=True)
class Solution:
    """GPUs per job (in the order given), the objective reached, and which solver found it."""

    gpus: np.ndarray
    value: float
    method: str


def is_concave(curve: np.ndarray, atol: float = 1e-12) -> bool:
    """True if the curve is finite from g = 0 and its marginal gains never increase."""
    c = np.asarray(curve, dtype=float)
    if len(c) == 0 or not np.all(np.isfinite(c)) or c[0] != 0.0:
        return False
    gains = np.diff(c)
    return bool(np.all(np.diff(gains) <= atol))


def concave_greedy(curves: Sequence[np.ndarray], capacity: int) -> Solution:
    """Exact for concave curves starting at u[0] = 0: the K best positive marginal gains, earlier jobs first on ties."""
    if not curves:
        return Solution(np.zeros(0, dtype=int), 0.0, "greedy")
    gains = [np.diff(np.asarray(c, dtype=float)) for c in curves]
    owner = np.concatenate([np.full(len(g), j) for j, g in enumerate(gains)]).astype(np.int64)
    flat = np.concatenate(gains) if gains else np.zeros(0)
    positive = flat > 0
    flat, owner = flat[positive], owner[positive]
    # Sort by gain (descending), then job index (ascending); within a job gains are non-increasing already.
    order = np.lexsort((owner, -flat))[:capacity]
    gpus = np.bincount(owner[order], minlength=len(curves))
    return Solution(gpus, float(flat[order].sum()), "greedy")


def knapsack_dp(curves: Sequence[np.ndarray], capacity: int) -> Solution:
    """Exact max-plus DP over jobs x GPUs with a vectorised inner max; ``-inf`` value means no feasible split.

    ``P`` lives at the end of one buffer with ``G_max`` -inf cells before it, and a strided (K+1) x (G_max+1) view
    of that buffer reads ``P[k - g]`` for every k and g without copying: one add, one argmax per job."""
    K = int(capacity)
    J = len(curves)
    if J == 0:
        return Solution(np.zeros(0, dtype=int), 0.0, "dp")
    width = min(max(len(c) for c in curves) - 1, K)
    buf = np.full(K + 1 + width, NEG_INF)
    P = buf[width:]                           # P[k]: best value of the jobs so far using at most k GPUs
    P[:] = 0.0
    step = buf.strides[0]
    # window[k, g] = P[k - g] (a view: row k starts at P[k] and walks back through the -inf prefix)
    window = as_strided(P, shape=(K + 1, width + 1), strides=(step, -step), writeable=False)
    rows = np.arange(K + 1)
    choices: list[np.ndarray] = []
    for curve in curves:
        u = np.asarray(curve, dtype=float)[: K + 1]
        # by_g[k, g] = P[k - g] + u[g]; argmax takes the first max, i.e. the fewest GPUs on ties.
        by_g = window[:, : len(u)] + u
        best_g = by_g.argmax(axis=1)
        P[:] = by_g[rows, best_g]
        choices.append(best_g)
    gpus = np.zeros(J, dtype=int)
    k = K
    value = float(P[K])
    if not np.isfinite(value):
        return Solution(gpus, value, "dp")
    for j in range(J - 1, -1, -1):
        g = int(choices[j][k])
        gpus[j] = g
        k -= g
    return Solution(gpus, value, "dp")


def _pack(curves: Sequence[np.ndarray]) -> np.ndarray:
    """Curves as rows of one (J, G_max + 1) array, -inf past each curve's end."""
    lengths = np.fromiter(map(len, curves), dtype=np.int64, count=len(curves))
    out = np.full((len(curves), int(lengths.max())), NEG_INF)
    out[np.arange(out.shape[1]) < lengths[:, None]] = np.concatenate(curves)    # row-major: curve after curve
    return out


def _upper_hull(values: np.ndarray) -> np.ndarray:
    """Mask of the vertices of each row's upper concave envelope over its finite points.

    A point strictly below the chord of its kept neighbours is never a vertex, so all such points are dropped at
    once; rounds repeat on the rows that changed until none does (curves are nearly concave: few rows, few rounds)."""
    keep = np.isfinite(values)
    width = values.shape[1]
    idx = np.arange(width)
    safe = np.where(keep, values, 0.0)
    active = np.arange(len(values))
    while len(active):
        whole = len(active) == len(keep)              # no copies while every row is still changing
        k, v = (keep, safe) if whole else (keep[active], safe[active])
        # prev / nxt: the nearest kept column strictly left / right of each column (-1 / width if none)
        prev = np.full(k.shape, -1)
        prev[:, 1:] = np.maximum.accumulate(np.where(k[:, :-1], idx[:-1], -1), axis=1)
        nxt = np.full(k.shape, width)
        nxt[:, :-1] = np.minimum.accumulate(np.where(k[:, :0:-1], idx[:0:-1], width), axis=1)[:, ::-1]
        inner = k & (prev >= 0) & (nxt < width)
        p, n = np.clip(prev, 0, None), np.clip(nxt, None, width - 1)
        vp = np.take_along_axis(v, p, axis=1)
        # below the chord from p to n: (v - v_p) * (n - p) < (v_n - v_p) * (i - p)
        below = inner & ((v - vp) * (n - p) < (np.take_along_axis(v, n, axis=1) - vp) * (idx - p) - 1e-12)
        changed = below.any(axis=1)
        keep[active[changed]] &= ~below[changed]
        active = active[changed]
    return keep


def _envelope_increments(values: np.ndarray, keep: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The positive unit increments of every job's concave envelope, flattened, with the job each belongs to.

    Increment g (going from g-1 to g GPUs) is the slope of the envelope segment that covers it: between the last
    hull vertex <= g-1 and the first >= g. Sorting them descending gives the envelope greedy's order."""
    width = values.shape[1]
    idx = np.arange(width)
    rows = np.arange(len(values))[:, None]
    left = np.maximum.accumulate(np.where(keep, idx, -1), axis=1)[:, :-1]          # last vertex <= g - 1
    right = np.minimum.accumulate(np.where(keep, idx, width)[:, ::-1], axis=1)[:, ::-1][:, 1:]   # first >= g
    valid = right < width
    r = np.where(valid, right, 0)
    safe = np.where(np.isfinite(values), values, 0.0)
    slope = np.where(valid, (safe[rows, r] - safe[rows, left]) / np.maximum(r - left, 1), NEG_INF)
    owner = np.broadcast_to(rows, slope.shape).ravel()
    flat = slope.ravel()
    positive = flat > 0
    return flat[positive], owner[positive]


@dataclass(frozen=True)
class _Envelope:
    """What the envelope greedy and the pruned DP share, computed once per solve: the packed curves, their hull
    vertices and the positive envelope increments sorted best first (ties: earlier job first)."""

    values: np.ndarray
    keep: np.ndarray
    flat: np.ndarray
    owner: np.ndarray
    order: np.ndarray


def _envelope(values: np.ndarray) -> _Envelope:
    keep = _upper_hull(values)
    flat, owner = _envelope_increments(values, keep)
    return _Envelope(values, keep, flat, owner, np.lexsort((owner, -flat)))


def hull_greedy(curves: Sequence[np.ndarray], capacity: int, env: _Envelope | None = None) -> Solution | None:
    """The greedy on each curve's concave envelope, returned only when it is provably optimal, else None.

    The envelope problem's optimum bounds the true one from above; when every job's greedy allocation is a point
    where its curve touches its envelope, that allocation reaches the bound, so it is exact. Needs u[0] = 0."""
    if not curves:
        return Solution(np.zeros(0, dtype=int), 0.0, "hull-greedy")
    if env is None:
        values = _pack(curves)
        if np.any(values[:, 0] != 0.0):
            return None
        env = _envelope(values)
    values, keep = env.values, env.keep
    gpus = np.bincount(env.owner[env.order[:capacity]], minlength=len(curves))
    rows = np.arange(len(curves))
    if not np.all(keep[rows, gpus]):
        return None
    return Solution(gpus, float(values[rows, gpus].sum()), "hull-greedy")


def _sparse_dp(options: Sequence[tuple[np.ndarray, np.ndarray]], capacity: int) -> tuple[float, np.ndarray]:
    """The DP when each job has only a few candidate GPU counts: one shifted max per candidate."""
    K = int(capacity)
    P = np.zeros(K + 1)
    choices = []
    for gs, vals in options:
        best = np.full(K + 1, NEG_INF)
        arg = np.zeros(K + 1, dtype=np.int32)
        for g, v in zip(gs.tolist(), vals.tolist()):
            if g > K:
                continue
            cand = P[: K + 1 - g] + v
            better = cand > best[g:]
            best[g:][better] = cand[better]
            arg[g:][better] = g
        P = best
        choices.append(arg)
    gpus = np.zeros(len(options), dtype=int)
    k = K
    if not np.isfinite(P[K]):
        return NEG_INF, gpus
    for j in range(len(options) - 1, -1, -1):
        gpus[j] = choices[j][k]
        k -= gpus[j]
    return float(P[K]), gpus


def pruned_dp(curves: Sequence[np.ndarray], capacity: int, env: _Envelope | None = None) -> Solution | None:
    """Exact DP after Lagrangian reduced-cost fixing; None if it does not apply (some u[0] != 0).

    With a GPU price lam >= 0, any allocation's value is at most D - sum_j r_j(g_j), where
    D = lam*K + sum_j max_g (u_j(g) - lam*g) and r_j(g) = max_g' (u_j(g') - lam*g') - (u_j(g) - lam*g) >= 0.
    A feasible allocation of value LB (the envelope greedy rounded down) then rules out every g with
    r_j(g) > D - LB, because no allocation using it can beat LB. Usually one or two counts per job survive;
    jobs left with one are fixed, and the DP runs over the rest with few candidates each."""
    if env is None:
        values = _pack(curves)
        if np.any(values[:, 0] != 0.0):
            return None
        env = _envelope(values)
    values, flat, owner, order = env.values, env.flat, env.owner, env.order
    J, width = values.shape
    taken = order[:capacity]
    idx = np.arange(width)
    lam = float(flat[order[capacity]]) if len(order) > capacity else 0.0      # price: best gain left out
    hull_g = np.bincount(owner[taken], minlength=J)
    # Feasible lower bound: each job rounded down to its last finite count <= its envelope allocation.
    finite = np.isfinite(values)
    last_ok = np.maximum.accumulate(np.where(finite, idx, 0), axis=1)
    low_g = last_ok[np.arange(J), hull_g]
    lower = float(values[np.arange(J), low_g].sum())
    adjusted = values - lam * idx
    best = adjusted.max(axis=1)
    upper = lam * capacity + float(best.sum())
    slack = upper - lower + 1e-9 * max(1.0, abs(upper))
    alive = finite & (best[:, None] - adjusted <= slack)
    gpus = np.zeros(J, dtype=int)
    counts = alive.sum(axis=1)
    single = counts == 1
    gpus[single] = np.argmax(alive[single], axis=1)
    left_cap = capacity - int(gpus.sum())
    multi = np.flatnonzero(counts > 1)
    if left_cap < 0:
        return None
    options = [(np.flatnonzero(alive[j]), values[j, alive[j]]) for j in multi]
    value, sub = _sparse_dp(options, left_cap)
    if not np.isfinite(value):
        return None
    gpus[multi] = sub
    return Solution(gpus, float(values[np.arange(J), gpus].sum()), "pruned-dp")


def _aggregate_concave(curves: Sequence[np.ndarray], capacity: int) -> np.ndarray:
    """F[k] = best value of the concave jobs with k GPUs (prefix sums of their sorted positive gains)."""
    gains = np.concatenate([np.diff(np.asarray(c, dtype=float)) for c in curves])
    gains = np.sort(gains[gains > 0])[::-1][:capacity]
    return np.concatenate(([0.0], np.cumsum(gains)))


def _concave_rows(curves: Sequence[np.ndarray], values: np.ndarray | None = None) -> list[int]:
    """Indices of the curves that :func:`is_concave` accepts, checked for all curves at once (``values``: the
    curves already packed by :func:`_pack`)."""
    if not curves:
        return []
    if values is None:
        values = _pack(curves)
    lengths = np.array([len(c) for c in curves])
    inside = np.arange(values.shape[1])[None, :] < lengths[:, None]
    ok = np.all(np.isfinite(values) | ~inside, axis=1) & (values[:, 0] == 0.0)
    gains = np.diff(np.where(inside & np.isfinite(values), values, 0.0), axis=1)
    bends = np.diff(gains, axis=1)
    bend_inside = np.arange(bends.shape[1])[None, :] < (lengths[:, None] - 2)
    ok &= np.all((bends <= 1e-12) | ~bend_inside, axis=1)
    return np.flatnonzero(ok).tolist()


def solve(curves: Sequence[np.ndarray], capacity: int) -> Solution:
    """Exact optimum, by the cheapest method that is exact here: on small instances the DP itself; else the
    greedy if every curve is concave, the certified envelope greedy, then the pruned DP, and last the DP with the
    concave curves merged by the greedy into one aggregate curve (exact: the greedy is optimal for them at every
    capacity). Curves with a single finite point (pinned jobs) are fixed first: their u[0] = -inf would otherwise
    rule out every envelope method for the whole instance."""
    if sum(len(c) for c in curves) * (capacity + 1) > SMALL_DP_CELLS:
        finite = np.isfinite(_pack(curves))
        count = finite.sum(axis=1)
        pinned = np.flatnonzero(count == 1)
        if len(pinned):
            gpus = np.zeros(len(curves), dtype=int)
            gpus[pinned] = finite[pinned].argmax(axis=1)
            left = capacity - int(gpus.sum())
            fixed = float(sum(curves[j][gpus[j]] for j in pinned))
            rest = np.flatnonzero(count != 1).tolist()
            if left < 0 or not count.all():
                return Solution(gpus, NEG_INF, "pinned")
            sub = _solve(rest and [curves[j] for j in rest], left)
            gpus[rest] = sub.gpus
            return Solution(gpus, fixed + sub.value, sub.method)
    return _solve(curves, capacity)


def _solve(curves: Sequence[np.ndarray], capacity: int) -> Solution:
    if sum(len(c) for c in curves) * (capacity + 1) <= SMALL_DP_CELLS:
        return knapsack_dp(curves, capacity)
    values = _pack(curves)
    concave = _concave_rows(curves, values)
    if len(concave) == len(curves):
        return concave_greedy(curves, capacity)
    if not np.any(values[:, 0] != 0.0):
        env = _envelope(values)            # shared by both envelope methods
        certified = hull_greedy(curves, capacity, env)
        if certified is not None:
            return certified
        pruned = pruned_dp(curves, capacity, env)
        if pruned is not None:
            return pruned
    concave_set = set(concave)
    others = [j for j in range(len(curves)) if j not in concave_set]
    if len(concave) <= 1:
        return knapsack_dp(curves, capacity)
    aggregate = _aggregate_concave([curves[j] for j in concave], capacity)
    sub = knapsack_dp([curves[j] for j in others] + [aggregate], capacity)
    gpus = np.zeros(len(curves), dtype=int)
    gpus[others] = sub.gpus[:-1]
    gpus[concave] = concave_greedy([curves[j] for j in concave], int(sub.gpus[-1])).gpus
    return Solution(gpus, sub.value, "dp+greedy")
