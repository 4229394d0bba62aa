"""Statistical efficiency of a batch size, from the gradient noise scale (Pollux, OSDI'21).

Why: a larger global batch M makes each step worth more than one step at the initial batch M0, but less
than M/M0 of them once the batch outgrows the gradient noise. Pollux (repo petuum/adaptdl, branch
osdi21-artifact, ``adaptdl/adaptdl/goodput.py`` and ``simulator/``) measures per-epoch gradient statistics
``grad_sqr`` (|E g|²) and ``grad_var`` (trace of the per-sample-at-M0 gradient covariance) and defines,
with ``scale = M / M0``::

    gain(M)       = (var + sqr) / (var / scale + sqr)     # progress per step, in steps at M0
    efficiency(M) = gain(M) / scale                        # in (0, 1], 1 at M = M0

so goodput = throughput × efficiency, and a job's progress is counted in *steps at M0* (the
``progress`` column of ``validation-<M>.csv`` equals epochs × steps per epoch at M0). Per epoch the noise
is read from the validation trace of the two validated batch sizes around M, linearly interpolated, as
the artifact's simulator does; the epoch reached at a given progress is the furthest that any batch
size's trace has reached (also as there).

Data: ``shared/data/pollux/traces/<app>/validation-*.csv`` (columns progress, grad_sqr, grad_var).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from dlsched.errors import UserError


@dataclass(frozen=True)
class GradientNoise:
    """Gradient statistics measured at the base batch: ``sqr`` = |E g|², ``var`` = gradient variance."""

    sqr: float
    var: float

    def noise_scale(self, base_batch: float) -> float:
        """Pollux's gradient noise scale (PGNS) var/sqr·M0, in samples; inf when the gradient is pure noise."""
        return float("inf") if self.sqr <= 0 else self.var / self.sqr * base_batch


def progress_gain(noise: GradientNoise, batch, base_batch: float):
    """Progress of one step at global batch ``batch`` measured in steps at ``base_batch`` (≥ 1 for batch ≥ base).

    Vectorised over ``batch``. When both statistics are 0 (nothing measured) the gain is 1.
    """
    scale = np.asarray(batch, dtype=float) / float(base_batch)
    if np.any(scale <= 0):
        raise ValueError(f"batch and base_batch must be > 0, got batch={batch!r}, base_batch={base_batch!r}")
    denom = noise.var / scale + noise.sqr
    gain = np.where(denom > 0, (noise.var + noise.sqr) / np.where(denom > 0, denom, 1.0), 1.0)
    return float(gain) if np.ndim(gain) == 0 else gain


def efficiency(noise: GradientNoise, batch, base_batch: float):
    """Statistical efficiency gain/scale of ``batch`` relative to ``base_batch`` (1 at the base batch)."""
    scale = np.asarray(batch, dtype=float) / float(base_batch)
    eff = np.asarray(progress_gain(noise, batch, base_batch)) / scale
    return float(eff) if np.ndim(eff) == 0 else eff


@dataclass(frozen=True)
class NoiseTrace:
    """Per-epoch gradient noise of one workload at each validated global batch size.

    ``batches`` ascending; ``sqr``/``var`` have shape (len(batches), epochs); ``epoch_end[e]`` is the
    progress (steps at ``base_batch``) at which epoch e ends for every batch size (their minimum).
    ``epoch_reached[b, e]`` is the same per batch size, used to map progress to an epoch.
    """

    base_batch: int
    batches: tuple[int, ...]
    epoch_reached: np.ndarray
    sqr: np.ndarray
    var: np.ndarray

    @property
    def epochs(self) -> int:
        return self.sqr.shape[1]

    def epoch_at(self, progress: float) -> int:
        """Epoch index (0-based) a job at ``progress`` is in: the furthest any batch size's trace has reached."""
        e = max(int(np.searchsorted(row, progress, side="right")) for row in self.epoch_reached)
        return min(e, self.epochs - 1)

    def noise(self, batch: float, epoch: int) -> GradientNoise:
        """Noise during ``epoch`` at global ``batch``, interpolated linearly between validated batch sizes."""
        b = np.asarray(self.batches, dtype=float)
        if not b[0] <= batch <= b[-1]:
            raise ValueError(f"batch {batch} outside the validated range [{self.batches[0]}, {self.batches[-1]}]")
        e = min(max(int(epoch), 0), self.epochs - 1)
        return GradientNoise(float(np.interp(batch, b, self.sqr[:, e])), float(np.interp(batch, b, self.var[:, e])))

    def noise_at(self, progress: float, batch: float) -> GradientNoise:
        return self.noise(batch, self.epoch_at(progress))

    def efficiency_at(self, progress: float, batch: float) -> float:
        """Statistical efficiency of ``batch`` at a job's current ``progress`` (the simulator's question)."""
        return efficiency(self.noise_at(progress, batch), batch, self.base_batch)

    def gain_at(self, progress: float, batch: float) -> float:
        return progress_gain(self.noise_at(progress, batch), batch, self.base_batch)


def load_noise_trace(app_dir: str | Path, max_epochs: int | None = None) -> NoiseTrace:
    """Build a ``NoiseTrace`` from the ``validation-<M>.csv`` files of a Pollux trace folder.

    ``max_epochs`` truncates every curve (default: the shortest file, or the artifact's app table).
    """
    from dlsched.perf.profile import POLLUX_MAX_EPOCHS, read_validation

    app_dir = Path(app_dir)
    frames = read_validation(app_dir, ["progress", "grad_sqr", "grad_var"],
                             nonnegative=["progress", "grad_sqr", "grad_var"])
    batches = tuple(sorted(frames))
    n = min([len(df) for df in frames.values()] + [max_epochs or POLLUX_MAX_EPOCHS.get(app_dir.name, 10**9)])
    get = lambda col: np.array([frames[m][col].to_numpy(float)[:n] for m in batches])  # noqa: E731
    return NoiseTrace(batches[0], batches, get("progress"), get("grad_sqr"), get("grad_var"))
