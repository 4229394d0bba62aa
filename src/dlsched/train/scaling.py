"""Batch-size adaptation when the worker count or the requested batch changes.

* fixed-global: the global batch B stays; rank r gets ``B // n + (B % n > r)`` (Or et al.'s split).
* fixed-local: each worker keeps its local batch b; the global batch becomes ``b * n``.
* A change of the global batch by a factor k scales the LR linearly (η → kη), but smoothly:
  Lin et al.'s momentum compensation γ_t = 1 + ((t − t0)/T)(k − 1) for t − t0 < T, else k, T = 8
  (algorithms.md §6.3). The update is their form (4), v ← μv + γ_t·η_old·g, w ← w − v, which in
  PyTorch's SGD (form 3, buffer u = v/η) means rescaling the momentum buffer by η_prev/η_new whenever
  the LR changes, so the accumulated velocity is never amplified.
* A local batch above the memory limit is computed as several micro-batches (gradient accumulation).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from enum import Enum
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # an annotation only: `dlsched train` checks its --batch-mode with this module before torch loads
    import torch

COMPENSATION_STEPS = 8  # T in Lin et al. "works well in practice"


class BatchMode(str, Enum):
    FIXED_GLOBAL = "fixed-global"
    FIXED_LOCAL = "fixed-local"


def local_batch_sizes(global_batch: int, workers: int) -> list[int]:
    """Or et al.'s split of a global batch: ``B // n + (B % n > r)`` for rank r."""
    return [global_batch // workers + (global_batch % workers > r) for r in range(workers)]


def global_batch_after_resize(mode: BatchMode, global_batch: int, old_workers: int, new_workers: int) -> int:
    if mode == BatchMode.FIXED_GLOBAL:
        return global_batch
    local = max(1, global_batch // old_workers)
    return local * new_workers


def micro_batches(local_batch: int, max_local_batch: int | None) -> list[int]:
    """Sizes of the accumulation chunks for one local batch under a per-worker memory limit."""
    if not max_local_batch or local_batch <= max_local_batch:
        return [local_batch]
    chunks = math.ceil(local_batch / max_local_batch)
    return [local_batch // chunks + (local_batch % chunks > i) for i in range(chunks)]


@dataclass(frozen=True)
class LrRamp:
    """LR schedule after a batch change at step t0 from base LR η_old by factor k (Lin et al. eq. 6)."""

    base_lr: float
    k: float = 1.0
    t0: int = 0
    T: int = COMPENSATION_STEPS

    def gamma(self, t: int) -> float:
        dt = t - self.t0
        if dt < 0:
            return 1.0
        return 1.0 + (dt / self.T) * (self.k - 1.0) if dt < self.T else self.k

    def lr(self, t: int) -> float:
        return self.base_lr * self.gamma(t)

    @property
    def target_lr(self) -> float:
        return self.base_lr * self.k

    def rescaled(self, current_lr: float, old_batch: int, new_batch: int, t0: int) -> "LrRamp":
        """New ramp for a change old_batch → new_batch at step t0, starting from the LR in use now."""
        return LrRamp(base_lr=current_lr, k=new_batch / old_batch, t0=t0, T=self.T)


def set_lr_compensated(optimizer: torch.optim.Optimizer, new_lr: float) -> None:
    """Set the LR keeping the velocity η·u continuous: u ← u·η_prev/η_new (form (4) on torch SGD)."""
    for group in optimizer.param_groups:
        old = group["lr"]
        if old == new_lr:
            continue
        if old > 0:
            for p in group["params"]:
                buf = optimizer.state.get(p, {}).get("momentum_buffer")
                if buf is not None:
                    buf.mul_(old / new_lr)
        group["lr"] = new_lr
