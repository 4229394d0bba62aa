"""After a service restart: re-attach the coordinators still alive, record those that finished or failed meanwhile,
re-queue the others (they resume from their checkpoint when started again). Every state change went through the
store first, so a SIGKILL between any two steps of the loop is recovered here.

Each job is looked for in its own folder (``job_folders``: the one it was started in), never in the current
``--jobs-dir``'s: a restart with another one started a second coordinator of a running job in a new, empty folder.

A re-attached job placed on a node the cluster no longer declares (``known_nodes``), or on one declared with fewer
slots than the jobs re-attached before it and this one hold there, is stopped at a checkpoint and re-queued
(``off_cluster``): it resumes where there are slots.

A re-attached job's backend books come back from its job folder (the local backend's launch.json), the slots held
back from a grow given up (``slot_holds``) with them; the store says whether that hold still stands: the service
may have gone after it recorded the confirming step but before the backend released the slots.

Time: a job that ended while no service watched ended when its folder says (``ended_at``), not when the restart
noticed, and the time it trained meanwhile counts in its ``run_time`` and ``attained_service`` (from the store's
``accounted_until``, where the last service stopped counting). A re-attached job's next round counts it.
"""
from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Callable, Mapping

from dlsched.backends.base import Backend
from dlsched.service.accounting import counted_until
from dlsched.service.ended_status import KILLED, settle_status
from dlsched.service.lost_resize import record_lost_resize
from dlsched.service.off_cluster import over_booked, unknown_nodes
from dlsched.service.store import CANCELLED, FAILED, FINISHED, QUEUED, RESCALING, RUNNING, JobRecord, Store
from dlsched.train.files import open_regular, read_status

log = logging.getLogger("dlsched.service")
TAIL_BYTES = 64 << 10   # the end of progress.jsonl read for its newest time


def recover(store: Store, backend: Backend, job_dir: Callable[[JobRecord], Path],
            ingest: Callable[[JobRecord, float], JobRecord], now: float,
            known_nodes: Mapping[str, int] | None = None) -> None:
    """``ingest`` reads a job's last progress before it is re-queued (what it wrote before the restart);
    ``known_nodes``: the nodes the cluster declares and their slots (None: the backend's live view decides, each
    round)."""
    used: dict[str, int] = {}   # slots of the jobs re-attached so far, per node: the older keep theirs
    for job in store.jobs(states=(QUEUED,)):
        if job.cancel_requested:   # left queued with a cancel pending by an earlier service (see below)
            store.transition(job.id, CANCELLED, now, {"reason": "service restart: cancel requested before it"})
    for job in store.jobs(states=(RUNNING, RESCALING)):
        d = job_dir(job)
        if job.job_dir and str(d) != job.job_dir:   # stored relative by an older dlsched, or moved (job_folders)
            store.update(job.id, job_dir=str(d))
        if backend.attach(job.id, d):
            job = record_lost_resize(store, backend, job, d, now)
            off = unknown_nodes(job, known_nodes) if known_nodes is not None and job.num_gpus else []
            over = over_booked(job, known_nodes, used) if known_nodes is not None and not off else []
            if off or over:
                _stop_off_cluster(store, backend, job, d, off, over, ingest, now)
                continue
            for node, k in job.placement.items():
                used[node] = used.get(node, 0) + k
            if not job.releasing:
                backend.release(job.id, d)
            store.event("reattached", job.id, now)
            continue
        job = ingest(job, now)
        _ended_unwatched(store, backend, job, d, now)


def _ended_unwatched(store: Store, backend: Backend, job: JobRecord, d: Path, now: float,
                     requeue_reason: str = "service restart: resume from checkpoint", **detail) -> None:
    """Record how a job no process of this service runs ended: finished, failed, or gone (re-queued)."""
    res = backend.poll(job.id, d)
    end = ended_at(d, now)
    if job.cancel_requested and res.state != "finished":
        # cancelled, and the service went before it recorded the stop: re-queued, the job sat 'queued' for
        # good (the policy never runs a job with a cancel pending, and nothing else ended it)
        store.transition(job.id, CANCELLED, now, {"reason": "service restart: cancel requested before it"},
                         **counted_until(job, end, now))
        store.record_allocation(job.id, now, 0, job.batch_size, {})
    elif res.state in ("finished", "failed"):
        # ended while no service watched: when its folder says, and the time it trained till then counts
        fields = counted_until(job, end, now)
        until = fields.get("accounted_until", now)
        if res.state == "finished":
            store.transition(job.id, FINISHED, now, {"ended": until, **detail}, end_time=until, **fields)
        else:   # the failure stands, no second run
            store.transition(job.id, FAILED, now, {"error": res.error, "ended": until, **detail}, end_time=until,
                             error=(res.error or "")[:500], **fields)
        store.record_allocation(job.id, until, 0, job.batch_size, {})
    else:
        store.transition(job.id, QUEUED, now, {"reason": requeue_reason, **detail}, num_gpus=0, placement={},
                         **counted_until(job, end, now))
        store.record_allocation(job.id, now, 0, job.batch_size, {})
        settle_status(d, KILLED, f"{requeue_reason}: its coordinator had ended without a word while no service watched")


def _stop_off_cluster(store: Store, backend: Backend, job: JobRecord, d: Path, off: list[str], over: list[str],
                      ingest: Callable[[JobRecord, float], JobRecord], now: float) -> None:
    """A live job on nodes the cluster no longer declares (``off``), or declares with too few slots for it
    (``over``): stopped at a checkpoint (the backend's stop: SIGTERM, the runtime checkpoints and exits), its last
    steps read, re-queued to resume where there are slots."""
    if off:
        why = f"node(s) {', '.join(off)} not in the cluster any more"
        log.warning("job %d runs on node(s) %s, which the cluster declaration no longer has: stopping it at a "
                    "checkpoint; it is re-queued and resumes on the nodes declared", job.id, ", ".join(off))
    else:
        why = f"node(s) {', '.join(over)} declared with fewer slots than its workers there"
        log.warning("job %d runs on node(s) %s, which the cluster declaration now gives fewer slots than its "
                    "workers (and older jobs') there: stopping it at a checkpoint; it is re-queued and resumes "
                    "where there are slots", job.id, ", ".join(over))
    backend.stop(job.id, d)
    job = ingest(job, now)
    _ended_unwatched(store, backend, job, d, now,
                     f"service restart: {why}; stopped at a checkpoint, resumes on the nodes declared",
                     nodes=off or over)


def ended_at(job_dir: Path, now: float) -> float | None:
    """When the job's runtime last wrote its folder: the newest ``time`` among the last records of its
    ``progress.jsonl`` (its steps; the torch runtime's ``finished`` event carries one too), or the write of its
    final ``status.json`` (finished, failed, stopped: the runtime's last act), whichever is later; None where the
    folder records neither. Never later than ``now``."""
    times = []
    try:
        with open_regular(Path(job_dir) / "progress.jsonl") as f:
            size = f.seek(0, os.SEEK_END)
            f.seek(max(0, size - TAIL_BYTES))
            for line in reversed(f.read().splitlines()):
                try:
                    t = json.loads(line).get("time")
                except (ValueError, AttributeError):
                    continue
                if isinstance(t, (int, float)) and not isinstance(t, bool):
                    times.append(float(t))
                    break
    except OSError:
        pass
    if (read_status(job_dir) or {}).get("state") in ("finished", "failed", "stopped"):
        try:
            times.append((Path(job_dir) / "status.json").stat().st_mtime)
        except OSError:
            pass
    return min(max(times), now) if times else None
