"""The API's bearer token: generated on the service's first start into a file only its user can read, and
found there by the CLI (the trust model is ``docs/security.md``).

Where: ``$DLSCHED_TOKEN`` (a value), else the file ``$DLSCHED_TOKEN_FILE``, else ``STATE_DIR/token``
(``dlsched-state/token`` for the CLI, serve's default state directory). A token file others can read, or
that another user owns, is refused like ssh refuses such a key: anyone who reads it can run jobs.
"""
from __future__ import annotations

import logging
import os
import secrets
import stat
from pathlib import Path

from dlsched.errors import UserError
from dlsched.faults import fault_point

log = logging.getLogger("dlsched.service")

MIN_TOKEN_CHARS = 16       # a guess at 16 random characters is out of reach; 1 character was accepted before
TOKEN_FILE_NAME = "token"
DEFAULT_STATE_DIR = Path("dlsched-state")


def check_token(token: str, source: str) -> str:
    token = token.strip()
    if len(token) < MIN_TOKEN_CHARS:
        raise UserError(f"{source}: token is {len(token)} characters, need at least {MIN_TOKEN_CHARS}")
    if any(c.isspace() or not c.isprintable() for c in token):
        raise UserError(f"{source}: token must be one word of printable characters")
    return token


def read_token_file(path: str | Path) -> str:
    """The token in ``path``, refused with one line unless only its owner (this user) can read it."""
    path = Path(path)
    try:
        st = path.stat()
        if stat.S_ISDIR(st.st_mode):   # its mode (0755) was reported as a loose token file's
            raise UserError(f"{path}: is a directory, not a token file; give a file's path (e.g. "
                            f"{path / TOKEN_FILE_NAME})")
        if not stat.S_ISREG(st.st_mode):   # a FIFO would block the read
            raise UserError(f"{path}: is not a regular file; a token file holds the token on one line")
        if st.st_uid != os.geteuid():
            raise UserError(f"{path}: token file is owned by uid {st.st_uid}, not by this user ({os.geteuid()})")
        if st.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
            raise UserError(f"{path}: token file is readable by others (mode {stat.S_IMODE(st.st_mode):04o}); "
                            f"run: chmod 600 {path}")
        return check_token(path.read_text(), str(path))
    except FileNotFoundError as e:   # the README's tour: a client typed in the second terminal before serve was up
        raise UserError(f"{path}: cannot read token: {e.strerror} (`dlsched serve` writes it into its state folder "
                        "as it starts: is it running, or still starting?)") from None
    except OSError as e:
        raise UserError(f"{path}: cannot read token: {e.strerror}") from None


def load_or_create_token(path: str | Path) -> str:
    """The token in ``path``; on the first start a new random one, written 0600 (never readable by others).

    Written whole to a private temporary file, then linked into place: created in place and then written, a start cut
    off between the two (a full disk, a kill) left an empty token file that refused every later start. An empty one
    (left so by an earlier dlsched) is replaced, with one warning: no client can hold an empty token."""
    path = Path(path)
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)   # a new folder (often the state folder): private
    if not path.exists():
        return _create_token(path)
    try:
        return read_token_file(path)
    except UserError:
        if not _empty_private_file(path):
            raise
    log.warning("%s: token file is empty (an earlier start was cut off writing it: a full disk, a kill); "
                "writing a new token", path)
    return _create_token(path, replace=True)


def _empty_private_file(path: Path) -> bool:
    try:
        st = path.stat()
        return (stat.S_ISREG(st.st_mode) and st.st_uid == os.geteuid() and not st.st_mode & (stat.S_IRWXG | stat.S_IRWXO)
                and not path.read_text().strip())
    except (OSError, UnicodeDecodeError):
        return False


def _create_token(path: Path, replace: bool = False) -> str:
    """A new token in ``path`` all at once; another start that got there first wins (its token is returned)."""
    token = secrets.token_urlsafe(32)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.unlink(missing_ok=True)   # an earlier process of this pid's, killed writing it
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(token + "\n")
            f.flush()
            os.fsync(f.fileno())
        fault_point("token-written")
        if replace:
            os.replace(tmp, path)
        else:
            try:
                os.link(tmp, path)   # never over a token another start wrote meanwhile
            except FileExistsError:
                return read_token_file(path)
    except OSError as e:
        raise UserError(f"{path}: cannot write the token file: {e.strerror}") from None
    finally:
        tmp.unlink(missing_ok=True)
    return token


def client_token(state_dir: str | Path | None = None) -> str | None:
    """The token a client sends: ``$DLSCHED_TOKEN``, else ``$DLSCHED_TOKEN_FILE``, else ``STATE_DIR/token`` when
    it exists (serve's default state directory in the working directory), else none."""
    env = os.environ.get("DLSCHED_TOKEN")
    if env:
        return check_token(env, "$DLSCHED_TOKEN")
    named = os.environ.get("DLSCHED_TOKEN_FILE")
    if named:
        return read_token_file(named)
    default = Path(state_dir or DEFAULT_STATE_DIR) / TOKEN_FILE_NAME
    return read_token_file(default) if default.exists() else None
