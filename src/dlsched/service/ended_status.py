"""A job folder's ``status.json`` made to say how its run ended, where its coordinator died without writing it.

The coordinator writes ``running`` at its start and its end state last; one SIGKILLed (the OOM killer, a grace
period's end, its node lost) leaves ``running`` and a dead pid for good: the folder said the job trained while the
service had re-queued it (or, past its resumes, failed it), and whoever read the folder (a user, a script of theirs)
was told it ran. Once the service has recorded what it found, the file says it: ``killed`` (re-queued, its next
start resumes from its last checkpoint, and that run writes its own status) or ``failed``, ``error`` saying why,
every other field as the run left it (a re-run reads its ``program``, ``strategy`` and ``generation``).

Only a ``running`` status whose pid no longer runs here is rewritten: a folder another live coordinator holds (a
fenced start) is that one's to write. Every reader of the file treats ``killed`` as it treated the stale
``running`` (neither finished nor failed).
"""
from __future__ import annotations

import os
from pathlib import Path

import psutil

from dlsched.train.files import atomic_write_json, read_status

KILLED = "killed"


def _runs(pid) -> bool:
    try:
        return type(pid) is int and pid > 0 and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def settle_status(job_dir: str | os.PathLike, state: str, why: str) -> None:
    """Write ``state`` (``killed`` or ``failed``) and ``why`` into the folder's status.json if it still says
    ``running`` and its coordinator is gone."""
    status = read_status(Path(job_dir))
    if not status or status.get("state") != "running" or _runs(status.get("pid")):
        return
    try:
        atomic_write_json(Path(job_dir) / "status.json", status | {"state": state, "error": why})
    except OSError:   # the folder is the job's record, not the service's: a read-only or full mount is no reason to stop
        pass
