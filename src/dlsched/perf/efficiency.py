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
is read from the validation traces (``perf.pollux.TraceApp``).

Data: ``shared/data/pollux/traces/<app>/validation-*.csv`` (columns progress, grad_sqr, grad_var).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from dlsched.errors import plain


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
        raise ValueError(f"batch and base_batch must be > 0, got batch={plain(batch)!r}, "
                         f"base_batch={plain(base_batch)!r}")
    denom = noise.var / scale + noise.sqr
    gain = np.where(denom > 0, (noise.var + noise.sqr) / np.where(denom > 0, denom, 1.0), 1.0)
    return float(gain) if np.ndim(gain) == 0 else gain


def efficiency(noise: GradientNoise, batch, base_batch: float):
    """Statistical efficiency gain/scale of ``batch`` relative to ``base_batch`` (1 at the base batch)."""
    scale = np.asarray(batch, dtype=float) / float(base_batch)
    eff = np.asarray(progress_gain(noise, batch, base_batch)) / scale
    return float(eff) if np.ndim(eff) == 0 else eff
