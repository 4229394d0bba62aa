"""How long a grow (or a move, or a batch change) may take before the service gives it up (``resize_timeout_s``).

A new worker that crashes in start-up is reported by the runtime (``resize_abandoned``); one that hangs in its
preparation never is, and the job stayed ``rescaling`` with the target's GPUs reserved for good. Past the deadline
the service abandons the grow itself (``abandoned_resize``): the job goes back to the GPUs it trains on, and the
runtime, seeing that newer request while its newcomers still prepare, kills them (or, had it formed the larger group
already, shrinks back); the slots it asked back stay out of the rounds until the runtime confirms (``slot_holds``).

The clock starts at the grow's request, its ``rescaling`` event in the store: the runtime keeps trying across a
service restart, so a restart does not start the wait over (a service restarted more often than the timeout never
gave a hanging grow up).
"""
from __future__ import annotations

from dlsched.service.store import RESCALING, JobRecord, Store


class ResizeDeadline:
    def __init__(self, timeout_s: float, store: Store) -> None:
        self.timeout_s = timeout_s
        self.store = store

    def overdue(self, job: JobRecord, now: float) -> str | None:
        """Why ``job``'s grow (or move, or batch change) is given up at ``now`` (past the deadline), else None."""
        if job.state != RESCALING or job.num_gpus < job.held_gpus:   # a shrink's slots are held till it is done
            return None
        since = self.store.rescale_started(job.id)
        if since is None or now - since < self.timeout_s:
            return None
        return (f"not done within resize_timeout_s={self.timeout_s:g} s "
                f"(the runtime did not confirm the new size in time)")
