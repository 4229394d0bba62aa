"""What a scheduling round records for an action that raised: one job's failure never stops the service.

A grow whose reservation timed out changed nothing (a backend's grow is all or nothing: the Ray backend reserves
every newcomer's slot before it touches the job): the job trains on at its size, with a ``grow_unreserved`` event,
and grows again only after a wait (``resize_backoff``). Before, it was stopped and failed: a round's view that still
listed a node Ray had just declared dead cost the job its life. A start whose reservation timed out stays queued
(``coordinator_loss.after_failed_start``), as does one whose job folder's disk is full; a resize that could not write
the job's folder (its disk full) stops the job and re-queues it (it failed the job for good); anything else fails
the job."""
from __future__ import annotations

import logging
from pathlib import Path

from dlsched.backends.base import Backend
from dlsched.errors import UserError
from dlsched.round import Action, Resize, Start
from dlsched.service.coordinator_loss import after_failed_start
from dlsched.service.event_kinds import GROW_UNRESERVED
from dlsched.service.resize_backoff import ResizeBackoff
from dlsched.service.store import FAILED, QUEUED, JobRecord, Store
from dlsched.train.no_space import is_no_space

log = logging.getLogger("dlsched.service")


def after_failed_action(store: Store, backend: Backend, backoff: ResizeBackoff, job: JobRecord, act: Action,
                        job_dir: Path, error: Exception, now: float) -> list[tuple[int, str, dict, dict]]:
    """The round's writes for ``act`` on ``job`` that raised ``error`` (none: the job stands as it was). Logged: a full
    disk in one line (a start is tried once a round while it lasts: a traceback each was 25 lines a second of the
    service's log, 2 500 for one job's wait), a refusal (``UserError``: the job's code checked again) in its one line,
    anything else with its traceback."""
    what = type(act).__name__.lower()
    if is_no_space(error):
        log.warning("job %s: %s failed: its folder's disk is full (%s)", job.id, what, error)
    elif isinstance(error, UserError):
        log.warning("job %s: %s failed: %s", job.id, what, error)
    else:
        log.error("job %s: %s failed", job.id, what, exc_info=error)
    if isinstance(act, Resize) and act.num_gpus > job.num_gpus and isinstance(error, TimeoutError):
        wait = backoff.abandoned(job.id, now)
        store.event(GROW_UNRESERVED, job.id, now, gpus_from=job.num_gpus, gpus=act.num_gpus, error=str(error),
                    no_grow_for_s=wait)
        return []
    backend.stop(job.id, job_dir)
    if isinstance(act, Start):
        return [(job.id, *after_failed_start(store, job.id, error, now))]
    if is_no_space(error):   # control.json not written: no fault of the job's; stopped, it resumes from its checkpoint
        reason = f"{what} failed: the job folder's disk is full ({error}); resume from checkpoint"
        return [(job.id, QUEUED, {"reason": reason}, {"num_gpus": 0, "placement": {}})]
    return [(job.id, FAILED, {"reason": f"{what} failed: {error}"}, {"error": str(error)[:500]})]
