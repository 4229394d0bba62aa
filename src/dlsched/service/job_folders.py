"""Where each job's folder is: the folder it was started in, whatever ``--jobs-dir`` the service runs with now.

A job's coordinator, its lock (``train/fence.py``: one coordinator per *folder*) and its checkpoints live in its
folder, stored as the job's ``job_dir`` when it first starts. A service restarted with another ``--jobs-dir`` took
``JOBS_DIR/<id>`` for every job: it found no coordinator in the new, empty folder, re-queued the running job and
started a second coordinator there from step 0 while the first trained on. Now a job that ever started stays in its
folder (re-attached there, resumed from its checkpoints there); only jobs never started get one under the current
``--jobs-dir``. The service makes its folders absolute when it starts, so a stored folder does not depend on the
working directory of the service that reads it.
"""
from __future__ import annotations

import os
from pathlib import Path

from dlsched.errors import UserError
from dlsched.service.store import JobRecord


def job_folder(job: JobRecord, jobs_dir: Path) -> Path:
    """``job``'s folder: its stored ``job_dir``, else (never started) ``jobs_dir/<id>``.

    Where the stored folder is gone and ``jobs_dir/<id>`` exists, that one: the operator moved the job folders there
    (a preempted job resumes from the checkpoints it finds there). A relative stored folder (a dlsched before
    absolute folders stored ``--state-dir`` as given) is read against the working directory, as the service that
    stored it used it."""
    default = jobs_dir / str(job.id)
    if not job.job_dir:
        return default
    stored = Path(job.job_dir).absolute()
    return default if stored != default and not stored.exists() and default.exists() else stored


def check_jobs_dir(path: Path, what: str = "--jobs-dir") -> None:
    """A one-line ``UserError`` unless ``path`` can hold job folders: a folder this user may write in, or one it may
    create (its nearest existing parent is such a folder). Checked at ``serve``'s start, creating nothing: a file, or
    a folder on a read-only mount, started the service, and every job then failed at its start with a traceback."""
    at = Path(path)
    while not at.exists() and at != at.parent:
        at = at.parent
    if not at.is_dir():
        raise UserError(f"{what} {str(path)!r}: {'' if at == path else repr(str(at)) + ' '}exists and is not a folder")
    if not os.access(at, os.W_OK | os.X_OK):
        raise UserError(f"{what} {str(path)!r}: this user may not {'write in' if at == path else 'create'} it "
                        f"({str(at)!r} is not writable)")
