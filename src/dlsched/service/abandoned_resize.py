"""A resize the runtime gave up (its ``resize_abandoned`` event): the job trains on as before, so it runs on what it
held (the store, the backend's books and control.json), and the target's GPUs are free again. The next rounds
decide anew, growing it only after a wait (``resize_backoff``).

The notice names the control generation it answers, and waits (``ResizeNotices``) until the store's job is at it: a
round that failed to commit after its resize wrote control.json left the store a generation behind the runtime, and
the retried resize reuses that generation (the runtime ignores it: not higher), so the notice read in between was
dropped as an older request's and the job waited out ``resize_timeout_s``.

A grow the service gives up itself (past ``resize_timeout_s``) has no word from the runtime that its larger group
never formed: the slots it asks back are then ``releasing`` (``slot_holds``) until the runtime confirms."""
from __future__ import annotations

import logging
from pathlib import Path

from dlsched.backends.base import Backend, Launch
from dlsched.service.resize_backoff import ResizeBackoff
from dlsched.service.slot_holds import held_after, taken_back
from dlsched.service.store import RESCALING, RUNNING, JobRecord, Store, on_rollback

log = logging.getLogger("dlsched.service")


def return_to_held(store: Store, backend: Backend, backoff: ResizeBackoff, job: JobRecord, job_dir: Path,
                   reason: str, now: float, unconfirmed: bool = False) -> JobRecord:
    """``job`` (rescaling) back to ``running`` on the GPUs, placement and batch it had before the resize;
    ``unconfirmed``: the runtime did not say it gave the grow up, so the target's extra slots stay held: counted in
    the store (``releasing``, the rounds' view) and booked by number in the backend (``hold_given_back``); else the
    runtime gave the resize up itself, and the slots a shrink gave back are the job's again (``taken_back``)."""
    before = store.last_event(job.id, RESCALING, came_from=RUNNING) or {}
    gpus, batch = job.held_gpus, before.get("batch_from", job.batch_size)
    placement = before.get("placement_from") or ({next(iter(job.placement)): gpus} if len(job.placement) == 1
                                                 else job.placement)
    gen = job.generation + 1
    try:
        backend.resize(Launch(job.id, job.spec, job_dir, gpus, batch, placement, gen, hold_given_back=unconfirmed))
        placement = backend.placement(job.id) or placement   # where its kept workers run (Ray: its first ones)
    except Exception:   # the store still records what trains; only the backend's books keep the target
        log.exception("job %s: giving back an abandoned resize's GPUs failed", job.id)
    store.record_allocation(job.id, now, gpus, batch, placement)
    wait = backoff.abandoned(job.id, now)
    releasing = held_after(job, placement) if unconfirmed else taken_back(job, placement)
    return store.transition(job.id, RUNNING, now, {"reason": f"resize abandoned: {reason}", "gpus": gpus,
                                                   "placement": placement, "no_grow_for_s": wait,
                                                   **({"releasing": releasing} if releasing else {})},
                            num_gpus=gpus, placement=placement, batch_size=batch, generation=gen,
                            training_gpus=None, releasing=releasing)


class ResizeNotices:
    """Each job's newest ``resize_abandoned`` notice, (control generation, reason), until its job reaches that
    generation. An older generation's is moot: a newer request stands."""

    def __init__(self, store: Store):
        self.store = store
        self._notices: dict[int, tuple[int, str]] = {}

    def read(self, job: JobRecord, events: list[dict]) -> None:
        for r in events:
            gen = r.get("control_generation")
            if r["event"] == "resize_abandoned" and type(gen) is int and gen >= job.generation:
                self._notices[job.id] = (gen, str(r.get("reason")))

    def take(self, job: JobRecord) -> str | None:
        """Why the runtime gave up ``job``'s current resize (None: it did not). Given back should the round's
        transaction roll back: its read was stored, and is not read again."""
        notice = self._notices.get(job.id)
        if notice is None or notice[0] > job.generation:
            return None
        del self._notices[job.id]
        on_rollback(self.store, lambda: self._notices.setdefault(job.id, notice))
        return notice[1] if notice[0] == job.generation else None

    def forget(self, job_id: int) -> None:
        self._notices.pop(job_id, None)
