"""Online perf-model refit for the live service: the ONE place the service turns progress into predictions.

From a job's progress samples it fits (a) a speed model, samples/s as a function of the worker count
(Optimus-style step time ``a*B/w + b + c*w`` with non-negative coefficients, ``scipy.optimize.nnls``), which
the policies receive as the job's ``ThroughputModel``; and (b) the Optimus loss curve
``l(k) = 1/(b0*k + b1) + b2`` (bounded ``curve_fit``), shown in the demo report. Completion is predicted
from the work left (``total_samples`` reported by the runtime, else the spec's hint) over the fitted speed
at the current allocation.

When the perf package's models land (``dlsched.perf``) they replace the two fits here; nothing else in the
service computes predictions.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy.optimize import curve_fit, nnls


@dataclass(frozen=True)
class SpeedModel:
    """Fitted step time ``t(w, B) = a*B/w + b + c*w`` (compute split over w workers, fixed overhead, per-worker
    communication), so ``samples/s = B / t``; satisfies ``policy.base.ThroughputModel``. ``ref_batch`` is used
    when a caller does not name a batch."""

    a: float
    b: float
    c: float
    ref_batch: int

    def step_time(self, num_gpus: int, global_batch: int) -> float:
        return self.a * global_batch / num_gpus + self.b + self.c * num_gpus

    def throughput(self, num_gpus: int, num_nodes: int = 1, global_batch: int = 0, gpu_type: str | None = None) -> float:
        if num_gpus <= 0:
            return 0.0
        bsz = global_batch or self.ref_batch
        t = self.step_time(num_gpus, bsz)
        return bsz / t if t > 0 else 0.0

    def efficiency(self, global_batch: int) -> float:
        return 1.0


@dataclass(frozen=True)
class LossFit:
    b0: float
    b1: float
    b2: float
    rmse: float

    def __call__(self, k):
        return 1.0 / (self.b0 * np.asarray(k, float) + self.b1) + self.b2


@dataclass(frozen=True)
class Prediction:
    fraction_done: float | None
    total_samples: float | None
    remaining_s: float | None
    predicted_finish: float | None
    loss_fit: LossFit | None


def fit_speed(workers: np.ndarray, batches: np.ndarray, samples_per_s: np.ndarray) -> SpeedModel | None:
    """NNLS on the step time. Terms are added only when the data can identify them: one (w, B) point -> pure
    compute (linear scaling); two distinct worker counts or batches -> + overhead; three -> + communication."""
    ok = (workers > 0) & (batches > 0) & (samples_per_s > 0) & np.isfinite(samples_per_s)
    w, bs, s = workers[ok].astype(float), batches[ok].astype(float), samples_per_s[ok].astype(float)
    if len(w) == 0:
        return None
    step = bs / s
    configs = len({(x, y) for x, y in zip(w, bs)})
    cols = [bs / w] + ([np.ones_like(w)] if configs >= 2 else []) + ([w] if len(np.unique(w)) >= 3 else [])
    coef, _ = nnls(np.column_stack(cols), step)
    a, b, c = (list(coef) + [0.0, 0.0])[:3]
    if a <= 0 and b <= 0:
        return None
    return SpeedModel(float(a), float(b), float(c), int(np.median(bs)))


def _loss_curve(k, b0, b1, b2):
    return 1.0 / (b0 * k + b1) + b2


def fit_loss(steps: np.ndarray, losses: np.ndarray) -> LossFit | None:
    ok = np.isfinite(losses) & np.isfinite(steps)
    k, l = steps[ok].astype(float), losses[ok].astype(float)
    if len(k) < 4 or np.ptp(k) == 0:
        return None
    l0 = max(float(l[0] - l.min()), 1e-6)
    try:
        (b0, b1, b2), _ = curve_fit(_loss_curve, k, l, p0=(1.0 / (l0 * max(k.max(), 1.0)), 1.0 / l0, float(l.min())),
                                    bounds=([0, 1e-9, 0], [np.inf, np.inf, np.inf]), maxfev=2000)
    except (RuntimeError, ValueError):
        return None
    rmse = float(np.sqrt(np.mean((_loss_curve(k, b0, b1, b2) - l) ** 2)))
    return LossFit(float(b0), float(b1), float(b2), rmse)


def observed_rate(recs: list[dict], window: int = 50) -> float | None:
    """Wall-clock samples/s over the newest records at the current (workers, batch): unlike the per-step figure
    it includes everything between steps (data loading, logging, control polling, CPU sharing)."""
    if not recs:
        return None
    cfg = (recs[-1].get("workers"), recs[-1].get("batch_size"))
    tail = []
    for r in reversed(recs[-window:]):
        if (r.get("workers"), r.get("batch_size")) != cfg or r.get("time") is None:
            break
        tail.append(r)
    if len(tail) < 3:
        return None
    dt = tail[0]["time"] - tail[-1]["time"]
    ds = tail[0]["samples"] - tail[-1]["samples"]
    return ds / dt if dt > 0 and ds > 0 else None


def predict(progress: list[dict], now: float, current_workers: int, current_batch: int | None,
            total_hint: float | None, samples_done: float) -> tuple[Prediction, SpeedModel | None]:
    """Prediction for one job from its progress records (dicts as stored: time, step, samples, loss, ...)."""
    recs = [p for p in progress if p.get("samples") is not None]
    total = next((p["total_samples"] for p in reversed(progress) if p.get("total_samples")), None) or total_hint
    recent = recs[-200:]     # the newest measurements describe the job as it runs now
    speed = fit_speed(np.array([p.get("workers") or 0 for p in recent], float),
                      np.array([p.get("batch_size") or 0 for p in recent], float),
                      np.array([p.get("samples_per_s") or 0.0 for p in recent], float))
    loss_fit = None
    if recs:
        loss_fit = fit_loss(np.array([p.get("step") or 0 for p in recs], float),
                            np.array([p["loss"] if p.get("loss") is not None else math.nan for p in recs], float))
    frac = min(1.0, samples_done / total) if total else None
    remaining_s = finish = None
    if total and speed is not None:
        rate = observed_rate(recs) or speed.throughput(max(current_workers, 1), 1, current_batch or 0)
        if rate > 0:
            remaining_s = max(0.0, total - samples_done) / rate
            finish = now + remaining_s if current_workers > 0 else None
    return Prediction(frac, total, remaining_s, finish, loss_fit), speed
