"""After a service restart: re-attach the coordinators still alive, record those that finished or failed meanwhile,
re-queue the others (they resume from their checkpoint when started again). Every state change went through the
store first, so a SIGKILL between any two steps of the loop is recovered here.

A re-attached job's backend books come back from its job folder (the local backend's launch.json), the slots held
back from a grow given up (``slot_holds``) with them; the store says whether that hold still stands: the service
may have gone after it recorded the confirming step but before the backend released the slots."""
from __future__ import annotations

from pathlib import Path
from typing import Callable

from dlsched.backends.base import Backend
from dlsched.service.store import CANCELLED, FAILED, FINISHED, QUEUED, RESCALING, RUNNING, JobRecord, Store


def recover(store: Store, backend: Backend, job_dir: Callable[[int], Path],
            ingest: Callable[[JobRecord, float], JobRecord], now: float) -> None:
    """``ingest`` reads a job's last progress before it is re-queued (what it wrote before the restart)."""
    for job in store.jobs(states=(QUEUED,)):
        if job.cancel_requested:   # left queued with a cancel pending by an earlier service (see below)
            store.transition(job.id, CANCELLED, now, {"reason": "service restart: cancel requested before it"})
    for job in store.jobs(states=(RUNNING, RESCALING)):
        d = job_dir(job.id)
        if backend.attach(job.id, d):
            if not job.releasing:
                backend.release(job.id, d)
            store.event("reattached", job.id, now)
            continue
        ingest(job, now)
        res = backend.poll(job.id, d)
        if job.cancel_requested and res.state != "finished":
            # cancelled, and the service went before it recorded the stop: re-queued, the job sat 'queued' for
            # good (the policy never runs a job with a cancel pending, and nothing else ended it)
            store.transition(job.id, CANCELLED, now, {"reason": "service restart: cancel requested before it"})
            store.record_allocation(job.id, now, 0, job.batch_size, {})
        elif res.state == "finished":
            store.transition(job.id, FINISHED, now)
        elif res.state == "failed":   # failed while the service was down: the failure stands, no second run
            store.transition(job.id, FAILED, now, {"error": res.error}, error=(res.error or "")[:500])
            store.record_allocation(job.id, now, 0, job.batch_size, {})
        else:
            store.transition(job.id, QUEUED, now, {"reason": "service restart: resume from checkpoint"},
                             num_gpus=0, placement={})
            store.record_allocation(job.id, now, 0, job.batch_size, {})
