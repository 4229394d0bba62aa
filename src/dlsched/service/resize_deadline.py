"""How long a grow may take before the service gives it up (``resize_timeout_s`` of the cluster file).

A new worker that crashes in start-up is reported by the runtime (``resize_abandoned``); one that hangs in its
preparation never is, and the job stayed ``rescaling`` with the target's GPUs reserved for good. Past the deadline
the service abandons the grow itself (``abandoned_resize``): the job goes back to the GPUs it trains on, and the
runtime, seeing that newer request while its newcomers still prepare, kills them. The clock starts at the first
round that sees the grow; kept in memory, so a restarted service starts it again.
"""
from __future__ import annotations

from dlsched.service.store import RESCALING, JobRecord


class ResizeDeadline:
    def __init__(self, timeout_s: float) -> None:
        self.timeout_s = timeout_s
        self._since: dict[int, float] = {}   # job -> when a round first saw its current grow

    def overdue(self, job: JobRecord, now: float) -> str | None:
        """Why ``job``'s grow is given up at ``now`` (past the deadline), else None."""
        if job.state != RESCALING or job.num_gpus <= job.held_gpus:   # shrinks free GPUs: nothing waits on them
            self._since.pop(job.id, None)
            return None
        since = self._since.setdefault(job.id, now)
        if now - since < self.timeout_s:
            return None
        del self._since[job.id]
        return (f"not done within resize_timeout_s={self.timeout_s:g} s "
                f"(its new workers did not become ready in time)")

    def forget(self, job_id: int) -> None:
        self._since.pop(job_id, None)
