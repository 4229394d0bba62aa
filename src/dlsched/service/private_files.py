"""The service's state folder and its secrets, readable by this user only (the trust model is ``docs/security.md``).

The state folder holds the SQLite database (every job's spec, params and events), the API token and, by default,
the job folders (their logs and checkpoints): it is made ``0700`` and the database ``0600`` when created, and an
existing one left readable by others (a folder made before this rule, or by hand) is tightened at service start.
"""
from __future__ import annotations

import os
import stat
from pathlib import Path

from dlsched.errors import UserError

DIR_MODE, FILE_MODE = 0o700, 0o600


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
    """``path`` as a folder only this user can enter: created ``0700``, or tightened to it if it exists."""
    path = Path(path)
    try:
        path.mkdir(mode=DIR_MODE, parents=True, exist_ok=True)
    except OSError as e:
        raise UserError(f"{what} {str(path)!r}: cannot create the folder ({e.strerror})") from None
    tighten(path, DIR_MODE, what)
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
