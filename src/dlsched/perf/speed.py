"""Resource → speed models: Optimus parameter-server models and an all-reduce data-parallel step-time model.

Optimus (Peng et al., EuroSys'18, Eqs. 3–4; ``shared/docs/algorithms.md`` §1.3), in steps/s::

    sync   f(p, w) = (θ0·M/w + θ1 + θ2·w/p + θ3·w + θ4·p)^-1
    async  f(p, w) = w · (θ0 + θ1·w/p + θ2·w + θ3·p)^-1

Both are linear in θ after inversion (1/f, resp. w/f), so θ ≥ 0 comes from ``scipy.optimize.nnls``; rows are
weighted by the measured speed so residuals are relative errors.

All-reduce data parallelism (why this shape): one step on ``r`` replicas over ``n`` nodes with local batch m::

    compute  t_c(m) = max(floor, a + b·m)     # launch-bound GPUs are flat up to a knee (H100 table) —
                                             # step time is NOT proportional to the batch
    network  t_n(r, n) = 0-replica constant for r = 1, else for the slowest link L (intra-node if n = 1,
             inter-node otherwise): α_L + β_L·2(r−1)/r + λ_L·(r−1)
             # ring all-reduce moves 2(r−1)/r of the gradients over L, in 2(r−1) latency-bound hops
    step     (t_c^γ + t_n^γ)^(1/γ), γ ∈ [1, 10]   # γ = 1: no overlap; γ → ∞: perfect overlap

Measured traces give step_time and the exposed sync_time, so compute = step − sync. The compute piece is a
hinge fit (each candidate knee, NNLS line above it, floor = median below, keep the best relative error).
For each γ on a grid the target t_n = (step^γ − t_c^γ)^(1/γ) is linear in (α, β, λ), fitted by NNLS; the γ
with the lowest relative step-time error wins. All deterministic and a few ms.

GPU type is first-class: ``AllReduceSpeedModel`` keeps one ``StepTimeParams`` per type (e.g. an H100 compute
profile from ``shared/data/h100/throughput.csv`` combined with a network profile measured elsewhere).
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from types import MappingProxyType
from typing import Mapping

import numpy as np
from scipy.optimize import nnls

from dlsched.perf.efficiency import GradientNoise, efficiency as _efficiency

GAMMA_GRID = (1.0, 1.25, 1.5, 2.0, 2.5, 3.0, 4.0, 5.0, 7.0, 10.0)


# --------------------------------------------------------------------------- Optimus PS models
@dataclass(frozen=True)
class OptimusSyncSpeed:
    """Synchronous PS training speed in steps/s; ``global_batch`` is M (fixed for the job)."""

    theta: tuple[float, float, float, float, float]
    global_batch: float

    def speed(self, ps, workers):
        p, w = np.asarray(ps, dtype=float), np.asarray(workers, dtype=float)
        t = self.theta
        return 1.0 / (t[0] * self.global_batch / w + t[1] + t[2] * w / p + t[3] * w + t[4] * p)


@dataclass(frozen=True)
class OptimusAsyncSpeed:
    """Asynchronous PS training speed in steps/s summed over all workers."""

    theta: tuple[float, float, float, float]

    def speed(self, ps, workers):
        p, w = np.asarray(ps, dtype=float), np.asarray(workers, dtype=float)
        t = self.theta
        return w / (t[0] + t[1] * w / p + t[2] * w + t[3] * p)


def _check_samples(*arrays) -> list[np.ndarray]:
    out = [np.asarray(a, dtype=float) for a in arrays]
    if len({a.shape for a in out}) != 1 or out[0].ndim != 1:
        raise ValueError("speed samples must be 1-D arrays of equal length")
    if any(np.any(~np.isfinite(a)) or np.any(a <= 0) for a in out):
        raise ValueError("ps, workers and speeds must be finite and > 0")
    return out


def fit_optimus_sync(ps, workers, speed, global_batch: float) -> OptimusSyncSpeed:
    """NNLS fit of the sync model on samples (p, w, steps/s); needs ≥ 5 samples for a determined fit."""
    p, w, f = _check_samples(ps, workers, speed)
    A = np.column_stack([global_batch / w, np.ones_like(w), w / p, w, p])
    theta, _ = nnls(A * f[:, None], np.ones_like(f))  # rows scaled by f: (A θ − 1/f)·f = relative error
    return OptimusSyncSpeed(tuple(float(x) for x in theta), float(global_batch))


def fit_optimus_async(ps, workers, speed) -> OptimusAsyncSpeed:
    """NNLS fit of the async model on samples (p, w, steps/s); needs ≥ 4 samples."""
    p, w, f = _check_samples(ps, workers, speed)
    A = np.column_stack([np.ones_like(w), w / p, w, p])
    theta, _ = nnls(A * (f / w)[:, None], np.ones_like(f))
    return OptimusAsyncSpeed(tuple(float(x) for x in theta))


# --------------------------------------------------------------------------- all-reduce model
@dataclass(frozen=True)
class ComputeTime:
    """Per-replica forward+backward time of a local batch m: max(floor, a + b·m) seconds."""

    floor: float
    a: float
    b: float

    def __call__(self, local_batch):
        m = np.asarray(local_batch, dtype=float)
        return np.maximum(self.floor, self.a + self.b * m)


@dataclass(frozen=True)
class NetworkTime:
    """All-reduce time per step: ``single`` for one replica, else α + β·2(r−1)/r + λ·(r−1) for the slowest link."""

    single: float = 0.0
    intra: tuple[float, float, float] = (0.0, 0.0, 0.0)
    inter: tuple[float, float, float] = (0.0, 0.0, 0.0)

    def __call__(self, num_replicas, num_nodes):
        return _network_features(np.asarray(num_replicas, float), np.asarray(num_nodes, float)) @ self.vector()

    def vector(self) -> np.ndarray:
        return np.array([self.single, *self.intra, *self.inter])


def _network_features(r: np.ndarray, n: np.ndarray) -> np.ndarray:
    r, n = np.broadcast_arrays(np.atleast_1d(r), np.atleast_1d(n))
    one = (r <= 1).astype(float)
    intra = ((r > 1) & (n <= 1)).astype(float)
    inter = (n > 1).astype(float)
    ring, hops = 2.0 * (r - 1) / r, r - 1
    return np.column_stack([one, intra, intra * ring, intra * hops, inter, inter * ring, inter * hops])


@dataclass(frozen=True)
class StepTimeParams:
    """Fitted step-time model of one job on one GPU type."""

    compute: ComputeTime
    network: NetworkTime
    gamma: float = 1.0

    def step_time(self, num_replicas, num_nodes, local_batch):
        """Seconds per optimizer step (vectorised)."""
        tc = self.compute(local_batch)
        tn = self.network(num_replicas, num_nodes)
        g = self.gamma
        out = (tc**g + tn**g) ** (1.0 / g)
        scalar = all(np.ndim(x) == 0 for x in (num_replicas, num_nodes, local_batch))
        return float(out[0]) if scalar else out

    def with_compute(self, compute: ComputeTime) -> "StepTimeParams":
        """The same network and overlap with another GPU's compute profile (assumes the same interconnect)."""
        return replace(self, compute=compute)


