"""The job's own goodput-optimal global batch: AdaptDL's ``autoscale_batch_size`` for ``ElasticDataLoader``.

Every ``DECIDE_EVERY`` steps rank 0 picks, at the current number of workers, the global batch M in
[batch_size, max_batch_size] (local batch within ``local_bsz_bounds``) that maximises

    goodput(M) = M / T(⌈M / workers⌉) × efficiency(M)

T is the step time measured at each (workers, local batch) the job has run (median of the last steps);
with ``gradient_accumulation`` a local batch above the micro-batch bound takes k micro-batches, and T is
one step at the micro-batch plus k-1 micro-batches without the all-reduce (measured apart; half a step
each until then, optimistic as below). The efficiency is Pollux's (``perf.efficiency``) from the measured
gradient noise at the script's batch_size.
As in AdaptDL (petuum/adaptdl ``adaptdl/goodput.py``, ``fit_perf_params``), one measured local batch cannot
tell fixed from per-sample cost, so it is split half and half: optimistic about larger batches, which is
how the job gets to measure a second one.
"""
from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass

import numpy as np

from dlsched.errors import UserError
from dlsched.perf.efficiency import GradientNoise, efficiency
from dlsched.torch.noise import GradientNoiseEstimator

DECIDE_EVERY = 10   # steps between decisions: a change rebuilds the DataLoader iterator
MIN_SAMPLES = 4     # steps measured at the current (workers, local batch) before deciding from them
MIN_NOISE_UPDATES = 4  # gradient-noise measurements before deciding: one alone is too noisy to act on
KEEP_SAMPLES = 20   # recent step times kept per (workers, local batch): the median of these is T
MIN_GAIN = 0.05     # a change must promise this much more goodput: measured step times jitter on shared CPUs


@dataclass(frozen=True)
class BatchDecision:
    """One decision, with the numbers it was made from (logged as a ``batch_size`` event)."""

    from_batch: int
    to_batch: int
    workers: int
    goodput: float           # predicted samples/s × efficiency at to_batch
    from_goodput: float      # the same at from_batch
    throughput: float        # predicted samples/s at to_batch
    efficiency: float        # statistical efficiency of to_batch against the script's batch_size
    noise_scale: float       # the gradient noise scale it used, in samples
    measured_local_batches: list[int]


