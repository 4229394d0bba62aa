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
TIE = 1e-9                 # relative: values this close are one value (``best_batch``)

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
        """The best value at g and its batch. Batches the model cannot tell apart (a speed fit from one (GPUs, batch)
        configuration has no fixed cost: every batch is as fast) leave the job at the batch it runs at (``kept_batch``)
        or the nearest candidate to it: the smallest one, their first, halved a live job's batch at each grow (a
        batch change, and the LR rule's rescale, that nothing measured asked for)."""
        nodes = math.ceil(g / node_size)
        batches = rng.batches(g)
        values = np.array([self.value(job.speed, g, nodes, int(b), gpu_type) for b in batches], float)
        if not values.size or not np.isfinite(best := float(values.max())):
            return NEG_INF, 0
        near = batches[values >= best - TIE * abs(best)]
        keep = job.kept_batch
        if keep is None:
            return best, int(near[0])
        tied = abs(self.value(job.speed, g, nodes, keep, gpu_type) - best) <= TIE * abs(best)
        if batches[0] <= keep <= batches[-1] and tied:
            return best, int(keep)
        return best, int(near[np.argmin(np.abs(np.log(near / keep)))])

    def curve(self, job: JobView, rng: BatchRange, gpu_type: str, node_size: int) -> JobCurve:
        """Memoised on (speed model, range, type, node size, kept batch): a pure function of hashable inputs, so repeated
        decisions over the same jobs (every arrival/completion) reuse it. Unhashable models are recomputed."""
        try:
            key = (job.speed, rng, gpu_type, node_size, job.kept_batch)   # ties go to the kept batch
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