def fit_compute(local_batch, compute_time) -> ComputeTime:
    """Hinge fit max(floor, a + b·m): try each knee, NNLS line on points at/after it, floor = median before it."""
    m, t = np.asarray(local_batch, float), np.asarray(compute_time, float)
    if len(m) == 0 or np.any(t <= 0) or np.any(m <= 0):
        raise ValueError("compute samples must be non-empty and > 0")
    knots = np.unique(m)
    best, best_err = None, np.inf
    for j, knee in enumerate(knots[:-1] if len(knots) > 1 else knots):
        above = m >= knee
        if j > 0 and ((m < knee).sum() < 2 or np.unique(m[above]).size < 2):
            continue  # a floor needs two points under it and a line two batch sizes over it: no overfitting
        if np.unique(m[above]).size >= 2:
            A = np.column_stack([np.ones(above.sum()), m[above]]) / t[above, None]
            (a, b), _ = nnls(A, np.ones(above.sum()))
        else:
            a, b = float(np.median(t[above])), 0.0
        floor = float(np.median(t[m < knee])) if j > 0 else 0.0
        cand = ComputeTime(floor, float(a), float(b))
        err = float(np.sum((cand(m) / t - 1.0) ** 2))
        if err < best_err * (1 - 1e-9):
            best, best_err = cand, err
    return best


def fit_step_time(num_replicas, num_nodes, local_batch, step_time, sync_time=None) -> StepTimeParams:
    """Fit ``StepTimeParams`` to measured steps. ``sync_time`` (exposed communication) splits compute from
    communication; without it, single-replica steps are taken as pure compute."""
    r, n, m, s = (np.asarray(x, float) for x in (num_replicas, num_nodes, local_batch, step_time))
    if not (r.shape == n.shape == m.shape == s.shape) or r.ndim != 1 or len(r) == 0:
        raise ValueError("step samples must be 1-D arrays of equal, non-zero length")
    if np.any(s <= 0) or np.any(r < 1) or np.any(n < 1) or np.any(n > r):
        raise ValueError("need step_time > 0 and 1 <= num_nodes <= num_replicas")
    if sync_time is None:
        single = r <= 1
        if not single.any():
            raise ValueError("without sync_time, at least one single-replica sample is needed")
        compute = fit_compute(m[single], s[single])
    else:
        y = np.asarray(sync_time, float)
        compute = fit_compute(m, np.maximum(s - y, 1e-9))
    tc = compute(m)
    F = _network_features(r, n)
    present = F.any(axis=0)
    best, best_err = None, np.inf
    for g in GAMMA_GRID:
        tn = np.maximum(s**g - np.minimum(tc, s * (1 - 1e-9)) ** g, 0.0) ** (1.0 / g)
        coef = np.zeros(F.shape[1])
        if present.any():
            sol, _ = nnls(F[:, present] / s[:, None], tn / s)
            coef[present] = sol
        c = [float(x) for x in coef]
        net = NetworkTime(c[0], tuple(c[1:4]), tuple(c[4:7]))
        cand = StepTimeParams(compute, net, g)
        err = float(np.sum((cand.step_time(r, n, m) / s - 1.0) ** 2))
        if err < best_err * (1 - 1e-9):
            best, best_err = cand, err
    return best


