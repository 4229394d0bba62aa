"""The store side of one round's actions: every job's state change and allocation in ONE transaction (one fsync).

A queued job the API cancelled after the round read it (``Store.request_cancel`` ends a queued job at once) is
skipped: its cancelled -> running write would be refused and roll back the whole round's writes."""
from __future__ import annotations

from typing import Any, Mapping

from dlsched.service.store import CANCELLED, FAILED, JobRecord, Store

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
