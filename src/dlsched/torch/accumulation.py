"""Gradient accumulation: a step's local share as micro-batches, and the user's calls that wait for the last.

When a rank's share of the global batch exceeds ``max_local_batch`` (what one forward/backward should hold),
the loader yields the share as ``k`` micro-batches, one optimizer step in all (AdaptDL's accumulation steps,
petuum/adaptdl ``adaptdl/torch/data.py``). Every rank runs the same ``k`` (DDP all-reduces on the last one
only: ``no_sync`` before it). The user's loop stays as it is: on the micro-batches before the last,
``optimizer.step``, the LR scheduler's ``step`` and a GradScaler's ``unscale_``/``step``/``update`` do
nothing, and ``zero_grad`` does nothing once a micro-batch of the step has run forward (so it may sit at the
top of the loop or after the step). ``loader.accumulating`` tells the script the same, for anything else
that must see the whole gradient (gradient clipping).
"""
from __future__ import annotations

import functools
import math
import time

import numpy as np
import torch

from dlsched.train.data import _share_ends


def micro_count(n: int, local_sizes: list[int], max_local_batch: int | None) -> int:
    """Micro-batches per rank for an ``n``-sample global batch: enough that the largest share fits, and no
    more than the smallest share has samples (every rank runs the same count, none runs an empty one)."""
    if not max_local_batch:
        return 1
    shares = np.diff([0, *_share_ends(n, local_sizes)])
    return max(1, min(math.ceil(int(shares.max()) / max_local_batch), int(shares.min())))


def split_share(mine: list[int], count: int) -> list[list[int]]:
    """A rank's share as ``count`` consecutive micro-batches of near-equal size."""
    return [piece.tolist() for piece in np.array_split(np.asarray(mine, dtype=np.int64), count)]


class MicroBatches:
    """Where the loader is within the open step's micro-batches (one of one without accumulation)."""

    def __init__(self):
        self.max_local_batch: int | None = None  # the loader's; None: no accumulation
        self.index, self.count, self.size = 0, 1, 0  # the micro-batch out now: which, of how many, its samples
        self.forwarded = 0  # micro-batches of the open step whose training forward has run
        self.no_sync_s = 0.0  # seconds the open step's micro-batches before the last took (no all-reduce)
        self._began = 0.0

    def begin(self, index: int, count: int, size: int) -> None:
        now = time.perf_counter()
        if index == 0:
            self.forwarded, self.no_sync_s = 0, 0.0
        else:
            self.no_sync_s += now - self._began
        self.index, self.count, self.size, self._began = index, count, size, now

    def reset(self) -> None:
        """No step open: the gates let every call through."""
        self.index, self.count, self.size, self.forwarded, self.no_sync_s = 0, 1, 0, 0, 0.0

    @property
    def unfinished(self) -> bool:
        """Some micro-batches of the open step trained, not all: its optimizer step has not run."""
        return 0 < self.forwarded < self.count

    @property
    def accumulating(self) -> bool:
        """The micro-batch out now is not its step's last: its gradient waits for the others."""
        return self.index < self.count - 1

    @property
    def keeps_gradients(self) -> bool:
        """Gradients of this step's micro-batches are partly in: ``zero_grad`` would lose them."""
        return 0 < self.forwarded < self.count


def _gate(obj, name: str, when) -> None:
    """``obj.name`` does nothing while ``when()``: an instance attribute, as torch's own LR schedulers wrap
    ``optimizer.step``, so the class stays the user's."""
    method = getattr(obj, name)

    @functools.wraps(method)  # its attributes too: an LR scheduler's mark that it wrapped step stays visible
    def gated(*args, **kwargs):
        return None if when() else method(*args, **kwargs)
    setattr(obj, name, gated)


def gate(obj, micro: MicroBatches) -> None:
    """Gate a registered optimizer or GradScaler (anything else is left alone)."""
    if isinstance(obj, torch.optim.Optimizer):
        _gate(obj, "step", lambda: micro.accumulating)
        _gate(obj, "zero_grad", lambda: micro.keeps_gradients)
    elif isinstance(obj, torch.amp.GradScaler):
        for name in ("unscale_", "step", "update"):
            _gate(obj, name, lambda: micro.accumulating)
