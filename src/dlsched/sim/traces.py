"""Ground truth for trace-driven jobs: the Pollux per-application traces.

Data: ``shared/data/pollux/traces/<app>/{placements,scalability,validation-<bsz>}.csv`` (Pollux OSDI'21 artifact,
petuum/adaptdl osdi21-artifact, simulator/traces), read and validated by ``perf.profile.pollux_app``. The semantics follow that artifact's simulator so that our numbers
can be compared with its published ones:

* step time of a placement: linear interpolation over the local batch size inside ``placements.csv`` when the
  placement (rotated to its lexicographically smallest form) was measured, else a piecewise-linear interpolation
  over (nodes, replicas, local batch) of all measurements on their Delaunay triangulation;
* a job is done after ``max_epochs`` epochs; epoch ``e`` ends at progress ``min_b progress_b[e-1]``;
* progress per second = statistical gain / step time, gain interpolated linearly between the validated batch sizes.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property, lru_cache
from pathlib import Path

import numpy as np
import pandas as pd
from scipy.spatial import Delaunay

from dlsched.errors import UserError
from dlsched.perf.efficiency import GradientNoise, progress_gain
from dlsched.perf.profile import POLLUX_APPS, PolluxApp, pollux_app

EPS = 1e-8

# The peer's Optimus and Pollux drivers never give ncf more than one GPU (simulator/simulator.py); epochs to
# completion and per-GPU batch limits come with the traces (perf.profile: POLLUX_MAX_EPOCHS, POLLUX_MAX_LOCAL_BATCH).
PEER_MAX_GPUS = {"ncf": 1}


def canonical_placement(placement: tuple[int, ...]) -> tuple[int, ...]:
    """GPUs per node, zeros dropped, rotated to the smallest rotation (how the traces are keyed)."""
    p = tuple(x for x in placement if x)
    return min(p[i:] + p[:i] for i in range(len(p)))


def packed_placement(num_gpus: int, gpus_per_node: int) -> tuple[int, ...]:
    """Fill whole nodes first: 6 GPUs on 4-GPU nodes -> (4, 2)."""
    full, rest = divmod(num_gpus, gpus_per_node)
    return (gpus_per_node,) * full + ((rest,) if rest else ())


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
        self.placements = app.placements.assign(placement=app.placements.placement.astype(int).astype(str))
        self.scalability = app.scalability
        self.init_batch_size = int(self.batch_sizes[0])
        self.max_batch_size = int(self.batch_sizes[-1])
        self.min_local_bsz = int(self.placements.local_bsz.min())
        self.max_local_bsz = int(app.max_local_batch)
        self.max_epochs = int(app.max_epochs)
        self.max_gpus = max_gpus
        # Epoch e ends at the smallest progress any validated batch size reaches after e epochs.
        self.epoch_end = np.concatenate([[0.0], self._progress[:, : self.max_epochs].min(axis=0)])
        self._step_cache: dict = {}

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
    @cached_property
    def _nd_interpolator(self) -> tuple[Delaunay, np.ndarray, np.ndarray]:
        """Delaunay triangulation of every measurement over (nodes, replicas, local batch), its barycentric
        transforms (computed once here; scipy computes them on a triangulation's first query) and the values."""
        xs, ys = ["num_nodes", "num_replicas", "local_bsz"], ["step_time", "sync_time"]
        df = self.placements.groupby(xs)[xs + ys].mean()
        df = pd.concat([df, self.scalability], ignore_index=True)
        tri = Delaunay(df[xs].to_numpy(float))
        return tri, tri.transform, df[ys].to_numpy(float)

    def _interp_nd(self, point: list[float]) -> np.ndarray:
        """Piecewise-linear interpolation exactly as scipy's LinearNDInterpolator (same simplex search, same
        barycentric weights; Qhull's triangulation of this grid-like data is not conforming, so the simplex
        chosen matters) without its per-call set-up; NaN outside the measured hull."""
        tri, transform, values = self._nd_interpolator
        x = np.asarray(point, float)
        simplex = int(tri.find_simplex(x[None, :])[0])
        if simplex < 0:
            return np.full(values.shape[1], np.nan)
        t = transform[simplex]
        b = t[:3] @ (x - t[3])
        return np.append(b, 1.0 - b.sum()) @ values[tri.simplices[simplex]]

    @cached_property
    def _by_placement(self) -> dict[tuple[int, ...], tuple[np.ndarray, np.ndarray, np.ndarray]]:
        """Measured placements -> (local batch sizes ascending, step times, sync times)."""
        out = {}
        for key, df in self.placements.sort_values("local_bsz").groupby("placement"):
            out[tuple(map(int, key))] = (df.local_bsz.to_numpy(float), df.step_time.to_numpy(float),
                                         df.sync_time.to_numpy(float))
        return out

    def warm(self) -> "TraceApp":
        """Build the interpolation tables now (they are otherwise built on first use, mid-simulation)."""
        self._nd_interpolator, self._by_placement
        return self

    def step_time(self, placement: tuple[int, ...], atomic_bsz: int) -> tuple[float, float]:
        """(step time, sync time) in seconds of one optimiser step for this placement and per-GPU batch."""
        key = (placement, atomic_bsz)
        hit = self._step_cache.get(key)
        if hit is not None:
            return hit
        p = canonical_placement(placement)
        measured = self._by_placement.get(p)
        if measured is not None:
            xs, step, sync = measured
            if not xs[0] <= atomic_bsz <= xs[-1]:
                raise ValueError(f"{self.name}: local batch {atomic_bsz} outside the measured "
                                 f"{xs[0]:g}..{xs[-1]:g} for placement {placement}")
            st, sy = float(np.interp(atomic_bsz, xs, step)), float(np.interp(atomic_bsz, xs, sync))
        else:
            st, sy = (float(v) for v in self._interp_nd([min(len(p), 16), sum(p), atomic_bsz]))
        if not (st == st and sy == sy):
            raise ValueError(f"{self.name}: no step time for placement {placement} local batch {atomic_bsz}")
        self._step_cache[key] = (st, sy)
        return st, sy

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


@dataclass(frozen=True)
class TraceThroughput:
    """ThroughputModel of a trace job at its current epoch: samples/s from the traces, efficiency from the gain.

    ``throughput`` assumes the GPUs are packed ``gpus_per_node`` to a node when ``num_nodes`` allows it, else spread
    evenly; the nominal global batch is what the job processes per step. (The peer's Optimus estimate also makes a
    1-GPU job at the initial batch accumulate twice; on workloads 1-4 that changes no decision, so it is not kept.)
    """

    app: TraceApp
    epoch: int
    gpus_per_node: int = 4
    speed_factor: float = 1.0

    def placement_for(self, num_gpus: int, num_nodes: int) -> tuple[int, ...]:
        packed = packed_placement(num_gpus, self.gpus_per_node)
        if len(packed) == num_nodes or num_nodes <= 0:
            return packed
        base, extra = divmod(num_gpus, num_nodes)
        return tuple(base + (i < extra) for i in range(num_nodes) if base + (i < extra))

    def iteration_time(self, num_gpus: int, num_nodes: int, global_batch: int) -> float:
        split = self.app.split_batch(global_batch, num_gpus)
        return self.app.iteration_time(self.placement_for(num_gpus, num_nodes), split) / self.speed_factor

    def throughput(self, num_gpus: int, num_nodes: int, global_batch: int, gpu_type: str | None = None) -> float:
        """Samples/s; 0 for a configuration the job cannot run (per-GPU batch below the smallest measured,
        or outside what the traces cover) so that policies probing it simply see no benefit."""
        if num_gpus <= 0 or global_batch / num_gpus < self.app.min_local_bsz:
            return 0.0
        try:
            return global_batch / self.iteration_time(num_gpus, num_nodes, global_batch)
        except ValueError:
            return 0.0

    def efficiency(self, global_batch: int) -> float:
        b = min(max(global_batch, self.app.init_batch_size), self.app.max_batch_size)
        return self.app.gain(b, min(self.epoch, self.app.max_epochs - 1)) / (b / self.app.init_batch_size)


@dataclass(frozen=True)
class LinearThroughput:
    """ThroughputModel of a duration-driven job (Philly): work in GPU-seconds-at-request, linear in GPUs."""

    requested_gpus: int
    speed_factor: float = 1.0

    def throughput(self, num_gpus: int, num_nodes: int, global_batch: int, gpu_type: str | None = None) -> float:
        return min(num_gpus, self.requested_gpus) / self.requested_gpus * self.speed_factor

    def efficiency(self, global_batch: int) -> float:
        return 1.0
