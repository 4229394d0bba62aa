"""A standalone script's records on the user's terminal (``python train.py``, outside the scheduler).

Every event, and the step records at a cadence that shows a short run whole and a long one sparsely: each of
the first 10 steps, every 10th to step 100, every 50th after, any step 10 s after the last line, and the last
step before each event (an epoch's last step before its ``epoch_end``, the step an evaluation follows), so every
epoch's final loss and LR are shown however few steps it has.
"""
from __future__ import annotations

import json
import time

SHOWN = ("event", "step", "epoch", "loss", "lr", "metrics", "mean_loss", "from_batch", "to_batch", "goodput",
         "efficiency", "rule", "factor", "ramp_steps")
QUIET_S = 10.0   # a slow run still shows a step this often


def step_due(step: int) -> bool:
    every = 1 if step <= 10 else 10 if step <= 100 else 50
    return step % every == 0


class TerminalEcho:
    def __init__(self):
        self.held: dict | None = None   # the newest step not shown yet: shown before the next event
        self.shown_at = time.monotonic()

    def emit(self, record: dict) -> None:
        if "event" not in record:
            if step_due(record["step"]) or time.monotonic() - self.shown_at >= QUIET_S:
                self._show(record)
            else:
                self.held = record
            return
        self.flush()
        self._show(record)

    def flush(self) -> None:
        """Show the held step: the last one the run trained, at its end."""
        if self.held is not None:
            self._show(self.held)

    def _show(self, record: dict) -> None:
        if "event" not in record:
            self.held = None
        self.shown_at = time.monotonic()
        print("dlsched:", json.dumps({k: v for k, v in record.items() if k in SHOWN}), flush=True)
