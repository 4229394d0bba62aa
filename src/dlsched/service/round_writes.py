"""The store side of one round's actions: every job's state change and allocation in ONE transaction (one fsync).

A queued job the API cancelled after the round read it (``Store.request_cancel`` ends a queued job at once) is
skipped: its cancelled -> running write would be refused and roll back the whole round's writes."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Mapping

from dlsched.backends.base import Backend, read_status
from dlsched.round import Resize, Start
from dlsched.service.slot_holds import held_after
from dlsched.service.store import CANCELLED, FAILED, QUEUED, RESCALING, RUNNING, JobRecord, Store

# (job id, new state, event detail, fields to update[, when: a start's own time, else the round's])
Write = tuple[Any, ...]


def record_round(store: Store, writes: list[Write], jobs: Mapping[int, JobRecord], now: float) -> list[int]:
    """Apply ``writes``; the ids of the jobs cancelled since the round read them, whose writes were skipped."""
    withdrawn = []
    with store.batch():
        for job_id, state, detail, fields, *when in writes:
            if store.get(job_id).state == CANCELLED:
                withdrawn.append(job_id)
                continue
            at = when[0] if when else now
            store.transition(job_id, state, at, detail, **fields)
            gpus = fields.get("num_gpus", 0) if state != FAILED else 0
            store.record_allocation(job_id, at, gpus, fields.get("batch_size", jobs[job_id].batch_size),
                                    dict(fields.get("placement", {})))
    return withdrawn


def stopped_finished(backend: Backend, job_id: int, job_dir: Path) -> bool:
    """Stop the job; whether its runtime had written ``finished`` before the stop (its process still tearing down:
    an ensemble's flotillas). Such a job trained to its end: the poll records it finished
    (``backends.base.ended_unwatched``), not re-queued (started again to say it had finished) nor cancelled."""
    backend.stop(job_id, job_dir)
    return (read_status(job_dir) or {}).get("state") == "finished"


def preempt_write(backend: Backend, job: JobRecord, job_dir: Path, read: Callable[[], object]) -> Write | None:
    """Stop ``job`` and ``read`` what it wrote until it stopped (its last steps, its checkpoint: a queued job's
    records were read only when it started again, its DONE stale meanwhile); its re-queue write, or None where its
    runtime had finished before the stop (``stopped_finished``): the next round's poll records the finish."""
    finished = stopped_finished(backend, job.id, job_dir)
    read()
    return None if finished else (job.id, QUEUED, {"reason": "preempted"}, {"num_gpus": 0, "placement": {}})


def start_write(job: JobRecord, act: Start, placed: dict, job_dir, at: float) -> Write:
    """A start's write, stamped ``at`` (its launch, not the round's start). ``placed``: where the backend booked it;
    on a node that died since the view, the next round moves it."""
    gen = job.generation + 1
    return (job.id, RUNNING, {"gpus": act.num_gpus, "batch_size": act.batch_size,
                              **({"placed": placed} if placed != act.nodes else {})},
            {"num_gpus": act.num_gpus, "placement": placed, "batch_size": act.batch_size, "generation": gen,
             "job_dir": str(job_dir), "accounted_until": at, "progressed_at": at}, at)


def resize_write(job: JobRecord, act: Resize, placed: dict) -> Write:
    """A resize's (or move's) write. ``placed``: Ray's shrink keeps the runtime's first workers wherever they run, not
    the nodes asked. The ``*_from`` fields are what a resize the runtime abandons returns to; a shrink or move holds
    the slots it leaves (``releasing``) until the new group steps (``slot_holds``)."""
    releasing = held_after(job, placed) or None
    return (job.id, RESCALING, {"gpus_from": job.num_gpus, "gpus": act.num_gpus, "batch_size": act.batch_size,
                                "placement_from": job.placement, "batch_from": job.batch_size,
                                **({"placed": placed} if placed != act.nodes else {}),
                                **({"releasing": releasing} if releasing else {})},
            {"num_gpus": act.num_gpus, "placement": placed, "batch_size": act.batch_size,
             "generation": job.generation + 1, "training_gpus": job.held_gpus, "releasing": releasing})
