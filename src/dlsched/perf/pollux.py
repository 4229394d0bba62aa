"""The Pollux OSDI'21 artifact's per-application traces as one model, used by the simulator (its ground truth)
and by anything in ``perf`` or the policies that asks the traces directly.

Data: ``shared/data/pollux/traces/<app>/{placements,scalability,validation-<bsz>}.csv`` (petuum/adaptdl
osdi21-artifact, simulator/traces), read and validated by ``perf.profile.pollux_app``. The semantics follow the
artifact's simulator (simulator/applications.py) so that simulated JCTs match its published ones:

* step time of a placement: ``StepTimes``, the artifact's lookup;
* a job is done after ``max_epochs`` epochs; epoch ``e`` ends at progress ``min_b progress_b[e-1]``;
* progress per second = statistical gain / step time, gain interpolated linearly between the validated batch sizes.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property, lru_cache
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from dlsched.errors import UserError
from dlsched.perf.efficiency import GradientNoise, progress_gain
from dlsched.perf.profile import POLLUX_APPS, PolluxApp, pollux_app

if TYPE_CHECKING:
    from scipy.spatial import Delaunay

ND_MAX_NODES = 16       # the artifact clamps the node count at 16 before interpolating (simulator/applications.py)


def canonical_placement(placement: tuple[int, ...]) -> tuple[int, ...]:
    """GPUs per node, zeros dropped, rotated to the smallest rotation: (2, 1) and (1, 2) are the same ring, and
    that is how ``placements.csv`` is keyed."""
    p = tuple(x for x in placement if x)
    return min(p[i:] + p[:i] for i in range(len(p))) if p else p


def even_placement(num_gpus: int, num_nodes: int) -> tuple[int, ...]:
    """GPUs per node when ``num_gpus`` are spread as evenly as possible over ``num_nodes``."""
    if not 1 <= num_nodes <= num_gpus:
        raise ValueError(f"need 1 <= num_nodes <= num_gpus, got {num_nodes} nodes, {num_gpus} GPUs")
    q, r = divmod(num_gpus, num_nodes)
    return tuple([q + 1] * r + [q] * (num_nodes - r))


def packed_placement(num_gpus: int, gpus_per_node: int) -> tuple[int, ...]:
    """Fill whole nodes first: 6 GPUs on 4-GPU nodes -> (4, 2)."""
    full, rest = divmod(num_gpus, gpus_per_node)
    return (gpus_per_node,) * full + ((rest,) if rest else ())


class StepTimes:
    """Step and sync time of one Pollux app for any placement and per-GPU batch, exactly as the artifact's simulator
    looks them up (simulator/applications.py), so that simulated JCTs match its published ones.

    A placement measured in ``placements.csv`` (up to rotation) is interpolated linearly in the local batch and
    must lie inside the measured range; any other placement is interpolated piecewise-linearly in (nodes <= 16,
    replicas, local batch) over the per-config means of ``placements.csv`` plus every ``scalability.csv`` row, with
    scipy's LinearNDInterpolator semantics (same Delaunay simplex search and barycentric weights; Qhull's
    triangulation of this grid-like data is not conforming, so the simplex chosen matters). Outside the
    measurements ``step_time`` raises ValueError, as the artifact does; answers are memoised.
    """

    def __init__(self, app: PolluxApp):
        self.name = app.name
        self._placements = app.placements.assign(placement=app.placements.placement.astype(int).astype(str))
        self._scalability = app.scalability
        self._cache: dict = {}

    @cached_property
    def _nd(self) -> tuple[Delaunay, np.ndarray, np.ndarray]:
        """Delaunay triangulation of the measurements, its barycentric transforms (computed once here; scipy computes
        them on a triangulation's first query) and the (step, sync) values."""
        xs, ys = ["num_nodes", "num_replicas", "local_bsz"], ["step_time", "sync_time"]
        df = self._placements.groupby(xs)[xs + ys].mean()
        df = pd.concat([df, self._scalability], ignore_index=True)
        from scipy.spatial import Delaunay   # here: ~0.4 s to import, and most processes never triangulate
        tri = Delaunay(df[xs].to_numpy(float))
        return tri, tri.transform, df[ys].to_numpy(float)

    def _interp_nd(self, point: list[float]) -> np.ndarray:
        """LinearNDInterpolator at one point without its per-call set-up; NaN outside the measured hull."""
        tri, transform, values = self._nd
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
        for key, df in self._placements.sort_values("local_bsz").groupby("placement"):
            out[tuple(map(int, key))] = (df.local_bsz.to_numpy(float), df.step_time.to_numpy(float),
                                         df.sync_time.to_numpy(float))
        return out

    @cached_property
    def max_gpus_per_node(self) -> int:
        """The most GPUs of one node any measured placement uses: the traces know no step time beyond it."""
        return max(max(p) for p in self._by_placement)

    def warm(self) -> "StepTimes":
        """Build the interpolation tables now (they are otherwise built on first use)."""
        self._nd, self._by_placement
        return self

    def step_time(self, placement: tuple[int, ...], local_batch: float) -> tuple[float, float]:
        """(step time, sync time) in seconds of one step with ``placement`` (GPUs per node) and per-GPU batch."""
        key = (placement, local_batch)
        hit = self._cache.get(key)
        if hit is not None:
            return hit
        p = canonical_placement(placement)
        measured = self._by_placement.get(p)
        if measured is not None:
            xs, step, sync = measured
            if not xs[0] <= local_batch <= xs[-1]:
                raise ValueError(f"{self.name}: local batch {local_batch} outside the measured "
                                 f"{xs[0]:g}..{xs[-1]:g} for placement {placement}")
            st, sy = float(np.interp(local_batch, xs, step)), float(np.interp(local_batch, xs, sync))
        else:
            st, sy = (float(v) for v in self._interp_nd([min(len(p), ND_MAX_NODES), sum(p), local_batch]))
        if not (st == st and sy == sy):
            raise ValueError(f"{self.name}: no step time for placement {placement} local batch {local_batch}")
        self._cache[key] = (st, sy)
        return st, sy



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

    def efficiency(self, batch_size: float, epoch: int) -> float:
        """Statistical efficiency (gain per sample relative to the initial batch), in (0, 1]."""
        return self.gain(batch_size, epoch) / (batch_size / self.init_batch_size)

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
