"""How long a stop (a preemption, a cancel) waits for a job's runtime before it kills it.

On SIGTERM the workers finish the step in flight and rank 0 checkpoints it (``train/coordinator.py``); a kill before
that loses every step since the last checkpoint. The wait was a fixed 10 s: on a loaded 2-core machine the demo's
ResNet-20 took 20-30 s a step, its preemption was a kill mid-step, and it restarted from step 0 ("restarted from the
beginning (no checkpoint)"), 4 minutes of training gone and its predicted finish with them. The wait now covers the
job's own steps as its log times them, within a bound: the scheduling round waits on it.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np

from dlsched.train.files import open_regular
from dlsched.train.progress_log import LIVE

GRACE_MAX_S = 120.0   # a round waits on the stop: at most this, whatever the step
STEP_MARGIN = 2.0     # the step in flight, then its checkpoint (about a step's work again, at most)
TAIL_BYTES = 64 << 10
STEPS = 8             # the newest steps' gaps: their median (a restart's gap is not a step)


def newest_step_s(job_dir: Path) -> float | None:
    """The median time between the job's newest step records (None: fewer than two)."""
    try:
        with open_regular(Path(job_dir) / LIVE) as f:
            size = f.seek(0, os.SEEK_END)
            f.seek(max(0, size - TAIL_BYTES))
            lines = f.read().splitlines()
    except OSError:
        return None
    times = []
    for line in reversed(lines):
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if isinstance(rec, dict) and "event" not in rec and isinstance(rec.get("time"), (int, float)):
            times.append(float(rec["time"]))
            if len(times) > STEPS:
                break
    gaps = -np.diff(times)
    gaps = gaps[np.isfinite(gaps) & (gaps > 0)]
    return float(np.median(gaps)) if gaps.size else None


def stop_grace(job_dir: Path, floor_s: float) -> float:
    """``floor_s``, plus STEP_MARGIN of the job's newest steps where it has any; at most GRACE_MAX_S (or ``floor_s``,
    where that is more)."""
    step = newest_step_s(job_dir)
    return floor_s if step is None else max(floor_s, min(GRACE_MAX_S, floor_s + STEP_MARGIN * step))