@dataclass(frozen=True)
class AllReduceSpeedModel:
    """``ThroughputModel`` (policy/base.py) for one job: samples/s per GPU type, and batch-size efficiency.

    ``profiles`` maps GPU type -> ``StepTimeParams``; ``gpu_type=None`` uses ``default_gpu_type``. Local
    batch = global batch / GPUs (fractional batches are fine for planning). ``noise``/``base_batch`` give
    the statistical efficiency (1.0 when absent).
    """

    profiles: Mapping[str, StepTimeParams]
    default_gpu_type: str
    noise: GradientNoise | None = None
    base_batch: int | None = None
    max_local_batch: float | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "profiles", MappingProxyType(dict(self.profiles)))
        if self.default_gpu_type not in self.profiles:
            raise ValueError(f"default GPU type {self.default_gpu_type!r} has no profile")

    def params(self, gpu_type: str | None = None) -> StepTimeParams:
        key = gpu_type or self.default_gpu_type
        try:
            return self.profiles[key]
        except KeyError:
            raise ValueError(f"no speed profile for GPU type {key!r}; known: {', '.join(sorted(self.profiles))}") from None

    def step_time(self, num_gpus: int, num_nodes: int, global_batch: float, gpu_type: str | None = None) -> float:
        if num_gpus < 1 or not 1 <= num_nodes <= num_gpus:
            raise ValueError(f"need 1 <= num_nodes <= num_gpus, got {num_nodes} nodes, {num_gpus} GPUs")
        return float(self.params(gpu_type).step_time(num_gpus, num_nodes, global_batch / num_gpus))

    def throughput(self, num_gpus: int, num_nodes: int, global_batch: int, gpu_type: str | None = None) -> float:
        """Samples/s of the whole job; 0 where the local batch exceeds ``max_local_batch`` or no GPUs."""
        if num_gpus <= 0:
            return 0.0
        if self.max_local_batch is not None and global_batch / num_gpus > self.max_local_batch + 1e-9:
            return 0.0
        return global_batch / self.step_time(num_gpus, num_nodes, global_batch, gpu_type)

    def efficiency(self, global_batch: int) -> float:
        if self.noise is None or self.base_batch is None:
            return 1.0
        return float(min(1.0, _efficiency(self.noise, max(global_batch, self.base_batch), self.base_batch)))

    def goodput(self, num_gpus: int, num_nodes: int, global_batch: int, gpu_type: str | None = None) -> float:
        """Throughput × efficiency: base-batch samples of progress per second."""
        return self.throughput(num_gpus, num_nodes, global_batch, gpu_type) * self.efficiency(global_batch)


# --------------------------------------------------------------------------- from the shared traces
POLLUX_GPU_TYPE = "T4"  # the Pollux artifact's traces were measured on AWS g4dn.12xlarge nodes (4x T4 each)


def fit_pollux_app(app, gpu_type: str = POLLUX_GPU_TYPE) -> AllReduceSpeedModel:
    """All-reduce model of a ``profile.PolluxApp`` from all its scalability + placements rows.

    Efficiency uses the app's first-epoch gradient noise at its base batch; for progress-dependent
    efficiency use ``efficiency.NoiseTrace`` (``load_noise_trace``) instead.
    """
    d = app.step_samples()
    params = fit_step_time(d.num_replicas, d.num_nodes, d.local_bsz, d.step_time, d.sync_time)
    v = app.validation[app.base_batch].iloc[0]
    return AllReduceSpeedModel({gpu_type: params}, gpu_type, GradientNoise(float(v.grad_sqr), float(v.grad_var)),
                               base_batch=app.base_batch, max_local_batch=app.max_local_batch)


def fit_h100_compute(table, model: str, dataset: str | None = None, precision: str = "fp32") -> ComputeTime:
    """Compute profile of one model on an H100 from ``profile.h100_throughput()`` (single-GPU step times)."""
    g = table[(table.model == model) & (table.precision == precision)]
    if dataset is not None:
        g = g[g.dataset == dataset]
    if g.empty:
        raise ValueError(f"no H100 rows for model={model!r} dataset={dataset!r} precision={precision!r}")
    return fit_compute(g.batch_size, g.step_time)


def with_gpu_type(model: AllReduceSpeedModel, gpu_type: str, compute: ComputeTime) -> AllReduceSpeedModel:
    """Add a GPU type with its own compute profile, keeping the default type's network and overlap
    (an assumption: the same interconnect)."""
    profiles = dict(model.profiles)
    profiles[gpu_type] = model.params().with_compute(compute)
    return replace(model, profiles=profiles)
