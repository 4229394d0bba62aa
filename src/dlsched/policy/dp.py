"""Separable GPU allocation: split K GPUs among jobs to maximise the sum of per-job value curves.

Each job j has a value curve ``u_j[g]`` for ``g = 0..G_j`` GPUs (``-inf`` where g is infeasible; ``u_j[0] = 0``
lets the job wait, ``-inf`` forces it to run). The problem ``max sum_j u_j[g_j] s.t. sum_j g_j <= K`` is the
max-plus knapsack of Saxena et al. (MASCOTS'20, see docs/algorithms.md §4.2-4.3).

Two exact solvers:

* :func:`knapsack_dp` — the DP ``P_j[k] = max_g P_{j-1}[k-g] + u_j[g]``. The inner max over g is vectorised as
  a (K+1) x (G_j+1) sliding window over ``P_{j-1}``, so one job costs a few numpy calls, not K*G Python steps.
* :func:`concave_greedy` — when every curve is concave from g = 0 (diminishing marginal gains), taking the K largest
  positive marginal gains over all jobs is optimal (the classic result for separable concave resource allocation),
  and costs one sort. :func:`solve` picks it whenever it applies; tests check it agrees with the DP.

Ties are broken towards earlier jobs (the order given), so callers pass jobs in priority order (FIFO).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

NEG_INF = -np.inf


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
    """Exact max-plus DP over jobs x GPUs with a vectorised inner max; ``-inf`` value means no feasible split."""
    K = int(capacity)
    J = len(curves)
    P = np.zeros(K + 1)                       # P[k]: best value of the jobs so far using at most k GPUs
    choices: list[np.ndarray] = []
    for curve in curves:
        u = np.asarray(curve, dtype=float)[: K + 1]
        G = len(u) - 1
        padded = np.concatenate((np.full(G, NEG_INF), P))
        # by_g[k, g] = P[k - g] + u[g]; argmax takes the first max, i.e. the fewest GPUs on ties.
        by_g = sliding_window_view(padded, G + 1)[:, ::-1] + u
        best_g = np.argmax(by_g, axis=1)
        P = by_g[np.arange(K + 1), best_g]
        choices.append(best_g.astype(np.int32))
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


def _aggregate_concave(curves: Sequence[np.ndarray], capacity: int) -> np.ndarray:
    """F[k] = best value of the concave jobs with k GPUs (prefix sums of their sorted positive gains)."""
    gains = np.concatenate([np.diff(np.asarray(c, dtype=float)) for c in curves])
    gains = np.sort(gains[gains > 0])[::-1][:capacity]
    return np.concatenate(([0.0], np.cumsum(gains)))


def solve(curves: Sequence[np.ndarray], capacity: int) -> Solution:
    """Exact optimum. Concave curves are merged by the greedy into one aggregate curve (exact, since the greedy
    is optimal for them at every capacity); the DP then runs over the non-concave curves plus that aggregate."""
    concave = [j for j, c in enumerate(curves) if is_concave(c)]
    if len(concave) == len(curves):
        return concave_greedy(curves, capacity)
    others = [j for j in range(len(curves)) if j not in set(concave)]
    if len(concave) <= 1:
        return knapsack_dp(curves, capacity)
    aggregate = _aggregate_concave([curves[j] for j in concave], capacity)
    sub = knapsack_dp([curves[j] for j in others] + [aggregate], capacity)
    gpus = np.zeros(len(curves), dtype=int)
    gpus[others] = sub.gpus[:-1]
    gpus[concave] = concave_greedy([curves[j] for j in concave], int(sub.gpus[-1])).gpus
    return Solution(gpus, sub.value, "dp+greedy")
