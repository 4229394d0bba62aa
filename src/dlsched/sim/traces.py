"""Ground truth for trace-driven jobs: the Pollux per-application traces.

Data: ``shared/data/pollux/traces/<app>/{placements,scalability,validation-<bsz>}.csv`` (Pollux OSDI'21 artifact,
petuum/adaptdl osdi21-artifact, simulator/traces), read and validated by ``perf.profile.pollux_app``. The semantics
follow that artifact's simulator so that our numbers can be compared with its published ones:

* step time of a placement: ``perf.profile.StepTimes`` (the artifact's lookup; ``MeasuredSpeed`` shares it);
* a job is done after ``max_epochs`` epochs; epoch ``e`` ends at progress ``min_b progress_b[e-1]``;
* progress per second = statistical gain / step time, gain interpolated linearly between the validated batch sizes.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Mapping

import numpy as np

from dlsched.errors import UserError
from dlsched.perf.efficiency import GradientNoise, progress_gain
from dlsched.perf.profile import POLLUX_APPS, PolluxApp, StepTimes, even_placement, packed_placement, pollux_app

EPS = 1e-8

# The peer's Optimus and Pollux drivers never give ncf more than one GPU (simulator/simulator.py); epochs to
# completion and per-GPU batch limits come with the traces (perf.profile: POLLUX_MAX_EPOCHS, POLLUX_MAX_LOCAL_BATCH).
PEER_MAX_GPUS = {"ncf": 1}


@dataclass(frozen=True)
class LocalBatch:
    """How a global batch is split: per-GPU (atomic) batch and gradient-accumulation steps."""

    atomic: int
    accum_steps: int

    def global_batch(self, num_replicas: int) -> int:
        return num_replicas * self.atomic * (self.accum_steps + 1)


class TraceApp:
    """One application's measured traces; all queries are memoised (a simulation asks the same ones often)."""

    def __init__(self, app: PolluxApp, max_gpus: int | None = None):
        self.name = app.name
        validation = app.validation
        self.batch_sizes = np.array(sorted(validation))
        n = min(len(validation[b]) for b in self.batch_sizes)
        self._progress = np.stack([validation[b].progress.to_numpy(float)[:n] for b in self.batch_sizes])
        self._iteration = np.stack([validation[b].iteration.to_numpy(float)[:n] for b in self.batch_sizes])
        self._grad_sqr = np.stack([validation[b].grad_sqr.to_numpy(float)[:n] for b in self.batch_sizes])
        self._grad_var = np.stack([validation[b].grad_var.to_numpy(float)[:n] for b in self.batch_sizes])
        self.init_batch_size = int(self.batch_sizes[0])
        self.max_batch_size = int(self.batch_sizes[-1])
        self.min_local_bsz = int(app.placements.local_bsz.min())
        self.max_local_bsz = int(app.max_local_batch)
        self.max_epochs = int(app.max_epochs)
        self.max_gpus = max_gpus
        # Epoch e ends at the smallest progress any validated batch size reaches after e epochs.
        self.epoch_end = np.concatenate([[0.0], self._progress[:, : self.max_epochs].min(axis=0)])
        self.step_times = StepTimes(app)
        self.step_time = self.step_times.step_time   # (placement, per-GPU batch) -> (step s, sync s)

    @property
    def target_progress(self) -> float:
        return float(self.epoch_end[self.max_epochs])

    # --- batch-size bookkeeping -------------------------------------------------------------------
    def split_batch(self, batch_size: int, num_replicas: int) -> LocalBatch:
        """Per-GPU batch and accumulation steps for a global batch (peer's rule, capped at max_batch_size).

        With one GPU and a batch above the initial one, accumulate at least once (gradient statistics need
        two micro-batches).
        """
        local = math.ceil(batch_size / num_replicas - EPS)
        accum = math.ceil(local / self.max_local_bsz - EPS) - 1
        if num_replicas == 1 and batch_size > self.init_batch_size:
            accum = max(1, accum)
        atomic = math.ceil(local / (accum + 1) - EPS)
        atomic = min(atomic, int(self.max_batch_size / (num_replicas * (accum + 1))))
        return LocalBatch(atomic, accum)

    def _bracket(self, batch_size: float) -> tuple[int, int, float]:
        """Indices of the validated batch sizes around ``batch_size`` and the weight of the upper one."""
        hi = int(np.searchsorted(self.batch_sizes, batch_size, side="left"))
        if hi >= len(self.batch_sizes) or batch_size < self.batch_sizes[0]:
            raise ValueError(f"{self.name}: batch size {batch_size} outside validated {list(self.batch_sizes)}")
        if self.batch_sizes[hi] == batch_size:
            return hi, hi, 0.0
        lo = hi - 1
        w = (batch_size - self.batch_sizes[lo]) / (self.batch_sizes[hi] - self.batch_sizes[lo])
        return lo, hi, float(w)

    def _interp(self, table: np.ndarray, batch_size: float, epoch: int) -> float:
        lo, hi, w = self._bracket(batch_size)
        return float((1 - w) * table[lo, epoch] + w * table[hi, epoch])

    def grad_stats(self, batch_size: float, epoch: int) -> tuple[float, float]:
        return self._interp(self._grad_sqr, batch_size, epoch), self._interp(self._grad_var, batch_size, epoch)

    def gain(self, batch_size: float, epoch: int) -> float:
        """Statistical gain (progress per step, in steps at the initial batch) — ``perf.efficiency``'s formula
        with this epoch's gradient statistics interpolated between the validated batch sizes."""
        sqr, var = self.grad_stats(batch_size, epoch)
        return progress_gain(GradientNoise(sqr, var), batch_size, self.init_batch_size)

    def iterations(self, batch_size: float, epoch: int) -> float:
        """Iterations done after ``epoch`` (the peer's row index), interpolated between validated batches."""
        return self._interp(self._iteration, batch_size, min(epoch, self._iteration.shape[1] - 1))

    def remaining_iterations(self, batch_size: float, epoch: int) -> float:
        """What the peer's Optimus+Oracle is told is left: rows ``max_epochs-1`` minus ``epoch`` (>= 1)."""
        last = self.max_epochs - 1
        if last <= epoch:
            return 1.0
        return self.iterations(batch_size, last) - self.iterations(batch_size, epoch)

    # --- speed ------------------------------------------------------------------------------------
    def warm(self) -> "TraceApp":
        """Build the step-time tables now (they are otherwise built on first use, mid-simulation)."""
        self.step_times.warm()
        return self

    def iteration_time(self, placement: tuple[int, ...], split: LocalBatch) -> float:
        """Seconds per optimiser step including gradient accumulation."""
        st, sy = self.step_time(placement, split.atomic)
        return st + (st - sy) * split.accum_steps


