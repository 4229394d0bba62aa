"""Optimus convergence model: normalised loss l(k) = 1/(β0·k + β1) + β2 with β ≥ 0 (Peng et al., EuroSys'18 §4.1).

Fit (why this one): *variable projection* — for a fixed asymptote β2 the model is linear after the transform
y = 1/(l − β2) = β0·k + β1, so β0, β1 ≥ 0 come from ``scipy.optimize.nnls`` (the solver the paper names),
with each row weighted by (l − β2)² so that a residual in y-space approximates one in loss space
(dl = −dy / y²). β2 is then chosen on a grid over [0, min l) and refined by bounded scalar minimisation
of the loss-space RMSE. Every step is deterministic, needs no initial guess (unlike ``curve_fit``, whose
answer depends on p0 — the seed notebook got nonsense without one), and costs a few 2-column NNLS
solves, so refitting after every epoch is cheap (~1 ms for 1 000 points).

Preprocessing (paper): a point is an outlier if it is not within [min of the next 5, max of the previous 5]
losses; it is replaced by the mean of its neighbours for the fit only. Losses are divided by the largest
loss seen so far for the job, so they lie in (0, 1].

Remaining work: to a target loss, or to the Optimus rule "per-epoch decrease below δ" whose first crossing
has the closed form in ``shared/docs/algorithms.md`` §1.2.
"""
from __future__ import annotations

from dataclasses import dataclass

import math

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view
from scipy.optimize import minimize_scalar, nnls

OUTLIER_WINDOW = 5
MIN_POINTS = 3


@dataclass(frozen=True)
class LossCurve:
    """l(k) = 1/(β0·k + β1) + β2 in the job's normalised loss units (``scale`` = raw loss that maps to 1)."""

    beta0: float
    beta1: float
    beta2: float
    scale: float = 1.0

    def loss(self, k):
        """Normalised loss after ``k`` steps (vectorised)."""
        x = self.beta0 * np.asarray(k, dtype=float) + self.beta1
        with np.errstate(divide="ignore"):
            return 1.0 / x + self.beta2

    def raw_loss(self, k):
        return self.loss(k) * self.scale

    def steps_to_loss(self, target: float) -> float:
        """Step at which the curve reaches normalised loss ``target``; inf if it never does, 0 if already there."""
        if target <= self.beta2:
            return float("inf")
        x = 1.0 / (target - self.beta2)
        if x <= self.beta1:
            return 0.0
        return float("inf") if self.beta0 <= 0 else (x - self.beta1) / self.beta0

    def converged_step(self, delta: float, steps_per_epoch: float) -> float:
        """First step after which one more epoch lowers the loss by less than ``delta`` (Optimus rule).

        With x = β0·k + β1 and E steps per epoch the decrease is β0E/(x(x+β0E)); it is monotone, so the
        first crossing of δ is x* = (−β0E + sqrt((β0E)² + 4β0E/δ))/2 (``algorithms.md`` §1.2).
        """
        if delta <= 0 or steps_per_epoch <= 0:
            raise ValueError("delta and steps_per_epoch must be > 0")
        a = self.beta0 * steps_per_epoch
        if a <= 0:
            return 0.0
        x_star = (-a + np.sqrt(a * a + 4.0 * a / delta)) / 2.0
        return max(0.0, float((x_star - self.beta1) / self.beta0))

    def delta_stopping_at(self, k_stop: float, steps_per_epoch: float) -> float:
        """The threshold δ for which the Optimus rule stops at ``k_stop``: the decrease of the epoch that would
        start there, l(k_stop) − l(k_stop + E).

        Why not the decrease of the epoch that *ended* at ``k_stop``: ``converged_step`` returns the first step
        after which one more epoch gains less than δ, so that δ would stop the job one epoch early
        (``converged_step(delta_stopping_at(k, E), E) == k``).
        """
        if steps_per_epoch <= 0:
            raise ValueError("steps_per_epoch must be > 0")
        return float(self.loss(k_stop) - self.loss(k_stop + steps_per_epoch))

    def remaining_steps(self, k_now: float, *, target_loss: float | None = None, delta: float | None = None,
                        steps_per_epoch: float | None = None) -> float:
        """Steps left from ``k_now``: to ``target_loss`` (normalised) or to the δ-per-epoch rule."""
        if (target_loss is None) == (delta is None):
            raise ValueError("give exactly one of target_loss or delta")
        end = self.steps_to_loss(target_loss) if target_loss is not None else self.converged_step(delta, steps_per_epoch)
        return max(0.0, end - k_now)


