"""Time-to-accuracy prediction and best configuration under a GPU budget.

time = remaining steps (convergence model) / speed (speed model). The prediction interval is a **residual
bootstrap** of the convergence fit: resample the fit's loss-space residuals with replacement, add them to
the fitted curve, refit, and recompute the remaining steps (seeded, so deterministic); the interval is the
central ``level`` quantile range. The speed model's own relative error (median absolute relative residual on
its samples, or a value the caller supplies) widens it multiplicatively: [lo/(1+e), hi/(1−e)].
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from dlsched.perf.convergence import ConvergenceFit, LossCurve, fit_curve
from dlsched.perf.speed import AllReduceSpeedModel, OptimusAsyncSpeed, OptimusSyncSpeed


@dataclass(frozen=True)
class Estimate:
    """A point estimate with a prediction interval [low, high]."""

    value: float
    low: float
    high: float

    def scaled(self, factor: float, rel_error: float = 0.0) -> "Estimate":
        """Multiply by ``factor`` (e.g. 1/speed), widening by a relative error of the factor."""
        e = min(max(rel_error, 0.0), 0.99)
        return Estimate(self.value * factor, self.low * factor / (1 + e), self.high * factor / (1 - e))


def _remaining(curve: LossCurve, k_now: float, target_loss: float | None, delta: float | None,
               steps_per_epoch: float | None) -> float:
    return curve.remaining_steps(k_now, target_loss=target_loss, delta=delta, steps_per_epoch=steps_per_epoch)


def remaining_steps(fit: ConvergenceFit, k_now: float, *, target_loss: float | None = None, delta: float | None = None,
                    steps_per_epoch: float | None = None, n_boot: int = 100, level: float = 0.8,
                    seed: int = 0) -> Estimate:
    """Remaining steps from ``k_now`` with a residual-bootstrap interval.

    ``target_loss`` is in the fit's *normalised* units (raw / ``fit.curve.scale``); ``delta`` is the Optimus
    per-epoch decrease threshold (also normalised). Unreachable targets give ``inf``.
    """
    point = _remaining(fit.curve, k_now, target_loss, delta, steps_per_epoch)
    rng = np.random.default_rng(seed)
    fitted = fit.curve.loss(fit.steps)
    res = fit.residuals
    draws = []
    for _ in range(n_boot):
        y = fitted + rng.choice(res, size=len(res), replace=True)
        if np.any(y <= 0):
            y = np.maximum(y, 1e-9)
        c = fit_curve(fit.steps, y, preprocess=False).curve
        # Refits are on the normalised scale again; map back to the original normalisation.
        c = LossCurve(c.beta0 / c.scale, c.beta1 / c.scale, c.beta2 * c.scale, 1.0)
        draws.append(_remaining(c, k_now, target_loss, delta, steps_per_epoch))
    q = (1 - level) / 2
    # Order-statistic quantiles: no interpolation, so unreachable (inf) draws stay inf instead of nan.
    lo, hi = np.quantile(np.asarray(draws), [q, 1 - q], method="inverted_cdf") if draws else (point, point)
    return Estimate(point, float(min(lo, point)), float(max(hi, point)))


def relative_error(predicted, measured) -> float:
    """Median absolute relative error: the speed model's typical miss, used to widen intervals."""
    p, m = np.asarray(predicted, float), np.asarray(measured, float)
    return float(np.median(np.abs(p / m - 1.0))) if len(m) else 0.0


def leave_one_out_error(n: int, fit_predict) -> float:
    """Median |relative error| predicting each sample from a model fitted on the others.

    ``fit_predict(train_mask, test_index) -> (predicted, measured)``. In-sample error is ~0 when a model has
    as many parameters as samples, so the interval is widened by this honest out-of-sample error instead.
    """
    errs = []
    for i in range(n):
        mask = np.ones(n, dtype=bool)
        mask[i] = False
        pred, meas = fit_predict(mask, i)
        errs.append(abs(pred / meas - 1.0))
    return float(np.median(errs)) if errs else 0.0


@dataclass(frozen=True)
class ConfigPrediction:
    """Predicted remaining time of one configuration. PS jobs fill ``ps``/``workers``; all-reduce jobs
    ``num_gpus``/``num_nodes``/``global_batch``. ``speed`` is steps/s (PS) or goodput samples/s (all-reduce)."""

    seconds: Estimate
    speed: float
    workers: int = 0
    ps: int = 0
    num_gpus: int = 0
    num_nodes: int = 0
    global_batch: int = 0


def ps_configurations(model: OptimusSyncSpeed | OptimusAsyncSpeed, steps: Estimate, budget: int,
                      speed_error: float = 0.0, max_ps: int | None = None) -> list[ConfigPrediction]:
    """Every (p, w) with p + w ≤ ``budget`` (servers count as resources, Optimus Eqs. 5–8) and p ≤ ``max_ps``,
    fastest first (ties: fewer resources)."""
    out = []
    for p in range(1, min(budget - 1, max_ps or budget) + 1):
        for w in range(1, budget - p + 1):
            f = float(model.speed(p, w))
            if f > 0:
                out.append(ConfigPrediction(steps.scaled(1.0 / f, speed_error), f, workers=w, ps=p))
    return sorted(out, key=lambda c: (c.seconds.value, c.workers + c.ps))


def best_workers(model: OptimusSyncSpeed | OptimusAsyncSpeed, ps: int, max_workers: int) -> int:
    """argmin over w of time = steps / f(p, w) at fixed p (the number of steps does not change the argmin)."""
    w = np.arange(1, max_workers + 1)
    return int(w[np.argmax(model.speed(ps, w))])


def allreduce_configurations(model: AllReduceSpeedModel, remaining_base_samples: Estimate, gpu_budget: int,
                             gpus_per_node: int, batch_sizes, gpu_type: str | None = None,
                             speed_error: float = 0.0) -> list[ConfigPrediction]:
    """Every GPU count ≤ budget (packed on ⌈g/gpus_per_node⌉ nodes) × candidate global batch, fastest first.

    Work is counted in samples at the model's base batch, so goodput (throughput × efficiency) converts it
    to seconds and larger batches pay for their lower statistical efficiency.
    """
    out = []
    for g in range(1, gpu_budget + 1):
        n = math.ceil(g / gpus_per_node)
        for b in batch_sizes:
            if b < g:
                continue
            gp = model.goodput(g, n, int(b), gpu_type)
            if gp > 0:
                out.append(ConfigPrediction(remaining_base_samples.scaled(1.0 / gp, speed_error), gp,
                                            num_gpus=g, num_nodes=n, global_batch=int(b)))
    return sorted(out, key=lambda c: (c.seconds.value, c.num_gpus))
