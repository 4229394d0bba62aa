"""The LR a script's own schedulers will set over the rest of its budget, found by stepping copies of them on a
stand-in optimizer: the service's loss prediction then knows the decay still to come (``service.refit``) without
the user stating the schedule. Written as ``DIR/lr_plan.json`` by rank 0 at a process's third step, once the
schedulers' pace is known (``schedule_pace``). Only schedulers stepped once per training step are planned: an
epoch scheduler, ``ReduceLROnPlateau`` (it follows a metric) or a run without an epoch budget gets no plan."""
from __future__ import annotations

import copy
import logging
import math
import time
import warnings

import numpy as np
import torch
from torch.optim.lr_scheduler import LRScheduler, ReduceLROnPlateau

from dlsched.torch.schedule_pace import pace_of
from dlsched.train.files import atomic_write_json

log = logging.getLogger("dlsched.torch")

MAX_STEPS = 200_000   # a copy steps in ~3 µs: at most ~0.6 s, once per process
POINTS = 400          # evenly spaced, plus both sides of every jump (a step decay's milestones stay exact)
MAX_JUMPS = 200
PLAN_AT_STEP = 3      # of this process: two calls have told each scheduler's pace


def planned_lrs(optimizer: torch.optim.Optimizer, schedulers: list[LRScheduler], steps: int) -> np.ndarray:
    """The first param group's LR at each of the next ``steps`` steps (the first: the LR now), as the schedulers
    stepped after every step set it; shorter where a scheduler refuses to step further (``OneCycleLR``'s end)."""
    stand_in = torch.optim.SGD([{**{k: v for k, v in g.items() if k != "params"}, "params": [torch.zeros(1)]}
                                for g in optimizer.param_groups])
    clones = [_clone(s, stand_in) for s in schedulers]
    lrs = [float(stand_in.param_groups[0]["lr"])]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")   # "scheduler.step() before optimizer.step()": the stand-in never steps
        try:
            for _ in range(steps - 1):
                for c in clones:
                    c.step()
                lrs.append(float(stand_in.param_groups[0]["lr"]))
        except (ValueError, ZeroDivisionError, IndexError):
            pass
    return np.array(lrs)


def _clone(scheduler: LRScheduler, optimizer: torch.optim.Optimizer) -> LRScheduler:
    """``scheduler`` on ``optimizer``: its attributes copied one level deep (its LR lists), the schedulers it
    sequences or chains cloned onto the same optimizer. Its class stays (a paced one steps once: no pace)."""
    c = object.__new__(type(scheduler))
    c.__dict__.update({k: copy.copy(v) for k, v in scheduler.__dict__.items()})
    c.optimizer = optimizer
    if isinstance(getattr(scheduler, "_schedulers", None), (list, tuple)):
        c._schedulers = [_clone(s, optimizer) for s in scheduler._schedulers]
    return c


def knots(lrs: np.ndarray) -> np.ndarray:
    """Indices that draw ``lrs`` piecewise-linearly: evenly spaced ones and both sides of each jump."""
    idx = set(np.linspace(0, len(lrs) - 1, min(POINTS, len(lrs))).round().astype(int).tolist())
    if len(lrs) > 1:
        jumps = np.flatnonzero(np.abs(np.diff(lrs)) > 1e-3 * max(float(np.abs(lrs).max()), 1e-30))
        if len(jumps) <= MAX_JUMPS:
            idx.update(jumps.tolist())
            idx.update((jumps + 1).tolist())
    return np.array(sorted(idx))


class LrPlanner:
    """Writes the session's plan once per process."""

    def __init__(self):
        self.steps_seen = 0
        self.done = False

    def after_step(self, s) -> None:
        self.steps_seen += 1
        if self.done or self.steps_seen < PLAN_AT_STEP:
            return
        self.done = True
        try:
            plan = self.plan(s)
        except Exception:   # a scheduler the copy cannot step: no plan (the service uses the logged LR), training goes on
            log.warning("no LR plan: the schedulers could not be stepped on a copy", exc_info=True)
            return
        if plan is not None:
            atomic_write_json(s.job_dir / "lr_plan.json", plan)

    @staticmethod
    def plan(s) -> dict | None:
        """``{"step", "batch_size", "steps", "lr"}``: the LR (after the LR rule for the batch now) at session
        steps after ``step``, to the end of the epoch budget; None where the schedulers cannot be planned."""
        table, optimizers = s.table, s.registry.optimizers()
        if table is None or not s.epochs or not optimizers:
            return None
        opt = optimizers[0]
        schedulers = [o for o in s.objects.values() if isinstance(o, LRScheduler) and o.optimizer is opt]
        inner = {id(c) for x in schedulers for c in getattr(x, "_schedulers", ())}   # a SequentialLR steps its own
        schedulers = [x for x in schedulers if id(x) not in inner]
        if not schedulers or any(isinstance(x, ReduceLROnPlateau) for x in schedulers):
            return None
        paces = [pace_of(x) for x in schedulers]
        if any(p is None or p.last_step is None or not p.every_step for p in paces):
            return None
        reference = s._reference()
        per_epoch = math.ceil(table.num_samples / reference)
        done = table.epoch * per_epoch + (per_epoch * table.consumed) // table.num_samples
        left = s.epochs * per_epoch - done
        if not 0 < left <= MAX_STEPS:
            return None
        lrs = planned_lrs(opt, schedulers, left) * s.factor.at(s.step)
        at = knots(lrs)
        # reference-batch step i comes after i·B₀/B steps at the batch B now (the pace counts samples)
        x = s.step + 1 + at * reference / s.global_batch
        return {"time": time.time(), "step": s.step, "batch_size": s.global_batch,
                "steps": [round(float(v), 3) for v in x], "lr": [float(v) for v in lrs[at]]}
