"""Cancelling one member of a running ensemble: the service writes ``DIR/cancel_members.json`` ``{"members": [names]}``
(``dlsched cancel JOB --member NAME``), the FLEET runtime (``fleet_job``) polls it while its flotillas train. A
member named there stops at its next step, checkpointed, and leaves as ``cancelled`` (``member_converged`` with
``reason: cancelled``, its best validation accuracy so far); the others are re-formed without it, and its slots go
back to the cluster as a converged member's do."""
from __future__ import annotations

import json
from pathlib import Path

from dlsched.train.files import atomic_write_json, read_regular

CANCEL_FILE = "cancel_members.json"


def cancelled_members(job_dir: Path) -> frozenset[str]:
    """The members cancelled so far; none where the file is missing or malformed. The service writes it, but in a folder
    job code writes: read as the service reads the job's own records (``read_regular``: a FIFO put in its place blocked
    the API thread of a member's cancel for good, a huge file was read whole)."""
    try:
        raw = json.loads(read_regular(Path(job_dir) / CANCEL_FILE))
    except (OSError, ValueError):
        return frozenset()
    names = raw.get("members") if isinstance(raw, dict) else None
    return frozenset(n for n in names if isinstance(n, str)) if isinstance(names, list) else frozenset()


def request_member_cancel(job_dir: Path, member: str) -> None:
    """Add ``member`` to the job folder's cancelled members (a level: a request is never lost to a later one)."""
    atomic_write_json(Path(job_dir) / CANCEL_FILE, {"members": sorted(cancelled_members(job_dir) | {member})})