@dataclass(frozen=True)
class ConvergenceFit:
    """A fitted curve with its loss-space RMSE and the (cleaned, normalised) points it was fitted to."""

    curve: LossCurve
    rmse: float
    steps: np.ndarray
    losses: np.ndarray

    @property
    def residuals(self) -> np.ndarray:
        return self.losses - self.curve.loss(self.steps)


def remove_outliers(loss, window: int = OUTLIER_WINDOW) -> np.ndarray:
    """Optimus outlier rule: replace l_i outside [min(next window), max(previous window)] by its neighbours' mean."""
    loss = np.asarray(loss, dtype=float)
    n = len(loss)
    if n < 3:
        return loss.copy()
    # Pad with +inf / -inf so the windows at the ends are simply shorter, then take windowed min / max.
    padded = np.concatenate([loss, np.full(window, np.inf)])
    next_min = sliding_window_view(padded[1:], window).min(axis=1)[:n]
    padded = np.concatenate([np.full(window, -np.inf), loss])
    prev_max = sliding_window_view(padded[:-1], window).max(axis=1)[:n]
    inner = np.zeros(n, dtype=bool)
    inner[1:-1] = True
    bad = inner & ~((next_min <= loss) & (loss <= prev_max))
    out = loss.copy()
    idx = np.flatnonzero(bad)
    out[idx] = 0.5 * (loss[idx - 1] + loss[idx + 1])
    return out


def normalise(loss) -> tuple[np.ndarray, float]:
    """Divide by the largest loss seen so far (the job's own maximum); returns (normalised, scale)."""
    loss = np.asarray(loss, dtype=float)
    scale = float(loss.max())
    if not scale > 0:
        raise ValueError("losses must contain a positive value")
    return loss / scale, scale


def _fit_given_beta2(k: np.ndarray, l: np.ndarray, beta2: float, sw: np.ndarray | None = None) -> tuple[float, float, float]:
    """NNLS for (β0, β1) at fixed β2 with rows weighted to approximate loss-space residuals; returns (β0, β1, sse)."""
    d = l - beta2
    y = 1.0 / d
    w = d * d  # |dl/dy| = 1/y² = d²
    if sw is not None:
        w = w * sw
    # NNLS on the 2x2 triangular factor of the weighted normal equations: the same minimiser as on the
    # full n x 2 system (||Ax − b||² = ||Rx − c||² + const), at a cost independent of n.
    kw, yw = k * w, y * w
    ata = np.array([[kw @ kw, kw @ w], [kw @ w, w @ w]])
    atb = np.array([kw @ yw, w @ yw])
    try:
        R = np.linalg.cholesky(ata).T
        (b0, b1), _ = nnls(R, np.linalg.solve(R.T, atb))
    except np.linalg.LinAlgError:  # all steps equal: only the intercept is identifiable
        b0, b1 = 0.0, max(float(atb[1] / ata[1, 1]), 0.0)
    pred = 1.0 / np.maximum(b0 * k + b1, 1e-300) + beta2
    r = pred - l
    return b0, b1, float(r @ r) if sw is None else float((r * sw) @ r)


