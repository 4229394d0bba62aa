"""How long the service waits before growing a job again whose last grows the runtime abandoned.

A new worker that crashes in start-up crashes again on the next try: without a wait the policy re-asked for the
same grow every round, and the runtime started (and lost) a worker every few seconds for the rest of the job.
The wait doubles with each abandonment of the job, from ``FIRST_S`` up to ``MAX_S``; a grow that completes
clears it. Kept in memory: a restarted service tries once more at once.
"""
from __future__ import annotations

FIRST_S = 15.0
MAX_S = 300.0


class ResizeBackoff:
    def __init__(self) -> None:
        self._until: dict[int, tuple[float, float]] = {}   # job -> (no grow before, the wait that set it)

    def abandoned(self, job_id: int, now: float) -> float:
        """A grow of the job was abandoned at ``now``: the wait before the next (returned, for the event)."""
        _, last = self._until.get(job_id, (0.0, 0.0))
        wait = min(MAX_S, 2 * last) if last else FIRST_S
        self._until[job_id] = (now + wait, wait)
        return wait

    def holds(self, job_id: int, now: float) -> bool:
        return now < self._until.get(job_id, (0.0, 0.0))[0]

    def forget(self, job_id: int) -> None:
        self._until.pop(job_id, None)
