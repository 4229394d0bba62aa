"""The LR a script's own schedulers will set over the rest of its budget, found by stepping copies of them on a
stand-in optimizer: the service's loss prediction then knows the decay still to come (``service.refit``) without
the user stating the schedule. Written as ``DIR/lr_plan.json`` by rank 0 once per process, once the schedulers'
pace is known (``schedule_pace``): stepped once per training step, or once after each epoch. Schedulers stepped
every few steps, a mix of both kinds, ``ReduceLROnPlateau`` (it follows a metric) or a run without an epoch budget
get no plan."""
from __future__ import annotations

import copy
import logging
import math
import time
import warnings

import numpy as np
import torch
from torch.optim.lr_scheduler import LRScheduler, ReduceLROnPlateau

from dlsched.torch.schedule_pace import pace_of, reference_steps
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
    """Writes the session's plan once per process, once its schedulers' pace is known: from its third step for
    schedulers stepped in every step, from the first step after an epoch's end for epoch schedulers."""

    def __init__(self):
        self.steps_seen = 0
        self.first_epoch: int | None = None
        self.done = False

    def after_step(self, s) -> None:
        self.steps_seen += 1
        if self.done or self.steps_seen < PLAN_AT_STEP:
            return
        try:
            plan = self._plan_when_known(s)
        except Exception:   # a scheduler the copy cannot step: no plan (the service uses the logged LR), training goes on
            log.warning("no LR plan: the schedulers could not be stepped on a copy", exc_info=True)
            self.done = True
            return
        if plan is not None:
            atomic_write_json(s.job_dir / "lr_plan.json", plan)

    def _plan_when_known(self, s) -> dict | None:
        found = self.schedulers(s)
        if self.first_epoch is None and s.table is not None:
            self.first_epoch = s.table.epoch
        if found is None and s.table is not None and s.table.epoch < self.first_epoch + 2:
            return None                   # not known yet: an epoch scheduler is first stepped at the epoch's end
        self.done = True
        return self.plan(s, *found) if found else None

    @staticmethod
    def schedulers(s) -> tuple | None:
        """(optimizer, its outermost schedulers, stepped after each epoch?) once every one of them was stepped in
        this process, all per step or all per epoch; () when there is nothing to plan; None while unknown."""
        optimizers = s.registry.optimizers()
        if s.table is None or not s.epochs or not optimizers:
            return ()
        opt = optimizers[0]
        found = [o for o in s.objects.values() if isinstance(o, LRScheduler) and o.optimizer is opt]
        inner = {id(c) for x in found for c in getattr(x, "_schedulers", ())}   # a SequentialLR steps its own
        found = [x for x in found if id(x) not in inner]
        if not found or any(isinstance(x, ReduceLROnPlateau) for x in found):
            return ()
        paces = [pace_of(x) for x in found]
        if any(p is None for p in paces):
            return ()
        kinds = {(p.last_step is not None and p.every_step, p.after_epochs) for p in paces}
        if kinds == {(True, False)}:
            return opt, found, False
        if kinds == {(False, True)}:
            return opt, found, True
        if any(p.after_epochs or p.last_step is not None for p in paces):
            return ()                     # mixed, or stepped every few steps: not planned
        return None

    @staticmethod
    def plan(s, opt, schedulers: list[LRScheduler], after_epochs: bool) -> dict | None:
        """``{"step", "batch_size", "samples", "lr_factor", "steps", "lr"}``: the LR (after the LR rule's
        ``lr_factor`` for the batch now) at session steps after ``step`` (``samples`` trained by its end), to the end
        of the epoch budget; None beyond ``MAX_STEPS``."""
        table, batch, factor = s.table, s.global_batch, s.factor.at(s.step)
        if after_epochs:   # one LR an epoch: the epoch now's, then each later one's, at its first and last step
            left = s.epochs - table.epoch
            lrs = planned_lrs(opt, schedulers, left) * factor
            per_epoch = math.ceil((table.cut or table.epoch_size) / batch)   # a step limit cut the epoch before
            start = s.step - math.ceil(table.consumed / batch)    # this epoch's first step is start + 1
            ends = sorted({1, per_epoch})
            x = [start + e * per_epoch + k for e in range(len(lrs)) for k in ends]
            lr = [float(v) for v in lrs for _ in ends]
            keep = [i for i, v in enumerate(x) if v > s.step]
            x, lr = [x[i] for i in keep], [lr[i] for i in keep]
        else:
            reference = s._reference()
            left = s.epochs * math.ceil(table.epoch_size / reference) - reference_steps(table, reference, table.consumed)
            if left > MAX_STEPS:
                return None
            lrs = planned_lrs(opt, schedulers, left) * factor
            at = knots(lrs)
            # reference-batch step i comes after i·B₀/B steps at the batch B now (the pace counts samples)
            x = (s.step + 1 + at * reference / batch).tolist()
            lr = [float(v) for v in lrs[at]]
        if not x:
            return None
        # samples: the pace counts them, so the plan in samples holds at any later batch (``service.progress_axis``)
        return {"time": time.time(), "step": s.step, "batch_size": batch,
                "samples": table.trained, "lr_factor": factor,
                "steps": [round(float(v), 3) for v in x], "lr": lr}
