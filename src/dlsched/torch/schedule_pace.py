"""LR schedulers keep their pace in samples when the global batch changes.

A scheduler stepped every batch is sized in steps at the batch the script was written for (the reference
batch): ``OneCycleLR(total_steps=epochs * len(loader))``, a warm-up + cosine ``LambdaLR``. When the
scheduler changes the global batch, a step trains another number of samples: at a larger batch the run
would end with its schedule unfinished (no final anneal), at a smaller one it would step past the end
(``OneCycleLR`` raises). A paced scheduler's own ``step`` runs as often as reference-batch steps fit in the
samples trained: after ``done`` of an epoch's ``N`` samples, ``floor(L·done/N)`` of the epoch's
``L = ceil(N/B₀)`` — exactly once per call at the reference batch, and ``L`` per epoch at any batch.

Only a scheduler stepped inside every training step is paced (with dlsched's gradient accumulation, on
each step's last micro-batch: it does nothing on the others, as the optimizer). One stepped after the
epoch's loop (no step open), or every few steps (the script's own accumulation), keeps its own count:
epochs do not depend on the batch, and an accumulation count is the script's. The scheduler's own
``last_epoch`` carries the count, so nothing is added to the checkpoint.
"""
from __future__ import annotations

import math
from weakref import WeakKeyDictionary

from torch.optim.lr_scheduler import LRScheduler


class SchedulePace:
    def __init__(self, session):
        self.session = session
        self.base: int | None = None      # the scheduler's count before this process's first paced step
        self.last_step: int | None = None  # the session's step at the previous call
        self.every_step = True
        self.after_epochs = False         # stepped after an epoch's loop, outside any step

    def due(self, scheduler: LRScheduler) -> int:
        """How many of the scheduler's own steps this ``step()`` call takes."""
        s, table = self.session, self.session.table
        if s.open is None or table is None:
            self.after_epochs = True
            return 1                      # after the epoch's loop: an epoch scheduler
        if self.last_step is not None and s.step - self.last_step != 1:
            self.every_step = False       # not once per training step: the script's own count
        self.last_step = s.step
        if not self.every_step:
            return 1
        reference = s._reference()
        if self.base is None:
            self.base = scheduler.last_epoch - reference_steps(table, reference, table.consumed - s.open["n"])
        return max(0, self.base + reference_steps(table, reference, table.consumed) - scheduler.last_epoch)


def reference_steps(table, reference: int, done: int) -> int:
    """Steps at the ``reference`` batch the run has taken after ``done`` of the epoch now's samples: all of each
    earlier epoch's ``L = ceil(N/B₀)``, and ``floor(L·done/N)`` of this one's."""
    per_epoch = math.ceil(table.epoch_size / reference)
    earlier = table.epoch * per_epoch if table.steps_before is None else table.steps_before
    return earlier + (per_epoch * done) // table.epoch_size


def next_epoch_table(table, reference: int):
    """``table``'s next epoch. After an epoch a loop broke out of (a step limit), its steps so far are the pace's
    (counted as whole epochs, a scheduler stepped per step jumped by the rest of each epoch at the next one's start:
    OneCycleLR from its 4th step to its 61st)."""
    new = table.next_epoch()
    if new.before is not None:
        new.steps_before = reference_steps(table, reference, table.consumed)
    return new


_paces: WeakKeyDictionary = WeakKeyDictionary()
_paced_classes: dict[type, type] = {}


def _paced_class(cls: type) -> type:
    """``cls`` with a ``step`` that takes as many of its own steps as the pace says (same name: the
    registry and the user see their scheduler)."""
    if cls not in _paced_classes:
        def step(self, epoch=None):
            pace = _paces.get(self)
            if pace is not None and pace.session.micro.accumulating:
                return None  # a micro-batch before its step's last: the optimizer did not step either
            if pace is None or epoch is not None:
                return cls.step(self) if epoch is None else cls.step(self, epoch)
            for _ in range(pace.due(self)):
                cls.step(self)

        _paced_classes[cls] = type(cls.__name__, (cls,), {"step": step, "__module__": cls.__module__,
                                                           "__qualname__": cls.__qualname__})
    return _paced_classes[cls]


def pace_of(scheduler: LRScheduler) -> SchedulePace | None:
    return _paces.get(scheduler)


def pace_schedulers(objects, session) -> None:
    """Pace every LR scheduler among ``objects`` (the session's registered state) but those a ``SequentialLR`` or
    ``ChainedScheduler`` among them steps: paced as well, each took its own pace's steps inside every one of the
    outer one's, so a cosine after a warm-up ran a step ahead from the first batch change on."""
    objects = [o for o in objects if isinstance(o, LRScheduler)]
    inner = {id(c) for o in objects for c in getattr(o, "_schedulers", ())}
    for obj in objects:
        if id(obj) not in inner:
            pace_scheduler(obj, session)


def pace_scheduler(scheduler: LRScheduler, session) -> None:
    """Pace ``scheduler`` by the samples ``session`` trains (idempotent). The class is swapped rather than
    ``step`` set on the instance: ``state_dict()`` saves the instance's attributes, and a function there would
    not pickle into a checkpoint."""
    if scheduler in _paces:
        return
    _paces[scheduler] = SchedulePace(session)
    scheduler.__class__ = _paced_class(type(scheduler))
