"""Schedule-aware loss model after the LR-annealing scaling law (Tissue et al. 2024, "Scaling Law with
Learning Rate Annealing"): L = L0 + A·S1^(−α) − C·S2 with S1, S2 the schedule's areas (``schedule.areas``).

We use it in multiplicative form, L(x) = (L0 + A·(S1 + s0)^(−α))·(1 − c·S2), c in [0, 0.9]: the drop a decay brings
is a fraction of the loss it anneals (scale-free, so one prior serves losses and error rates of any size,
and a prediction never goes below 0). Fitted to *relative* residuals, because the metrics we judge by are
relative and early losses are many times the late ones; the refits divide by √(fit·point), not the noisy point.

Fit (why this one): for fixed (α, c, s0) the model is linear in (L0, A) ≥ 0 — a two-column non-negative
least squares, solved in closed form for every c of the grid at once; (α, c, s0) come from a grid and α is
refined by bounded scalar minimisation. Deterministic, no initial
guess, a few ms for 1 000 points. Huber-reweighted refits follow (``HUBER_ROUNDS``), at least one.

A prefix observed before any decay carries no information on c (S2 = 0 on every point), yet the decay is
where the largest drop comes from: the ``CurvePrior`` supplies c then, and a soft belief in α; observed
annealing outweighs both as soon as the prefix contains some.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy.optimize import minimize_scalar

from dlsched.perf.schedule import Schedule, areas

ALPHA_BOUNDS = (0.05, 4.0)


@dataclass(frozen=True)
class CurvePrior:
    """What finished jobs say about a new curve: exponent α, annealing drop c (the fraction of the loss a full
    decay removes), and how many points' worth of belief each carries (``perf.prior`` fits these)."""

    alpha: float = 0.6
    drop: float = 0.3
    weight: float = 3.0
    final: float | None = None          # where runs of the same task ended (lower-is-better); None: unknown
    final_sigma: float = math.inf       # its log spread
    # every one of those finals carried to this run's schedule (``perf.prior``), not their plain mean: such a
    # level is off by another amount, so its predictions take other bands (``Calibration.carried``)
    final_carried: bool = False
    # those runs' curves carried to this run's schedule (``perf.prior.carried_curve``): a prediction before its first
    # point (``perf.curve_predict``)
    level_curves: tuple["AnnealingCurve", ...] = ()
    level_weights: tuple[float, ...] = ()   # each one's weight in ``final`` (``perf.prior.carry_weights``); (): equal
    alpha_sigma: float = 0.5            # log spread of α among the finished runs it came from (a factor 1.65)
    drop_sigma: float = 0.2             # spread of c among them


@dataclass(frozen=True)
class AnnealingCurve:
    """L(x) = (L0 + A·(S1 + s0)^(−α))·(1 − c·S2) in the curve's own units, over ``schedule``."""

    l0: float
    a: float
    alpha: float
    c: float
    schedule: Schedule
    s0: float = 0.0

    def value(self, x) -> np.ndarray:
        s1, s2 = areas(self.schedule, x)
        return self.constant_lr_value_at(s1) * (1.0 - self.c * s2)

    def constant_lr_value_at(self, s1) -> np.ndarray:
        with np.errstate(divide="ignore"):
            return self.l0 + self.a * np.maximum(s1 + self.s0, 1e-12) ** (-self.alpha)


def recency_weights(x: np.ndarray) -> np.ndarray:
    """Later points count more (up to 4x the first, linear in x): they are nearer the part to extrapolate, and
    early points sit in a fast transient no power law describes well (the Optimus authors weight thirds
    1 : 4 : 16 in σ for the same reason; milder here because the schedule carries part of the shape)."""
    span = max(float(x[-1] - x[0]), 1e-12)
    return 1.0 + 3.0 * (x - x[0]) / span


def _nnls2(g11, g12, g22, b1, b2, tt):
    """min ||X·w − t||² over w ≥ 0 for many 2-column problems at once, from their Gram entries (X'X, X't, t't):
    the unconstrained solution where both weights are ≥ 0, else the better one-column solution (the convex
    objective's optimum then lies on that boundary). Returns (w1, w2, sse) arrays."""
    det = g11 * g22 - g12 * g12
    with np.errstate(divide="ignore", invalid="ignore"):
        w1 = (g22 * b1 - g12 * b2) / det
        w2 = (g11 * b2 - g12 * b1) / det
        o1 = np.maximum(b1, 0.0) / g11
        o2 = np.maximum(b2, 0.0) / g22
    full = (det > 1e-12 * g11 * g22) & (w1 >= 0) & (w2 >= 0)
    sse_full, sse1, sse2 = tt - (w1 * b1 + w2 * b2), tt - o1 * b1, tt - o2 * b2
    one = sse1 <= sse2
    w1 = np.where(full, w1, np.where(one, o1, 0.0))
    w2 = np.where(full, w2, np.where(one, 0.0, o2))
    sse = np.where(full, sse_full, np.minimum(sse1, sse2))
    return w1, w2, np.maximum(sse, 0.0)


