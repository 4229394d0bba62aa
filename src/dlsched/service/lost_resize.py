"""A resize the runtime was sent but the store never recorded: the service wrote control.json (a resize's request)
and went before the round's transaction committed. The runtime acts on the file (a level, read whatever became of
the service), so after the restart it trained on the request's workers while the store kept the old books: a grow
lost this way left its new slots booked free, and the next round started a queued job on them (3 workers on 2
slots; on GPUs two processes on one device).

On re-attaching such a job, the restart records the request as the lost round would have (``rescaling`` to the
request's size, on the slots the backend booked for it), and the runtime's next step under it confirms it as any
resize."""
from __future__ import annotations

from pathlib import Path

from dlsched.backends.base import Backend
from dlsched.errors import UserError
from dlsched.service.slot_holds import held_after
from dlsched.service.store import RESCALING, JobRecord, Store
from dlsched.train.files import read_control


def record_lost_resize(store: Store, backend: Backend, job: JobRecord, job_dir: Path, now: float) -> JobRecord:
    """``job`` as the store books it once a request in ``job_dir``'s control.json newer than its generation is
    recorded (unchanged where there is none)."""
    try:
        ctl = read_control(job_dir)
    except UserError:   # not the service's write: the runtime refuses it too
        return job
    placed = backend.booked(job.id)
    if ctl is None or ctl.generation <= job.generation or not placed or sum(placed.values()) != ctl.workers:
        return job
    batch = ctl.batch_size or job.batch_size
    releasing = held_after(job, placed) or None
    with store.batch():   # and its allocation row, as the lost round's write had (the Gantt showed no grow)
        rec = store.transition(job.id, RESCALING, now,
                               {"gpus_from": job.held_gpus, "gpus": ctl.workers, "batch_size": batch,
                                "placement_from": job.placement, "batch_from": job.batch_size,
                                "reason": "service restart: a resize it had sent but not recorded",
                                **({"releasing": releasing} if releasing else {})},
                               num_gpus=ctl.workers, placement=placed, batch_size=batch, generation=ctl.generation,
                               training_gpus=job.held_gpus, releasing=releasing)
        store.record_allocation(job.id, now, ctl.workers, batch, dict(placed))
    return rec
