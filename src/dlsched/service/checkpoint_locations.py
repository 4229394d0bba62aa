"""Where a submitted job may keep its checkpoints (``checkpoint_uri``): a location of its own.

A run resumes from the newest checkpoint of its job name it finds at its location, and prunes all but the newest
two there (``train/storage.py``). A location shared with a live job is therefore silent corruption: a second job
named like the first resumed from the first's weights, and both pruned and overwrote each other's steps, so the
first resumed from the second's state at its next restart (or failed on a foreign checkpoint). Any token holder
could do it to any job: ``checkpoint_uri: STATE_DIR/jobs/3/ckpt``.

So a submission's ``checkpoint_uri`` is refused (one line naming the field and value) when it

* is a path (or ``file://`` URI) inside the service's state directory or jobs directory: the database, the token
  and every job's folder live there;
* is the location of a job not yet ended (its ``checkpoint_uri``), or of another spec of the same batch. Only the
  same location: a save lists and prunes its own folder, not the folders under it.

A relative path resolves from the runtime's working directory (``--workdir``), where the coordinator resolves it.

A local location other users may write into is refused too: a job resumes from the newest checkpoint of its name it
finds there, and the header that names the job and the SHA-256 that seals it take no secret to forge (the name is in
``ps``), so another local user who can add a file there trains the job from weights of their choosing; one who can
rename an entry on the way swaps the folder for a link to where the job's pruning deletes files. So every existing
folder on the way must be this user's or root's, and none writable by others, except a sticky one such as ``/tmp``
(no one replaces another's entry there) above a folder that exists; the location itself, or the deepest existing
folder it would be made in, not even sticky.

fsspec's other names for the local disk are the local disk too: ``local:///x`` is ``/x``, and ``file://x`` (a "host")
is ``x`` under the runtime's working directory. Read as remote URIs, both passed every rule above:
``local:///STATE/jobs/1/ckpt`` or ``file://dlsched-state/jobs/1/ckpt`` was accepted and the job wrote and pruned its
checkpoints in job 1's folder. So a protocol whose fsspec class is a local file system is held to the path rules, and
takes only the ``file:///absolute/path`` form. A chained URI (``simplecache::file:///x``, ``dir::...``) wraps a
location the rules cannot see through (both of those wrote into the state directory): refused.

A URI carrying a password (``ftp://user:secret@host/...``, which fsspec takes from the URL) is refused too: the spec is
shown to every token holder (``dlsched show``, events, the dashboard) and the runtime gets it on its command line,
which every local user reads in ``ps``. A driver's credentials belong in its environment or config file.
"""
from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Iterable
from urllib.parse import urlsplit

import fsspec
from fsspec.implementations.local import LocalFileSystem

from dlsched.spec import SpecError


@cache
def local_protocol(protocol: str) -> bool:
    """Whether fsspec reads ``protocol://`` as the local disk (``file``, ``local``, ...): its registered class, which
    is imported, never instantiated (an ``ftp`` one connects when made). An unknown or uninstalled one is not local:
    the runtime refuses it when it starts."""
    try:
        return issubclass(fsspec.get_filesystem_class(protocol), LocalFileSystem)
    except (ImportError, ValueError):
        return False


def location_key(uri: str, workdir: Path) -> str:
    """``uri`` in a comparable form: a local path (plain or a local protocol's URI) absolute with symlinks resolved (a
    link to another job's folder is that folder); any other URI as ``protocol://path`` without a trailing slash."""
    if "://" not in uri:
        return str((workdir / uri).resolve())
    protocol, _, rest = uri.partition("://")
    if "::" not in protocol and local_protocol(protocol):
        return str((workdir / rest).resolve())   # file:///x is /x, file://x is x where the runtime runs (as fsspec)
    return f"{protocol.lower()}://{rest.rstrip('/')}"


def open_to_others(path: Path) -> str | None:
    """Why another local user could put or swap checkpoints at ``path`` (absolute, symlinks resolved): the first
    folder on its way that another user owns or may write into (see the module doc); None when none."""
    me = os.geteuid()
    deepest = True   # the location itself, or the deepest existing folder it would be made in
    for folder in (path, *path.parents):
        try:
            st = folder.stat()
        except FileNotFoundError:
            continue
        if st.st_uid not in (me, 0):
            return f"{folder} is owned by uid {st.st_uid}, not by this user ({me})"
        if st.st_mode & stat.S_IWOTH and (deepest or not st.st_mode & stat.S_ISVTX):
            return f"{folder} may be written by every user (mode {stat.S_IMODE(st.st_mode):04o})"
        deepest = False
    return None


def inside(path: Path, root: Path) -> bool:
    return path == root or path.is_relative_to(root)


@dataclass(frozen=True)
class CheckpointRules:
    workdir: Path                    # where a relative checkpoint_uri resolves (the runtime's working directory)
    forbidden: tuple[Path, ...]      # the service's own folders: the state directory, the jobs directory

    @classmethod
    def make(cls, workdir: str | Path, forbidden: tuple[str | Path, ...]) -> "CheckpointRules":
        return cls(Path(workdir).resolve(), tuple(Path(f).resolve() for f in forbidden))

    def check(self, uri: str | None, taken: Iterable[tuple[str, str]], source: str = "job spec") -> None:
        """Raise ``SpecError`` unless ``uri`` is a location of its own; ``taken``: (who, checkpoint_uri) of the jobs
        not yet ended (``job 3``) and of the batch's earlier specs (``jobs[0]``)."""
        if uri is None:
            return
        def refuse(why: str, shown: str = uri) -> None:
            raise SpecError(f"{source}: field checkpoint_uri: {shown[:120]!r} {why}")

        parts = urlsplit(uri) if "://" in uri else None
        if parts is not None and parts.password is not None:   # never echoed back: the refusal is logged and shown
            refuse("carries a password, which `dlsched show` and `ps` would show to others; give the storage "
                   "driver's credentials in its environment or config file", uri.replace(parts.password, "***"))
        protocol, _, rest = uri.partition("://")
        if "::" in uri:
            refuse("chains file systems (::), which wraps a location these checks cannot see; give the location "
                   "itself (a path, file:///absolute/path or a store's URI)")
        if rest and local_protocol(protocol) and not rest.startswith("/"):
            refuse(f"names a host or a relative path after {protocol}://; give file:///absolute/path or a plain path")
        key = location_key(uri, self.workdir)

        if "://" not in key:
            for root in self.forbidden:
                if inside(Path(key), root):
                    refuse(f"lies in the service's folder {root} (its database, token and every job's folder); "
                           "give the job a location of its own")
            if (why := open_to_others(Path(key))) is not None:
                refuse(f"is open to other users: {why}, and a job resumes from the checkpoint it finds there; give a "
                       "folder only this user can write (mkdir -m 700)")
        for who, other in taken:
            if key == location_key(other, self.workdir):
                refuse(f"is where {who} keeps its checkpoints, and it has not ended: a job resumes from and "
                       "prunes what it finds there; give each job a location of its own")
