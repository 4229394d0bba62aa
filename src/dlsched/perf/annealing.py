"""Schedule-aware loss model after the LR-annealing scaling law (Tissue et al. 2024, "Scaling Law with
Learning Rate Annealing"): L = L0 + A·S1^(−α) − C·S2 with S1, S2 the schedule's areas (``schedule.areas``).

We use it in multiplicative form, L(x) = (L0 + A·S1^(−α))·(1 − c·S2), c in [0, 0.9]: the drop a decay brings
is a fraction of the loss it anneals (scale-free, so one prior serves losses and error rates of any size,
and a prediction never goes below 0). Fitted to *relative* residuals, because the metrics we judge by are
relative and early losses are many times the late ones.

Fit (why this one): for fixed (α, c) the model is linear in (L0, A) ≥ 0 — ``nnls`` on two columns; (α, c)
come from a grid (log α × c) and α is refined by bounded scalar minimisation. Deterministic, no initial
guess, a few ms for 1 000 points.

A prefix observed before any decay carries no information on c (S2 = 0 on every point), yet the decay is
where the largest drop comes from: the ``CurvePrior`` supplies c then, and a soft belief in α; observed
annealing outweighs both as soon as the prefix contains some.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy.optimize import minimize_scalar, nnls

from dlsched.perf.schedule import Schedule, areas

ALPHA_BOUNDS = (0.05, 4.0)


@dataclass(frozen=True)
class CurvePrior:
    """What finished jobs say about a new curve: exponent α, annealing drop c (the fraction of the loss a full
    decay removes), and how many points' worth of belief each carries (``perf.prior`` fits these)."""

    alpha: float = 0.6
    drop: float = 0.3
    weight: float = 3.0


@dataclass(frozen=True)
class AnnealingCurve:
    """L(x) = (L0 + A·S1^(−α))·(1 − c·S2) in the curve's own units, over ``schedule``."""

    l0: float
    a: float
    alpha: float
    c: float
    schedule: Schedule

    def value(self, x) -> np.ndarray:
        s1, s2 = areas(self.schedule, x)
        with np.errstate(divide="ignore"):
            return (self.l0 + self.a * np.maximum(s1, 1e-12) ** (-self.alpha)) * (1.0 - self.c * s2)

    def constant_lr_value(self, x) -> np.ndarray:
        """The same run without its annealing (S2 = 0): what the drop is a fraction of."""
        s1, _ = areas(self.schedule, x)
        return self.l0 + self.a * np.maximum(s1, 1e-12) ** (-self.alpha)


def recency_weights(x: np.ndarray) -> np.ndarray:
    """Later points count more (up to 4x the first, linear in x): they are nearer the part to extrapolate, and
    early points sit in a fast transient no power law describes well (the Optimus authors weight thirds
    1 : 4 : 16 in σ for the same reason; milder here because the schedule carries part of the shape)."""
    span = max(float(x[-1] - x[0]), 1e-12)
    return 1.0 + 3.0 * (x - x[0]) / span


class _Problem:
    """Relative residuals (pred − y)/y, row-weighted: for fixed (α, c) the model is linear in (L0, A) ≥ 0."""

    def __init__(self, s1n, s2, y, w, prior: CurvePrior | None):
        self.s1n, self.s2, self.y, self.sw = s1n, s2, y, np.sqrt(w / w.mean())
        self.prior = prior if prior is not None and prior.weight > 0 else None

    def solve(self, alpha: float, c: float) -> tuple[np.ndarray, float]:
        v = (1.0 - c * self.s2) / self.y
        X = np.column_stack([v, self.s1n ** (-alpha) * v]) * self.sw[:, None]
        coef, rnorm = nnls(X, self.sw)
        sse = rnorm * rnorm
        if self.prior is not None:
            # log-normal belief in α (σ = 0.5, a factor 1.65) and a normal one in c (σ = 0.2), each worth
            # ``weight`` points at the fit's own residual level
            unit = max(sse / len(self.y), 1e-6)
            p = self.prior
            sse += p.weight * unit * ((math.log(alpha / p.alpha) / 0.5) ** 2 + ((c - p.drop) / 0.2) ** 2)
        return coef, float(sse)


DROPS = np.linspace(0.0, 0.9, 19)


def fit_annealing(x, y, schedule: Schedule, prior: CurvePrior | None = None, grid: int = 20) -> AnnealingCurve:
    """Fit the law to observed (x, y) (y lower-is-better, > 0). Points at x = 0 (S1 = 0) are dropped."""
    x, y = np.asarray(x, float), np.asarray(y, float)
    s1, s2 = areas(schedule, x)
    ok = s1 > 0
    x, s1, s2, y = x[ok], s1[ok], s2[ok], y[ok]
    if len(y) < 3:
        raise ValueError(f"need at least 3 points after x = 0 to fit, got {len(y)}")
    # Normalise S1 so the design columns are O(1): A absorbs the scale, α keeps its meaning.
    s1_ref = float(s1[-1])
    prob = _Problem(s1 / s1_ref, s2, y, recency_weights(x), prior)
    alphas = np.geomspace(*ALPHA_BOUNDS, grid)
    # c is only identified once the prefix has annealed; before that the prior alone sets it
    drops = DROPS if s2.max() > 1e-3 else np.array([prior.drop if prior is not None else 0.0])
    sse = np.array([[prob.solve(a, c)[1] for c in drops] for a in alphas])
    i, j = np.unravel_index(int(np.argmin(sse)), sse.shape)
    c = float(drops[j])
    lo, hi = alphas[max(i - 1, 0)], alphas[min(i + 1, grid - 1)]
    res = minimize_scalar(lambda a: prob.solve(a, c)[1], bounds=(lo, hi), method="bounded", options={"xatol": 1e-3})
    alpha = float(res.x) if res.fun < sse[i, j] else float(alphas[i])
    l0, a = prob.solve(alpha, c)[0]
    return AnnealingCurve(float(l0), float(a) * s1_ref ** alpha, alpha, c, schedule)