@lru_cache(maxsize=None)
def load_app(name: str, traces_dir: str | None = None) -> TraceApp:
    """The Pollux application ``name`` with the peer's settings (cached: traces are read once per process)."""
    if name not in POLLUX_APPS and traces_dir is None:
        raise UserError(f"unknown application {name!r}; traces exist for: {', '.join(POLLUX_APPS)}")
    return TraceApp(pollux_app(name, Path(traces_dir) if traces_dir else None), PEER_MAX_GPUS.get(name))


GpuSpeeds = tuple[tuple[str, float], ...]   # hashable (speed models key policies' memo tables)


def speed_factor(gpu_speed: Mapping[str, float], gpu_type: str | None, app: str | None = None) -> float:
    """How much faster than the traced GPU a ``gpu_type`` runs ``app``: the ``"TYPE/APP"`` entry when given (Gavel's
    point: speed-ups differ per model), else the ``"TYPE"`` entry, else 1. No type (a policy that does not ask): 1."""
    if gpu_type is None:
        return 1.0
    if app is not None and f"{gpu_type}/{app}" in gpu_speed:
        return float(gpu_speed[f"{gpu_type}/{app}"])
    return float(gpu_speed.get(gpu_type, 1.0))


@dataclass(frozen=True)
class TraceThroughput:
    """ThroughputModel of a trace job at its current epoch: samples/s from the traces, efficiency from the gain.

    ``throughput`` assumes the GPUs are packed ``gpus_per_node`` to a node when ``num_nodes`` allows it, else spread
    evenly; the nominal global batch is what the job processes per step. (The peer's Optimus estimate also makes a
    1-GPU job at the initial batch accumulate twice; on workloads 1-4 that changes no decision, so it is not kept.)
    On a ``gpu_type`` the step is ``speed_factor(gpu_speed, gpu_type, app)`` times faster, as the simulator runs it.
    """

    app: TraceApp
    epoch: int
    gpus_per_node: int = 4
    gpu_speed: GpuSpeeds = ()

    def placement_for(self, num_gpus: int, num_nodes: int) -> tuple[int, ...]:
        packed = packed_placement(num_gpus, self.gpus_per_node)
        if len(packed) == num_nodes or num_nodes <= 0:
            return packed
        return even_placement(num_gpus, min(num_nodes, num_gpus))

    def iteration_time(self, num_gpus: int, num_nodes: int, global_batch: int, gpu_type: str | None = None) -> float:
        split = self.app.split_batch(global_batch, num_gpus)
        factor = speed_factor(dict(self.gpu_speed), gpu_type, self.app.name) if self.gpu_speed else 1.0
        return self.app.iteration_time(self.placement_for(num_gpus, num_nodes), split) / factor

    def throughput(self, num_gpus: int, num_nodes: int, global_batch: int, gpu_type: str | None = None) -> float:
        """Samples/s; 0 for a configuration the job cannot run (per-GPU batch below the smallest measured,
        or outside what the traces cover) so that policies probing it simply see no benefit."""
        if num_gpus <= 0 or global_batch / num_gpus < self.app.min_local_bsz:
            return 0.0
        try:
            return global_batch / self.iteration_time(num_gpus, num_nodes, global_batch, gpu_type)
        except ValueError:
            return 0.0

    def efficiency(self, global_batch: int) -> float:
        b = min(max(global_batch, self.app.init_batch_size), self.app.max_batch_size)
        return self.app.gain(b, min(self.epoch, self.app.max_epochs - 1)) / (b / self.app.init_batch_size)


@dataclass(frozen=True)
class LinearThroughput:
    """ThroughputModel of a duration-driven job (Philly): work in GPU-seconds-at-request, linear in GPUs."""

    requested_gpus: int
    gpu_speed: GpuSpeeds = ()

    def throughput(self, num_gpus: int, num_nodes: int, global_batch: int, gpu_type: str | None = None) -> float:
        factor = speed_factor(dict(self.gpu_speed), gpu_type) if self.gpu_speed else 1.0
        return min(num_gpus, self.requested_gpus) / self.requested_gpus * factor

    def efficiency(self, global_batch: int) -> float:
        return 1.0
