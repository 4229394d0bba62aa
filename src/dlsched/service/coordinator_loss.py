"""A job whose coordinator is gone (SIGKILL, the OOM killer, its node lost), or never came (its reservation timed
out), is re-queued a bounded number of times, so a job that loses its coordinator every time ends with a clear
error; its next start resumes from the newest valid checkpoint."""
from __future__ import annotations

from pathlib import Path

from dlsched.backends.base import PollResult
from dlsched.service.ended_status import KILLED, settle_status
from dlsched.service.event_kinds import START_NO_SPACE, START_UNRESERVED
from dlsched.service.store import FAILED, QUEUED, Store
from dlsched.train.no_space import is_no_space

MAX_COORDINATOR_LOSSES = 3   # resumes after a lost coordinator (killed, OOM, node lost) before the job fails
# starts refused because a lost node's coordinator still held the job folder until its guard (or, on NFS, its
# lock lease) ended it: no loss, so counted apart; each waits fence.CLAIM_WAIT_S for the lock, so ~3 minutes
MAX_FENCED_STARTS = 18
# starts whose reservation timed out: the round's view had the GPUs, the cluster did not (a node dying as the job
# was placed, slots held outside dlsched); the next round places it on what is left
MAX_UNRESERVED_STARTS = 3
# starts that found the job folder's disk full: one a round, so a few minutes of a full disk at the default interval
MAX_NO_SPACE_STARTS = 100


def resume_or_fail(store: Store, job_id: int, gone: PollResult, now: float, job_dir: Path | None = None) -> None:
    """Re-queue the job (its next start resumes from the checkpoint), or fail it once over its bound; its folder's
    status.json, left ``running`` by the coordinator that died, then says which (``ended_status.py``)."""
    key, limit = ("fenced", MAX_FENCED_STARTS) if gone.fenced else ("coordinator_lost", MAX_COORDINATOR_LOSSES)
    count = store.count_events(job_id, QUEUED, key) + 1
    why = gone.error or "coordinator vanished"
    if count > limit:
        what = "fenced" if gone.fenced else "coordinator lost"
        error = f"{why}: {what} {count} times, gave up after {limit} resumes (see the job's output.log)"
        store.transition(job_id, FAILED, now, {"error": error}, error=error)
        state, said = FAILED, error
    else:
        store.transition(job_id, QUEUED, now, {"reason": f"{why}: resume from checkpoint", key: count},
                         num_gpus=0, placement={})
        state, said = KILLED, f"{why}; the service re-queued the job: its next start resumes from its last checkpoint"
    if job_dir is not None and not gone.fenced:   # a fenced start's folder is the live holder's
        settle_status(job_dir, state, said)


def after_failed_start(store: Store, job_id: int, error: Exception, now: float) -> tuple[str, dict, dict]:
    """The job's write for a start that raised: a reservation timeout, or a job folder whose disk is full (it failed
    the job for good, and a moment's full disk every job it re-queued), leaves it queued (bounded; the event says so,
    as queued -> queued is no transition; ``waiting_for`` says it in ``status``), anything else fails it."""
    if is_no_space(error) and store.count_events(job_id, START_NO_SPACE, "error") < MAX_NO_SPACE_STARTS:
        store.event(START_NO_SPACE, job_id, now, error=f"the job folder's disk is full: {error}")
        return QUEUED, {}, {"num_gpus": 0, "placement": {}, "waiting_for": "room on its folder's disk (full)"}
    if isinstance(error, TimeoutError) and \
            store.count_events(job_id, START_UNRESERVED, "error") < MAX_UNRESERVED_STARTS:
        store.event(START_UNRESERVED, job_id, now, error=str(error))
        return QUEUED, {}, {"num_gpus": 0, "placement": {},
                            "waiting_for": "GPUs (its last start's reservation timed out)"}
    return FAILED, {"reason": f"start failed: {error}"}, {"error": str(error)[:500]}
