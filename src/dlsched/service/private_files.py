"""The service's state folder and its secrets, readable by this user only (the trust model is ``docs/security.md``).

The state folder holds the SQLite database (every job's spec, params and events), the API token and, by default,
the job folders (their logs and checkpoints). A folder the service creates is made ``0700``; a folder that already
exists is the user's (their home, the working directory, ``--state-dir .``) and keeps its mode: a loose one gets one
warning at service start instead. The database files are ``0600`` always (created so, an older loose one tightened).
"""
from __future__ import annotations

import logging
import os
import stat
from pathlib import Path

from dlsched.errors import UserError

DIR_MODE, FILE_MODE = 0o700, 0o600
log = logging.getLogger("dlsched.service")


def tighten(path: str | Path, mode: int = FILE_MODE, what: str = "database") -> None:
    """Drop the group and other bits of ``path`` where it exists (a one-line UserError where this user may not)."""
    path = Path(path)
    try:
        st = path.stat()
        if st.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
            path.chmod(stat.S_IMODE(st.st_mode) & mode)
    except FileNotFoundError:
        pass
    except OSError as e:
        raise UserError(f"{what} {str(path)!r}: cannot make it private to this user ({e.strerror}); it holds the "
                        f"service's database and token") from None


def private_dir(path: str | Path, what: str = "--state-dir") -> Path:
    """``path`` as a folder for the service's secrets: created ``0700`` where it is new. An existing folder keeps its
    mode (chmod-ing a folder the user chose, such as their home, would surprise them); a warning says so where others
    may read or write it."""
    path = Path(path)
    if path.is_dir():
        loose = stat.S_IMODE(path.stat().st_mode) & (stat.S_IRWXG | stat.S_IRWXO)
        if loose:
            log.warning("%s %s: an existing folder with mode %04o, left as it is; other users may %s it, and it will "
                        "hold the service's database and token; run: chmod 700 %s, or choose a new folder",
                        what, path, stat.S_IMODE(path.stat().st_mode),
                        "write in" if loose & (stat.S_IWGRP | stat.S_IWOTH) else "read in", path)
        return path
    try:
        path.mkdir(mode=DIR_MODE, parents=True)
    except FileExistsError:
        raise UserError(f"{what} {str(path)!r}: exists and is not a folder") from None
    except OSError as e:
        raise UserError(f"{what} {str(path)!r}: cannot create the folder ({e.strerror})") from None
    return path


def private_jobs_dir(path: Path) -> Path:
    """The default job folders' parent inside the state folder: created ``0700`` (so the logs stay private even where
    the state folder is the user's loose working directory); an existing one is left as it is."""
    try:
        path.mkdir(mode=DIR_MODE, exist_ok=True)
    except OSError as e:
        raise UserError(f"--state-dir: cannot create {str(path)!r} ({e.strerror})") from None
    return path


def private_file(path: str | Path, what: str = "database") -> Path:
    """``path`` as a file only this user can read: created empty ``0600`` (never readable by others, not even for a
    moment), or tightened to it if it exists."""
    path = Path(path)
    try:
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, FILE_MODE))
    except FileExistsError:
        tighten(path, FILE_MODE, what)
    except OSError as e:
        raise UserError(f"{what} {str(path)!r}: cannot create it ({e.strerror})") from None
    return path
