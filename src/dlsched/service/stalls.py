"""A running job whose processes live but whose steps stopped coming: a hung worker (a deadlock, a dead NFS mount, a
stopped process), a collective waiting on a peer that will never answer.

The backend sees live processes, so such a job stayed ``running`` for good, holding its GPUs, with the speed and
finish of its last step: a job whose worker was SIGSTOPped showed 1006 samples/s and "6 min left" ten minutes after
its last step, and nothing anywhere said it had stopped. The service cannot tell a hang from a slow step, so it
stops nothing; it says so, as Kubernetes marks a pod whose liveness probe fails before anyone acts on it:

* a running job whose last new progress (or its start) is older than the cluster's ``stall_after_s``
  gets ``stalled_since`` (``dlsched show``, ``status``'s REASON, the dashboard) and one ``stalled`` event;
* progress again clears it, with one ``progressing`` event saying for how long it was stalled;
* before its first step since it started or resumed (a large model built, its data loaded, a checkpoint read: a
  first step that took 15 minutes is no hang) the bound is the cluster's ``first_step_after_s`` (if longer). Kept in
  memory: a service restarted meanwhile holds the jobs it re-attaches to ``stall_after_s``, so it may mark one still
  in its first step early, never a hang late.

The time is counted on the loop's clock (``progressed_at`` is when the loop read the progress, not the job's own
record times), so a job's clock or a slow shared mount cannot make it look stalled or alive; and on this process's
monotonic clock too, so a wall clock stepped forward (NTP, a VM resumed) past ``stall_after_s`` does not mark every
running job stalled at once.
"""
from __future__ import annotations

import time
from typing import Callable

from dlsched.service.store import RUNNING, JobRecord, Store

STALLED, PROGRESSING = "stalled", "progressing"


class StallWatch:
    def __init__(self, after_s: float, store: Store, monotonic: Callable[[], float] = time.monotonic,
                 first_step_s: float = 0.0):
        self.after_s, self.store, self.monotonic = after_s, store, monotonic
        self.first_step_s = max(after_s, first_step_s)
        self._seen: dict[int, float] = {}   # job -> monotonic time of its last progress (or first look) here
        self._starting: set[int] = set()    # jobs started here that have not stepped since

    def started(self, job_id: int) -> None:
        """The job was started (or resumed): until its first step it is held to ``first_step_s``."""
        self._starting.add(job_id)
        self._seen.pop(job_id, None)

    def progressed(self, job: JobRecord, now: float) -> dict:
        """The fields to store with a job's new progress (it read some this round); a stalled job is so no more."""
        self._seen[job.id] = self.monotonic()
        self._starting.discard(job.id)
        if job.stalled_since is not None:
            self.store.event(PROGRESSING, job.id, now, stalled_s=round(now - job.stalled_since, 1))
        return {"progressed_at": now, "stalled_since": None}

    def check(self, job: JobRecord, now: float) -> None:
        """After its progress was read this round: a running job the backend reports alive, quiet past ``after_s``, is
        marked stalled (once). A rescaling one is not: a resize has its own deadline (``resize_deadline.py``)."""
        if job.stalled_since is not None or job.state != RUNNING:
            return
        if job.progressed_at is None:   # started before the store kept it: counted from now
            self.store.update(job.id, progressed_at=now)
            return
        quiet, seen = now - job.progressed_at, self._seen.setdefault(job.id, self.monotonic())
        after_s = self.first_step_s if job.id in self._starting else self.after_s
        if quiet > after_s and self.monotonic() - seen > after_s:
            self.store.update(job.id, stalled_since=job.progressed_at)
            self.store.event(STALLED, job.id, now, since=job.progressed_at, quiet_s=round(quiet, 1),
                             samples=job.samples, stall_after_s=after_s)
