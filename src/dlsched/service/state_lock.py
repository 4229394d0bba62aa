"""One service per state folder: ``STATE_DIR/serve.lock``, ``flock``ed exclusively for the service's life.

Two ``dlsched serve`` on one ``--state-dir`` (another port, a second terminal) ran two scheduling loops on one
SQLite store: each scheduled the whole cluster, so jobs were started twice and GPUs given out twice; only the
per-job fence (``train/fence.py``) stood between them. The second one is now refused with one line naming the folder
and the pid holding it. The kernel drops the lock however the holder dies (SIGKILL, OOM), so a killed service never
blocks its own restart; the descriptor is not inherited by the coordinators it starts (they outlive the service).
"""
from __future__ import annotations

import fcntl
import os
from pathlib import Path

from dlsched.errors import UserError

LOCK_NAME = "serve.lock"


def hold(state_dir: Path) -> int:
    """The locked descriptor of ``state_dir/serve.lock`` (this process's pid written in it); ``UserError`` naming
    the folder and the holder's pid where another process holds it."""
    path = Path(state_dir) / LOCK_NAME
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    except OSError as e:
        raise UserError(f"--state-dir {state_dir}: cannot create {LOCK_NAME} there ({e.strerror})") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        pid = _holder(fd)
        os.close(fd)
        raise UserError(f"--state-dir {state_dir}: another dlsched serve ({f'pid {pid}' if pid else 'pid unknown'}) "
                        f"uses this state folder; two services on one store would both schedule the whole cluster: "
                        f"stop that one first, or give this one another --state-dir") from None
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    return fd


def release(fd: int | None) -> None:
    if fd is not None:
        try:
            os.close(fd)
        except OSError:
            pass


def _holder(fd: int) -> int | None:
    """The pid holding the lock on ``fd``'s file: the kernel's lock table where it has one (Linux), else the pid
    the holder wrote (a holder that just took the lock may not have written it yet)."""
    st = os.fstat(fd)
    try:
        with open("/proc/locks") as f:
            for line in f:
                parts = line.split()   # "1: FLOCK  ADVISORY  WRITE 1234 08:01:5678 0 EOF"
                if len(parts) >= 6 and parts[1] == "FLOCK" and parts[5].rsplit(":", 1)[-1] == str(st.st_ino):
                    dev = parts[5].split(":")
                    same_dev = len(dev) == 3 and (int(dev[0], 16), int(dev[1], 16)) == (os.major(st.st_dev),
                                                                                       os.minor(st.st_dev))
                    if same_dev and int(parts[4]) > 0:   # 0: a holder outside this pid namespace
                        return int(parts[4])
    except (OSError, ValueError):
        pass
    try:
        text = os.pread(fd, 32, 0).decode().strip()
        return int(text) if text.isdigit() else None
    except (OSError, UnicodeDecodeError):
        return None
