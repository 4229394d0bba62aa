"""A running job's ``run_time`` and ``attained_service`` (GPU-seconds held: ``dlsched history``'s GPU-TIME): counted
up to the store's ``accounted_until``, so time the job trained while no service watched it counts too.

The loop counted each round's interval since its own previous round: a restarted service's first round counted
nothing, and a job that finished while the service was down kept the ``run_time`` of the last round seen before
it went (its ``end_time`` the moment the restart noticed). Now each round counts from the job's ``accounted_until``
(``since_counted``); ``recovery`` counts a job that ended unwatched up to when its folder says it ended
(``counted_until``)."""
from __future__ import annotations

from typing import Callable

from dlsched.service.store import JobRecord


class RoundGap:
    """The loop's previous round: its wall time, and the time this process saw pass since (``monotonic``)."""

    def __init__(self, monotonic: Callable[[], float]):
        self.monotonic = monotonic
        self.last_wall: float | None = None
        self.last_mono: float | None = None

    def since_last(self, now: float) -> tuple[float | None, float | None]:
        """(the previous round's wall time, the monotonic seconds since it); None, None at the first round."""
        mono = self.monotonic()
        gap = (self.last_wall, None if self.last_mono is None else mono - self.last_mono)
        self.last_wall, self.last_mono = now, mono
        return gap

    def since_round(self, elapsed: float | None) -> float | None:
        """``elapsed`` (``since_last``'s, at this round's start) plus the time seen to pass since: a cancel's stop
        takes seconds, and its job is counted to the stop's end."""
        return None if elapsed is None or self.last_mono is None else elapsed + self.monotonic() - self.last_mono


def since_counted(job: JobRecord, now: float, last: float | None, elapsed: float | None = None) -> dict:
    """The store fields that count ``job``'s time from its ``accounted_until`` (else the loop's previous round
    ``last``; a store from before that column) to ``now``, at the GPUs it trained on (``held_gpus``).

    ``elapsed``: the time this process saw pass since ``last`` (its monotonic clock). Where the job was counted up to
    that round or later, at most that is counted: a wall clock stepped forward (NTP, a VM resumed, whose processes
    were stopped too) charged every running job the jump, and Tiresias demoted them all for it."""
    since = job.accounted_until if job.accounted_until is not None else last
    dt = 0.0 if since is None else max(0.0, now - since)
    if elapsed is not None and last is not None and since is not None and since >= last:
        dt = min(dt, max(0.0, elapsed - (since - last)))
    return {"attained_service": job.attained_service + dt * job.held_gpus, "run_time": job.run_time + dt,
            "accounted_until": now if since is None else max(now, since)}


def counted_until(job: JobRecord, until: float | None, now: float) -> dict:
    """The store fields that count the time ``job`` ran unwatched, from where the last service stopped counting
    (``accounted_until``) to ``until`` (at most ``now``); none where either is unknown (a store from before that
    column: its last service's count stands)."""
    if job.accounted_until is None or until is None:
        return {}
    until = min(max(until, job.accounted_until), now)
    gap = until - job.accounted_until
    return {"run_time": job.run_time + gap, "attained_service": job.attained_service + gap * job.held_gpus,
            "accounted_until": until}


def counted_to_end(job: JobRecord, counted: dict, end: float | None, now: float) -> dict:
    """The fields that count ``job`` (as the store had it before this round's ``counted``, which counts it to
    ``now``) only up to ``end``, when its runtime ended (its folder says: ``recovery.ended_at``); {} where that
    counts no less. The round that notices the end comes late: an interval later, more on a loaded box or a
    locked store, and all of it was charged at the job's GPUs."""
    fields = counted_until(job, end, now)
    return fields if fields and fields["run_time"] < counted["run_time"] else {}