def recent_weights(n: int) -> np.ndarray:
    """Optimus authors' weighting (``estimator.py``): thirds of the history with σ = 1, 1/4, 1/16, i.e. the
    squared residuals of later thirds count 16x and 256x — the recent trend matters most for extrapolation."""
    seg = np.arange(n) // max(1, math.ceil(n / 3))
    return 16.0 ** seg


def fit_curve(steps, losses, *, preprocess: bool = True, grid: int = 24, weights=None) -> ConvergenceFit:
    """Fit l(k) to observed (step, raw loss) pairs; see the module docstring for the method.

    ``steps`` must be non-negative and increasing; needs at least 3 points. ``weights`` (optional, ≥ 0,
    one per point) weight the squared loss residuals, e.g. ``recent_weights(n)``; the reported RMSE is
    always unweighted.
    """
    k = np.asarray(steps, dtype=float)
    raw = np.asarray(losses, dtype=float)
    if k.shape != raw.shape or k.ndim != 1:
        raise ValueError("steps and losses must be 1-D arrays of the same length")
    if len(k) < MIN_POINTS:
        raise ValueError(f"need at least {MIN_POINTS} points to fit, got {len(k)}")
    if not (np.all(np.isfinite(k)) and np.all(np.isfinite(raw))) or np.any(k < 0) or np.any(raw <= 0):
        raise ValueError("steps must be finite and >= 0, losses finite and > 0")
    cleaned = remove_outliers(raw) if preprocess else raw
    l, scale = normalise(cleaned)
    top = float(l.min()) * (1.0 - 1e-9)
    # Coarse grid (denser near min l, where the asymptote usually sits), then bounded refinement.
    cands = top * (1.0 - np.geomspace(1.0, 1e-4, grid))
    cands[0] = 0.0
    sw = None if weights is None else np.asarray(weights, dtype=float) / np.mean(weights)
    sses = [_fit_given_beta2(k, l, b2, sw)[2] for b2 in cands]
    i = int(np.argmin(sses))
    lo, hi = cands[max(i - 1, 0)], cands[min(i + 1, grid - 1)]
    best_b2, best_sse = float(cands[i]), sses[i]
    if hi > lo:
        res = minimize_scalar(lambda b2: _fit_given_beta2(k, l, b2, sw)[2], bounds=(lo, hi), method="bounded",
                              options={"xatol": 1e-6 * max(top, 1e-12)})
        if res.fun < best_sse:
            best_b2, best_sse = float(res.x), float(res.fun)
    b0, b1, _ = _fit_given_beta2(k, l, best_b2, sw)
    curve = LossCurve(float(b0), float(b1), best_b2, scale)
    rmse = float(np.sqrt(np.mean((curve.loss(k) - l) ** 2)))
    return ConvergenceFit(curve, rmse, k, l)


class OnlineConvergence:
    """Collect (step, loss) points as training reports them and refit on demand.

    Why a class: the driver owns the growing history; each ``refit`` is the full deterministic fit, which is
    already cheap (~1 ms per 1 000 points), and is skipped when no point arrived since the last one.
    Points with a step not after the last one are rejected (steps only move forward).
    """

    def __init__(self) -> None:
        self._steps: list[float] = []
        self._losses: list[float] = []
        self._fit: ConvergenceFit | None = None

    def __len__(self) -> int:
        return len(self._steps)

    def add(self, step: float, loss: float) -> None:
        if self._steps and step <= self._steps[-1]:
            raise ValueError(f"step {step} is not after the last step {self._steps[-1]}")
        if not (np.isfinite(loss) and loss > 0):
            raise ValueError(f"loss must be finite and > 0, got {loss}")
        self._steps.append(float(step))
        self._losses.append(float(loss))
        self._fit = None

    def refit(self) -> ConvergenceFit | None:
        """The fit on every point so far; None while fewer than 3 points have arrived."""
        if self._fit is None and len(self._steps) >= MIN_POINTS:
            self._fit = fit_curve(self._steps, self._losses)
        return self._fit