DOT_CHUNK = 8192   # OpenBLAS runs a dot product over more than 10 000 elements on threads


def _dot(u, v) -> float:
    """u·v in single-threaded pieces: on a busy machine OpenBLAS's dot threads spin (a 20 000-point curve took
    3–30 s, not 0.3 s); curves up to DOT_CHUNK points get the same one BLAS call, bit for bit, as before."""
    if len(u) <= DOT_CHUNK:
        return u @ v
    return sum(u[i:i + DOT_CHUNK] @ v[i:i + DOT_CHUNK] for i in range(0, len(u), DOT_CHUNK))


class _Problem:
    """Relative residuals (pred − y)/d, row-weighted, d the ``divisor`` (the points, or in a refit
    √(first fit·point)): for fixed (α, c, s0) the model is linear in (L0, A) ≥ 0.

    Rows: u1 = sw·(1 − c·S2)/d, u2 = g·u1 with g = (S1 + s0)^(−α), target sw·y/d. Every Gram entry is a quadratic
    in c whose coefficients are sums over the rows: those without g once per problem, those with g for a whole
    (α, s0) grid in one pass (``solve``)."""

    def __init__(self, s1n, s2, y, w, prior: CurvePrior | None, drop_belief: float = 1.0, divisor=None):
        self.s1n, self.n, self.drop_belief = s1n, len(y), drop_belief
        sw = np.sqrt(w / w.mean())
        d = y if divisor is None else divisor
        a, b, t = sw / d, sw * s2 / d, sw * y / d
        self.fixed = tuple(_dot(u, v) for u, v in ((a, a), (a, b), (b, b), (t, a), (t, b), (t, t)))
        self.rows = np.stack([a * a, a * b, b * b, t * a, t * b])   # the g- and g²-weighted sums' row factors
        self.prior = prior if prior is not None and prior.weight > 0 else None

    def solve(self, alphas, drops, offsets) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(L0, A, penalised SSE), each of shape (α, s0, c), for every combination of the three grids."""
        alphas, offsets = np.atleast_1d(np.asarray(alphas, float)), np.atleast_1d(np.asarray(offsets, float))
        one, two = _gsums(self.s1n[None, :] + offsets[:, None], alphas, self.rows)
        aa, ab, bb, ta, tb, tt = self.fixed
        c = np.asarray(drops, float)
        quad = lambda p, q, r: p[..., None] - 2 * c * q[..., None] + c * c * r[..., None]  # noqa: E731
        g11 = aa - 2 * c * ab + c * c * bb
        g12 = quad(one[..., 0], one[..., 1], one[..., 2])
        g22 = quad(two[..., 0], two[..., 1], two[..., 2])
        b1 = ta - c * tb
        b2 = one[..., 3, None] - c * one[..., 4, None]
        w1, w2, sse = _nnls2(g11, g12, g22, b1, b2, float(tt))
        if self.prior is not None:
            # log-normal belief in α and a normal one in c, with the finished runs' spreads, each worth
            # ``weight`` points at the fit's own residual level; c's belief times ``drop_belief`` (fit_annealing)
            unit = np.maximum(sse / self.n, 1e-6)
            p = self.prior
            sse = sse + p.weight * unit * ((np.log(alphas / p.alpha)[:, None, None] / p.alpha_sigma) ** 2
                                           + self.drop_belief * ((c - p.drop) / p.drop_sigma) ** 2)
        return w1, w2, sse


def _gsums(base: np.ndarray, alphas: np.ndarray, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """With g = base^(−α) (base: (s0, rows)): Σ g·r for r in ``rows`` (aa, ab, bb, ta, tb) and Σ g²·r for the first
    three, each of shape (α, s0, k). By einsum, not BLAS (whose threads spin on a busy machine), DOT_CHUNK rows
    at a time (a long curve's g for the whole grid would not fit in cache, nor, at 10⁵ points, in 100 MB)."""
    one = two = 0.0
    for i in range(0, base.shape[-1], DOT_CHUNK):
        g = base[None, :, i:i + DOT_CHUNK] ** (-alphas[:, None, None])
        r = rows[:, i:i + DOT_CHUNK]
        one = one + np.einsum("asn,kn->ask", g, r)
        two = two + np.einsum("asn,kn->ask", g * g, r[:3])
    return one, two


# c grid: steps of 0.01 up to 0.1, where the drops of losses with a large irreducible part lie (an LM's decay
# takes a few % off), 0.05 above; the whole (α, s0, c) grid is one pass over the rows (``_Problem.solve``)
DROPS = np.unique(np.round(np.concatenate([np.linspace(0.0, 0.1, 11), np.linspace(0.1, 0.9, 17)]), 6))
OFFSETS = (0.0, 1.0, 3.0, 10.0)   # s0 in units of S1 at the first point: 0 is the pure law, 1 ~ Optimus' β1/β0


def fit_annealing(x, y, schedule: Schedule, prior: CurvePrior | None = None, grid: int = 12) -> AnnealingCurve:
    """Fit the law to observed (x, y) (y lower-is-better, > 0). Points at x = 0 (S1 = 0) are dropped.

    s0 shifts the LR area like Optimus' β1 shifts k: a run's first logged point is not its start, and the
    pure power law would put an infinite loss there."""
    x, y = np.asarray(x, float), np.asarray(y, float)
    s1, s2 = areas(schedule, x)
    ok = s1 > 0
    x, s1, s2, y = x[ok], s1[ok], s2[ok], y[ok]
    if len(y) < 2:
        raise ValueError(f"need at least 2 points after x = 0 to fit, got {len(y)}")
    # Normalise S1 so the design columns are O(1): A absorbs the scale, α keeps its meaning.
    s1_ref = float(s1[-1])
    # The prefix's information on c grows with the square of the annealing it has seen (∂L/∂c = −S2·L), so
    # the prior's hold on c is scaled by (decay to come / decay seen)²: a prefix that saw a tenth of the decay
    # would otherwise spend c on curvature the power law misses, and predict a drop ten times too large.
    _, s2_end = areas(schedule, [schedule.budget])
    seen = max(float(s2.max()), 0.05 * max(float(s2_end[0]), 1e-3))
    belief = max(1.0, float(s2_end[0]) / seen) ** 2
    # c is only identified once the prefix has annealed; before that the prior alone sets it
    drops = DROPS if s2.max() > 1e-3 else np.array([prior.drop if prior is not None else 0.0])
    offsets = np.array(OFFSETS) * s1[0] / s1_ref
    w = recency_weights(x)
    curve = _search(_Problem(s1 / s1_ref, s2, y, w, prior, belief), drops, offsets, grid, s1_ref, schedule)
    # the refits divide a residual by the geometric mean of the point and the first fit, not by the point: divided
    # by the point, a point's weight grows as noise pulls it down and the fit sinks below a noisy curve (minibatch
    # losses); (f − y)/√(f·y) ≈ log(f/y) weighs a point ×1.8 and one ÷1.8 alike, so a spike does not pull harder
    # than a dip. The first fit's level does not matter (a common factor), only its shape
    divisor = np.sqrt(np.maximum(curve.value(x), 1e-12) * y)
    for i in range(HUBER_ROUNDS):
        # Huber reweighting: a spike (an evaluation glitch, a restart) would otherwise bend the whole extrapolation
        r = (curve.value(x) - y) / divisor
        # robust scale, never below 0.1 %: a deviation that small is no outlier, and an exact curve has none
        scale = max(1.4826 * float(np.median(np.abs(r - np.median(r)))), 1e-3)
        h = np.minimum(1.0, HUBER_K * scale / np.maximum(np.abs(r), 1e-12))
        if i > 0 and h.min() == 1.0:
            break
        curve = _search(_Problem(s1 / s1_ref, s2, y, w * h, prior, belief, divisor), drops, offsets, grid, s1_ref,
                        schedule)
    return curve


HUBER_K = 1.345       # the usual 95 %-efficiency constant, in robust (1.4826·MAD) units of the residuals
HUBER_ROUNDS = 4      # reweighted refits, each one grid search: with c continuous (``_search``) two left a glitch 4 % in the end value


def _search(prob: _Problem, drops, offsets, grid: int, s1_ref: float, schedule: Schedule) -> AnnealingCurve:
    """Grid over (α, s0, c), then α refined by bounded scalar minimisation at the best (s0, c)."""
    alphas = np.geomspace(*ALPHA_BOUNDS, grid)
    sse = prob.solve(alphas, drops, offsets)[2]   # (α, s0, c)
    i, m, j = np.unravel_index(int(np.argmin(sse)), sse.shape)
    c, o = drops[j:j + 1], float(offsets[m])
    lo, hi = alphas[max(i - 1, 0)], alphas[min(i + 1, grid - 1)]
    res = minimize_scalar(lambda a: float(prob.solve(a, c, o)[2].flat[0]), bounds=(lo, hi), method="bounded",
                          options={"xatol": 1e-3})
    alpha = float(res.x) if res.fun < sse[i, m, j] else float(alphas[i])
    if len(drops) > 1:
        # c between its grid neighbours: the grid's 0.05 steps above 0.1 are a tenth of a Pollux app's drop
        best = float(prob.solve(alpha, c, o)[2].flat[0])
        lo_c, hi_c = drops[max(j - 1, 0)], drops[min(j + 1, len(drops) - 1)]
        res = minimize_scalar(lambda d: float(prob.solve(alpha, np.array([d]), o)[2].flat[0]), bounds=(lo_c, hi_c),
                              method="bounded", options={"xatol": 1e-3})
        if res.fun < best:
            c = np.array([float(res.x)])
    l0, a, _ = prob.solve(alpha, c, o)
    return AnnealingCurve(float(l0.flat[0]), float(a.flat[0]) * s1_ref ** alpha, alpha, float(c[0]), schedule, o * s1_ref)
