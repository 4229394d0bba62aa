"""Value curves of the elastic DP: for each GPU count on one GPU type, the best value over the job's candidate
batches (``elastic.py`` documents the objective and the interpolation beyond DENSE_GPUS)."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import numpy as np

from dlsched.policy.base import JobView, ThroughputModel
from dlsched.policy.batch_range import BatchRange

NEG_INF = -np.inf
DENSE_GPUS = 16            # below this every g is evaluated exactly
MEMO_SIZE = 4096           # value curves remembered across decisions (oldest dropped first)

# value(speed, num_gpus, num_nodes, global_batch, gpu_type) -> a rate to maximise
ValueFn = Callable[[ThroughputModel, int, int, int, "str | None"], float]


def throughput_value(speed: ThroughputModel, g: int, nodes: int, b: int, gpu_type: str | None) -> float:
    return speed.throughput(g, nodes, b, gpu_type)


def gpu_samples(lo: int, hi: int, node_size: int) -> np.ndarray:
    """GPU counts where the throughput is evaluated: every g up to DENSE_GPUS, then node multiples and a grid."""
    dense = np.arange(lo, min(hi, DENSE_GPUS) + 1)
    if hi <= DENSE_GPUS:
        return dense
    multiples = np.arange(node_size, hi + 1, max(node_size, 1))
    grid = np.round(np.geomspace(max(lo, DENSE_GPUS), hi, 12)).astype(int)
    g = np.unique(np.concatenate((dense, multiples, grid, [hi])))
    return g[(g >= lo) & (g <= hi)]


@dataclass(frozen=True)
class JobCurve:
    """Value of each GPU count on one GPU type, and the batch chosen where it was evaluated (0 = interpolated)."""

    values: np.ndarray      # index g = 0..g_max; -inf where infeasible
    batches: np.ndarray


class ValueCurves:
    """Computes and memoises job curves under one value function (throughput or goodput)."""

    def __init__(self, value: ValueFn):
        self.value = value
        self._memo: dict = {}

    def best_batch(self, job: JobView, rng: BatchRange, g: int, node_size: int, gpu_type: str) -> tuple[float, int]:
        nodes = math.ceil(g / node_size)
        best, best_b = NEG_INF, 0
        for b in rng.batches(g):
            v = self.value(job.speed, g, nodes, int(b), gpu_type)
            if v > best:
                best, best_b = v, int(b)
        return best, best_b

    def curve(self, job: JobView, rng: BatchRange, gpu_type: str, node_size: int) -> JobCurve:
        """Memoised on (speed model, range, type, node size): a pure function of hashable inputs, so repeated
        decisions over the same jobs (every arrival/completion) reuse it. Unhashable models are recomputed."""
        try:
            key = (job.speed, rng, gpu_type, node_size)
            hit = self._memo.get(key)
        except TypeError:
            return self._compute(job, rng, gpu_type, node_size)
        if hit is None:
            if len(self._memo) >= MEMO_SIZE:
                self._memo.pop(next(iter(self._memo)))
            hit = self._memo[key] = self._compute(job, rng, gpu_type, node_size)
        return hit

    def _compute(self, job: JobView, rng: BatchRange, gpu_type: str, node_size: int) -> JobCurve:
        values = np.full(rng.g_max + 1, NEG_INF)
        batches = np.zeros(rng.g_max + 1, dtype=int)
        samples = gpu_samples(rng.g_min, rng.g_max, node_size)
        for g in samples:
            values[g], batches[g] = self.best_batch(job, rng, int(g), node_size, gpu_type)
        ok = np.isfinite(values[samples])
        if ok.any() and len(samples) < rng.g_max - rng.g_min + 1:
            inside = np.arange(rng.g_min, rng.g_max + 1)
            values[inside] = np.interp(inside, samples[ok], values[samples][ok])
        return JobCurve(values, batches)
