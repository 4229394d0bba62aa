"""``POST /jobs/{id}/members/{name}/cancel``: one member of an ensemble leaves, the others train on. The request is a
store event and a line of the job folder's ``cancel_members.json``, which the FLEET runtime polls
(``train/member_cancel.py``); a queued ensemble reads it when it starts again."""
from __future__ import annotations

from pathlib import Path

from dlsched.service.fleet_status import LEFT, ensemble_of
from dlsched.service.job_folders import job_folder
from dlsched.service.store import ACTIVE, Store
from dlsched.train.member_cancel import request_member_cancel


class MemberCancelRefused(Exception):
    """``status``: the HTTP status; the message names the job, the member and why."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def cancel_member(store: Store, job_id: int, member: str, jobs_root: Path | None, now: float | None = None) -> dict:
    """Ask ``member`` of ensemble ``job_id`` to leave; ``MemberCancelRefused`` where it cannot: not an ensemble (409),
    ended (409), its members not profiled yet (409: no folder, no names), no such member (404), already left (409)."""
    job = store.get(job_id)
    if job.spec.kind != "ensemble":
        raise MemberCancelRefused(409, f"job {job_id} is not an ensemble (kind {job.spec.kind}): it has no members")
    if job.state not in ACTIVE:
        raise MemberCancelRefused(409, f"job {job_id} already {job.state}; nothing to cancel")
    members = ensemble_of(store, job_id)["members"]
    if not members or job.job_dir is None:
        raise MemberCancelRefused(409, f"job {job_id} has not profiled its members yet: cancel {member!r} once "
                                       "`dlsched status` lists them")
    if member not in members:
        raise MemberCancelRefused(404, f"member {member!r}: job {job_id} has no such member (it has "
                                       f"{', '.join(sorted(members))})")
    if members[member] in LEFT:
        raise MemberCancelRefused(409, f"member {member!r} of job {job_id} already left ({members[member]})")
    request_member_cancel(job_folder(job, jobs_root), member)
    store.event("member_cancel_requested", job_id, now, member=member)
    return {"id": job_id, "member": member, "state": members[member], "cancel_requested": True}
