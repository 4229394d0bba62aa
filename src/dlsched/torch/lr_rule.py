"""The LR rule applied when the global batch differs from the batch the script's LR is given at.

The script's own LR (and its scheduler) stays the LR at the reference batch; each optimizer step runs at
``lr x factor`` and the group's LR is put back afterwards, so schedulers never see the factor.

* ``linear`` (Goyal et al.): factor = B / B_ref. SGD's factor moves there over ``RAMP_STEPS`` steps with
  momentum compensation (Lin et al., algorithms.md §6.3): the momentum buffer is rescaled by f_old/f_new so
  the accumulated velocity is not amplified.
* ``sqrt`` (Malladi et al. 2022, for adaptive optimizers): factor = sqrt(B / B_ref); Adam-family default,
  applied at once (their update is normalised per coordinate, there is no velocity to compensate).
* ``adascale`` (Johnson et al. 2020): factor = the gain r = (tr(Σ)/B_ref + |G|²)/(tr(Σ)/B + |G|²) from the
  measured gradient noise; linear until noise is measured.
* ``none``: factor 1.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from dlsched.torch.noise import GradientNoiseEstimator

RULES = ("auto", "linear", "sqrt", "adascale", "none")
RAMP_STEPS = 8  # Lin et al.'s T


def default_rule(optimizer: torch.optim.Optimizer) -> str:
    return "sqrt" if "adam" in type(optimizer).__name__.lower() else "linear"


def target_factor(rule: str, batch: int, reference: int, noise: GradientNoiseEstimator) -> float:
    scale = batch / reference
    if rule == "none":
        return 1.0
    if rule == "sqrt":
        return math.sqrt(scale)
    if rule == "adascale" and noise.measured:
        var = max(noise.trace, 0.0)
        denom = var / batch + noise.sqr
        return (var / reference + noise.sqr) / denom if denom > 0 else scale
    return scale


@dataclass
class LrFactor:
    """The factor in force per step: ramps from ``start`` to ``target`` over ``ramp`` steps from step ``t0``;
    ``batch`` is the global batch it was set for (0: not set yet)."""

    start: float = 1.0
    target: float = 1.0
    t0: int = 0
    ramp: int = 0
    batch: int = 0

    def at(self, step: int) -> float:
        done = (step - self.t0) / self.ramp if self.ramp else 1.0
        return self.target if done >= 1 else self.start + max(done, 0.0) * (self.target - self.start)

    def retarget(self, step: int, target: float, ramp: int, batch: int) -> "LrFactor":
        return LrFactor(self.at(step), target, step, ramp if self.batch else 0, batch)


def compensate_momentum(optimizer: torch.optim.Optimizer, old_factor: float, new_factor: float) -> None:
    """SGD keeps v with w -= lr·v: scale v by f_old/f_new so lr·v stays continuous (Lin et al. form (4))."""
    if old_factor == new_factor or new_factor <= 0:
        return
    for group in optimizer.param_groups:
        for p in group["params"]:
            buf = optimizer.state.get(p, {}).get("momentum_buffer")
            if buf is not None:
                buf.mul_(old_factor / new_factor)
