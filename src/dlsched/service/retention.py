"""How long an ended job's detail stays in the store: a service that runs for months stored a row for every
training step of every job (a day at a step a second is 86 400 rows a job), every event and every prediction, and
deleted none, so its database only grew. With the cluster's ``retain_ended_days``, once an hour the jobs that ended
longer ago than that lose their step rows, events and predictions (``store.purge_ended``); what ``dlsched history``
shows of them, their allocations and the finished fits the predictor learns from stay. The job folders (the
user's checkpoints and logs) are never touched, but for an active job's rotated progress segments the service has
stored (``progress_segments.py``, passed in). One ``purged`` event says what went."""
from __future__ import annotations

from dlsched.service.progress_segments import SegmentRetention
from dlsched.service.store import Store, purge_ended

PURGED = "purged"
EVERY_S = 3600.0   # purging is cheap, but there is nothing to gain by doing it more often


class Retention:
    def __init__(self, store: Store, days: float | None, segments: SegmentRetention | None = None):
        self.store, self.keep_s = store, None if days is None else days * 86_400.0
        self.last: float | None = None
        self.segments = segments

    def maybe_purge(self, now: float) -> dict[str, int] | None:
        """Purge when an hour passed since the last time (or this is the first round); the counts, or None. The
        segments' own pass (hourly too) first."""
        if self.segments is not None:
            self.segments.maybe_trim(now)
        if self.keep_s is None or (self.last is not None and now - self.last < EVERY_S):
            return None
        self.last = now
        counts = purge_ended(self.store, now - self.keep_s)
        if any(counts.values()):
            self.store.event(PURGED, None, now, ended_before=now - self.keep_s, **counts)
        return counts
