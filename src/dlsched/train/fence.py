"""Exactly one coordinator per job folder: a lock the coordinator holds for its whole life.

``DIR/coordinator.lock`` is ``flock``ed exclusively. The backend takes the lock *before* it starts the
coordinator and hands the locked descriptor to it (``pass_fds``, number in ``$DLSCHED_LOCK_FD``), so the job
folder is fenced from the instant the process exists, through the seconds its imports take, whether or not
the service lives to record the launch. The kernel drops the lock when the last holder dies, however it dies
(SIGKILL, OOM), so a free lock *proves* no coordinator is alive, and a held one proves one is:

* a backend that finds the lock held adopts the holder (found by the lock file among its open files) instead
  of starting a second coordinator;
* a coordinator started by hand on a folder another one holds exits at once with ``EXIT_FENCED``, before it
  touches any file there.

Workers never hold it: the descriptor is not inheritable past an exec, and a process the coordinator forks (FLEET's
members and producers) closes its copy (a SIGKILLed ensemble runtime's orphaned member held the lock, and the
service adopted it as the job's coordinator).
"""
from __future__ import annotations

import fcntl
import os
import time
from pathlib import Path

LOCK_NAME = "coordinator.lock"
FD_ENV = "DLSCHED_LOCK_FD"
EXIT_FENCED = 75   # EX_TEMPFAIL: another coordinator holds the job folder; nothing was touched
CLAIM_WAIT_S = 10.0   # a coordinator being stopped as a new one starts (Ray backend restart) lets go within this


def lock_path(job_dir: str | Path) -> Path:
    return Path(job_dir) / LOCK_NAME


def acquire(job_dir: str | Path) -> int | None:
    """The locked descriptor of ``DIR/coordinator.lock``, or None when another process holds the lock."""
    path = lock_path(job_dir)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    return fd


def is_held(job_dir: str | Path) -> bool:
    """True while some process (a coordinator) holds the job folder's lock. Creates nothing."""
    try:
        fd = os.open(lock_path(job_dir), os.O_RDONLY)
    except FileNotFoundError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return False
    except BlockingIOError:
        return True
    finally:
        os.close(fd)


def _not_in_forked_children(fd: int) -> int:
    """``fd``, closed in every child this process forks from now on while it still is the lock (its number may have
    been reused by then: a test process claims and closes)."""
    lock = os.fstat(fd)

    def close() -> None:
        try:
            now = os.fstat(fd)
            if (now.st_dev, now.st_ino) == (lock.st_dev, lock.st_ino):
                os.close(fd)
        except OSError:
            pass

    os.register_at_fork(after_in_child=close)
    return fd


def claim(job_dir: str | Path, wait_s: float | None = None) -> int | None:
    """In the coordinator, first thing: the lock its backend passed down, else the lock taken now; None when
    another coordinator still holds the folder after ``wait_s`` (default ``CLAIM_WAIT_S``), and the caller must
    then exit without touching the folder."""
    passed = os.environ.pop(FD_ENV, None)
    if passed is not None and passed.isdigit():
        fd = int(passed)
        try:
            if os.path.samestat(os.fstat(fd), os.stat(lock_path(job_dir))):
                os.set_inheritable(fd, False)   # workers and helpers never hold it
                return _not_in_forked_children(fd)
        except OSError:
            pass
    deadline = time.monotonic() + (CLAIM_WAIT_S if wait_s is None else wait_s)
    while (fd := acquire(job_dir)) is None and time.monotonic() < deadline:
        time.sleep(0.1)
    return fd if fd is None else _not_in_forked_children(fd)


def holder(job_dir: str | Path, timeout_s: float = 10.0):
    """The live process holding the job folder's lock (a ``psutil.Process``), or None if the lock is free.

    Found by the lock file among processes' open files; a holder just forked may not show it for a moment
    (it holds the descriptor, its command line is still its parent's), hence the bounded wait."""
    import psutil

    target = str(lock_path(job_dir).resolve())
    name = Path(job_dir).name
    deadline = time.monotonic() + timeout_s
    while True:
        # processes naming the folder first (the runtime's --job-dir), then any: a hand-started one may spell it differently
        procs = list(psutil.process_iter(["cmdline"]))
        likely = [p for p in procs if any(name in a for a in (p.info.get("cmdline") or ()))]
        for p in likely + [p for p in procs if p not in likely]:
            try:
                if any(f.path == target for f in p.open_files()):
                    return p
            except psutil.Error:
                continue
        if not is_held(job_dir) or time.monotonic() > deadline:
            return None
        time.sleep(0.05)


def holder_line(job_dir: str | Path) -> str:
    """Who holds the job folder, for the fenced coordinator's error: a lost node's coordinator outliving its guard
    is what keeps a job from resuming, and only its pid and parent tell why."""
    import psutil

    p = holder(job_dir, timeout_s=1.0)
    if p is None:
        return "its holder is not on this machine (or just let go)"
    try:
        return f"held by pid {p.pid} (parent {p.ppid()}, {p.status()}): {' '.join(p.cmdline())[:200]}"
    except psutil.Error:
        return f"held by pid {p.pid}"