class AdaptiveBatch:
    """Opt-in state: the bounds the user gave and the step times measured so far."""

    def __init__(self, max_batch_size: int, local_bsz_bounds: tuple[int | None, int | None] | None = None,
                 gradient_accumulation: bool = False):
        lo, hi = local_bsz_bounds or (None, None)
        self.max_batch, self.local_min, self.local_max = max_batch_size, lo or 1, hi or max_batch_size
        # accumulation: the upper bound is the micro-batch's, and a local batch past it takes k micro-batches
        self.micro_max = self.local_max
        if gradient_accumulation:
            self.local_max = max_batch_size
        for name, value in (("max_batch_size", max_batch_size), ("local_bsz_bounds", self.local_min)):
            if not isinstance(value, int) or value < 1:
                raise UserError(f"autoscale_batch_size: {name}={value!r} must be a positive integer")
        if self.local_max < self.local_min:
            raise UserError(f"autoscale_batch_size: local_bsz_bounds={local_bsz_bounds!r} is empty")
        self.step_times: dict[str, list[float]] = {}  # "workers,local" -> recent step seconds (one micro-batch)
        self.micro_times: dict[str, list[float]] = {}  # "workers,micro" -> an accumulated micro-batch's (no sync)
        self.proposed: int | None = None  # rank 0's decision, on its way to every rank in the step's all-reduce
        self.measured_layout = -1  # the session layout the last step time was measured in

    # -- measurements --------------------------------------------------------------------------------
    def observe(self, workers: int, local_batch: int, seconds: float, table: dict | None = None) -> None:
        times = (self.step_times if table is None else table).setdefault(f"{workers},{local_batch}", [])
        times.append(seconds)
        del times[:-KEEP_SAMPLES]

    def _measured(self, workers: int, table: dict | None = None) -> tuple[np.ndarray, np.ndarray]:
        table = self.step_times if table is None else table
        rows = [(int(k.split(",")[1]), float(np.median(v))) for k, v in table.items()
                if int(k.split(",")[0]) == workers and len(v) >= MIN_SAMPLES]
        m, t = (np.array(c, float) for c in zip(*rows)) if rows else (np.zeros(0), np.zeros(0))
        return m, t

    def step_time(self, workers: int, table: dict | None = None):
        """T(local batch) at ``workers`` from the steps measured there; None before MIN_SAMPLES of one batch."""
        m, t = self._measured(workers, table)
        if len(m) == 0:
            return None
        if len(m) == 1:  # AdaptDL's prior: half fixed cost, half per sample
            return lambda local: t[0] / 2 * (1 + np.asarray(local, float) / m[0])
        from dlsched.perf.speed import fit_compute  # scipy: imported by the jobs that opt in, when they decide

        return fit_compute(m, t)

    # -- at the session's step boundary ----------------------------------------------------------------
    def at_boundary(self, s, proposed: int, wall: float) -> None:
        """Apply the batch rank 0 proposed last step (every rank, same step), else measure and maybe propose."""
        if proposed and proposed != s.global_batch:
            self.proposed, s.requested_batch = None, proposed
            s.layout += 1  # the loader re-splits the rest of the epoch at the new batch
            s.lr_control.retarget()
            return
        if s.rank != 0:
            return
        if self.measured_layout == s.layout:  # the first step after a rebuild also built the DataLoader
            micro, count = s.micro, s.micro.count
            size = math.ceil(max(s.local_batches) / count)
            self.observe(s.world, size, wall - micro.no_sync_s)  # the last micro-batch with the all-reduce
            if count > 1:
                self.observe(s.world, size, micro.no_sync_s / (count - 1), self.micro_times)
        self.measured_layout = s.layout
        if s.step % DECIDE_EVERY == 0 and not self.proposed:
            decision = self.decide(s.global_batch, s.world, s._reference(), s.noise)
            if decision is not None:
                self.proposed = decision.to_batch
                s._emit(decision_event(decision, s.step, time.time()))

    def regrouped(self, batch: int, workers: int, min_batch: int) -> int:
        """A new generation: a pending proposal was for the old size; the batch moves into the new bounds."""
        self.proposed = None
        return self.feasible(batch, workers, min_batch)

    # -- the decision ----------------------------------------------------------------------------------
    def feasible(self, batch: int, workers: int, min_batch: int) -> int:
        """``batch`` moved into the bounds at ``workers`` (a resize may leave the current one outside)."""
        lo = max(min_batch, workers * self.local_min)
        hi = max(lo, min(self.max_batch, workers * self.local_max))
        return int(min(max(batch, lo), hi))

    def decide(self, current: int, workers: int, min_batch: int, noise: GradientNoiseEstimator) -> BatchDecision | None:
        """The goodput-optimal batch at ``workers``, or None when it is the current one or nothing is known."""
        step_time = self.step_time(workers)
        if step_time is None or noise.updates < MIN_NOISE_UPDATES:
            return None
        lo = max(min_batch, workers * self.local_min)
        hi = min(self.max_batch, workers * self.local_max)
        if hi < lo:
            return None
        batches = np.unique(np.append(np.arange(lo, hi + 1), current))
        stats = GradientNoise(max(noise.sqr, 0.0), noise.variance(min_batch))
        local = np.ceil(batches / workers)
        micros = np.ceil(local / self.micro_max)  # 1 without accumulation (local_max == micro_max)
        size = np.ceil(local / micros)
        # k micro-batches: one step with its all-reduce, k-1 without (half a step each until measured)
        micro_time = self.step_time(workers, self.micro_times) or (lambda m: step_time(m) / 2)
        throughput = batches / np.maximum(step_time(size) + (micros - 1) * micro_time(size), 1e-9)
        eff = np.asarray(efficiency(stats, batches, min_batch), float)
        goodput = throughput * eff
        best, now = int(np.argmax(goodput)), int(np.searchsorted(batches, current))
        if batches[best] == current or goodput[best] <= goodput[now] * (1 + MIN_GAIN):
            return None
        return BatchDecision(int(current), int(batches[best]), workers, float(goodput[best]), float(goodput[now]),
                             float(throughput[best]), float(eff[best]), stats.noise_scale(min_batch),
                             sorted(int(k.split(",")[1]) for k in self.step_times if int(k.split(",")[0]) == workers))

    # -- state -----------------------------------------------------------------------------------------
    def state_dict(self) -> dict:
        return {"step_times": self.step_times, "micro_times": self.micro_times}

    def load_state_dict(self, state: dict) -> None:
        self.step_times = {k: list(v) for k, v in state["step_times"].items()}
        self.micro_times = {k: list(v) for k, v in state.get("micro_times", {}).items()}


def decision_event(d: BatchDecision, step: int, time_s: float) -> dict:
    noise_scale = d.noise_scale if math.isfinite(d.noise_scale) else None
    return {"event": "batch_size", "time": time_s, "step": step, **asdict(d), "noise_scale": noise_scale}
