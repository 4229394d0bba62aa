"""Where a training group starts: fresh, or from a checkpoint, and what a re-run's command changes in that."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from dlsched.train.data import PartitionTable
from dlsched.train.job import TrainJob
from dlsched.train.scaling import BatchMode, LrRamp


@dataclass(frozen=True)
class StartState:
    """Where a group starts: fresh, or the latest checkpoint (``restore``, a path or URI) in its storage."""

    restore: str | None
    step: int
    table: PartitionTable | None  # None: a script's fresh start (its loader builds the table)
    global_batch: int | None  # None: the script's own batch
    ramp: LrRamp | None  # None: a script applies its own LR rule
    epoch_loss: tuple[float, int]
    finished: bool


def fresh_start(job: TrainJob | None, batch_size: int | None, batch_mode: BatchMode, workers: int,
                reference_batch: int | None) -> StartState:
    if job is None:
        return StartState(None, 0, None, batch_size, None, (0.0, 0), False)
    gb = batch_size or job.batch_size
    if batch_mode == BatchMode.FIXED_LOCAL and not batch_size:
        gb = job.batch_size * workers
    reference = reference_batch or job.batch_size  # the batch the job's lr is given at
    return StartState(None, 0, PartitionTable.fresh(job.num_samples, job.seed, 0), gb,
                      LrRamp(base_lr=job.lr * gb / reference), (0.0, 0), False)


def resumed_start(restore: str, state: dict, job: TrainJob | None) -> StartState:
    table, ramp = state["table"], state["ramp"]
    table = table and PartitionTable.from_snapshot(table)
    ramp = ramp and LrRamp(**ramp)
    if state["finished"] and trains_on(job, table):   # more epochs than it ended at: the next one, from its start
        return StartState(restore, state["step"], table.next_epoch(), state["global_batch"], ramp, (0.0, 0), False)
    return StartState(restore, state["step"], table, state["global_batch"], ramp, tuple(state["epoch_loss"]),
                      state["finished"])


def trains_on(job: TrainJob | None, table: PartitionTable | None) -> bool:
    """A finished job re-run with more epochs (``--param epochs=N``) trains on from where it ended: it said
    "already finished; nothing to train", and more epochs meant starting over in a new folder. One that ended at
    its ``target_loss`` has reached what it was for."""
    return job is not None and table is not None and job.target_loss is None and table.epoch + 1 < job.epochs


def at_asked_batch(start: StartState, batch_size: int | None) -> StartState:
    """A resumed run at the batch its command asks for (``--batch-size``: the user's re-run, a backend's launch);
    the checkpoint's batch was kept and the request silently dropped. The LR follows as on a resize: a ramp from
    the last step's LR by the batch rule. At the run's start, and at a worker loss's restart with the batch the lost
    group trained at (a control.json request may have changed it since the checkpoint)."""
    if start.restore is None or not batch_size or start.global_batch == batch_size:
        return start
    # a script's checkpoint (global_batch None: its loader's) has no ramp: its session applies the LR rule
    ramp = start.ramp and start.ramp.rescaled(start.ramp.lr(start.step - 1), start.global_batch, batch_size,
                                              start.step)
    return dataclasses.replace(start, global_batch=batch_size, ramp=ramp)
