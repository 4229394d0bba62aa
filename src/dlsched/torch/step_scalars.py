"""A sync step's all-reduce of the step scalars (several workers), started as soon as they are final.

The scalars (stop flag, local |g|², rank 0's plan...) are final once the optimizer step begins, so the optimizer's
pre-hook starts the all-reduce and the step boundary only waits for it: its latency hides behind the optimizer step.
Started at the boundary instead, the wait for the peer and for gloo's thread to wake the training thread was the
dearest part of a sync (and measured) step: ~2.4 ms of wall beside ~0.25 ms of CPU, 2 workers on 2 busy cores.
It starts at the boundary still when no optimizer step ran (a GradScaler skipped it; none registered) or when the
step trains more than one optimizer (a second model's backward may follow the first optimizer's step).
"""
from __future__ import annotations

from typing import Callable

import torch
import torch.distributed as dist


class StepScalars:
    def __init__(self):
        self._pending: tuple | None = None  # (async work, the tensor it reduces in place)

    def start(self, values: list[float]) -> None:
        on_gpu = dist.get_backend() == "nccl"   # NCCL reduces GPU tensors only: this worker's own GPU then
        tensor = torch.tensor(values, dtype=torch.float64, device=torch.cuda.current_device() if on_gpu else "cpu")
        self._pending = (dist.all_reduce(tensor, async_op=True), tensor)

    def before_optimizer_step(self, s) -> None:
        """The optimizer pre-hook (after the noise measurement): start the open sync step's all-reduce."""
        step_open = s.open
        if (self._pending is None and step_open is not None and step_open["sync"] and s.world > 1
                and len(s.registry.optimizers()) == 1):
            self.start(s.extras(step_open))

    def summed(self, values: Callable[[], list[float]]) -> list[float]:
        """Every rank's step scalars added up (``values()``: this rank's, when nothing started them early)."""
        if self._pending is None:
            self.start(values())
        (work, tensor), self._pending = self._pending, None
        work.wait()
        return tensor.tolist()
