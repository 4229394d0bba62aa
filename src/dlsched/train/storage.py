"""Checkpoint storage at a location given as a local path or an fsspec URI (docs/storage.md).

A local path or ``file://`` URI keeps ``dlsched.train.checkpoint``'s files (temp + fsync + rename; torn
files renamed ``*.torn``). Any other protocol (``memory://``, ``s3://``... when its fsspec driver is
installed) has no atomic rename, so a checkpoint there is two objects: the data ``step-S.ckpt.<sha256>``
(the same bytes as a local file), then, written last, its manifest ``step-S.manifest.json``
``{"data": KEY, "bytes": N, "sha256": H}``. A reader trusts only data a manifest names whose size and hash
match: data without a manifest (a writer died mid-upload) is never listed, and a manifest whose data is
missing or differs is torn (renamed ``*.torn`` like a local file). The data key carries its hash, so
rewriting a step never alters the bytes a manifest already names.
"""
from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Any

import fsspec
from fsspec.implementations.local import LocalFileSystem

from dlsched.errors import UserError
from dlsched.train import checkpoint as ckpt

_MANIFEST = re.compile(r"^step-(\d{9})\.manifest\.json$")
_DATA = re.compile(r"^step-(\d{9})\.ckpt\.[0-9a-f]{64}$")


def _resolve(location: str | Path) -> tuple[fsspec.AbstractFileSystem, str]:
    try:
        return fsspec.core.url_to_fs(str(location))
    except (ImportError, ValueError) as e:   # unknown protocol, or its driver (s3fs, gcsfs...) not installed
        raise UserError(f"checkpoint_uri={str(location)!r}: {e}") from None


class CheckpointStore:
    """The checkpoints of one job at ``location`` (a folder path or a URI); names are strings (path or URI)."""

    def __init__(self, location: str | Path):
        self.fs, self.root = _resolve(location)
        if "://" not in str(location):
            self.root = str(location)   # a plain path stays as given (relative stays relative)
        self.local = isinstance(self.fs, LocalFileSystem)

    def _name(self, key: str) -> str:
        return key if self.local else self.fs.unstrip_protocol(key)

    def _key(self, name: str) -> str:
        return _resolve(name)[1]

    def save(self, job_name: str, step: int, state: dict[str, Any], keep: int = 2) -> str:
        """Write ``state`` as the checkpoint of ``step``, all or nothing; keep the newest ``keep``."""
        if self.local:
            return str(ckpt.save_checkpoint(Path(self.root), job_name, step, state, keep))
        blob = ckpt.encode_checkpoint(job_name, step, state)
        digest = hashlib.sha256(blob).hexdigest()
        data = f"{self.root}/step-{step:09d}.ckpt.{digest}"
        self.fs.pipe_file(data, blob)
        manifest = f"{self.root}/step-{step:09d}.manifest.json"
        self.fs.pipe_file(manifest, json.dumps({"data": data.rsplit("/", 1)[1], "bytes": len(blob),
                                                 "sha256": digest}).encode())   # the commit: written last
        kept = self.list()[-keep:]
        named = {self._data_of(self._key(m)) for m in kept}
        for key in self.fs.ls(self.root, detail=False):
            base = key.rsplit("/", 1)[1]
            if (_MANIFEST.match(base) and self._name(key) not in kept) or (_DATA.match(base) and key not in named):
                self.fs.rm_file(key)
        return self._name(manifest)

    def _data_of(self, manifest_key: str) -> str | None:
        try:
            return f"{manifest_key.rsplit('/', 1)[0]}/{json.loads(self.fs.cat_file(manifest_key))['data']}"
        except (FileNotFoundError, ValueError, KeyError, TypeError):
            return None

    def list(self) -> list[str]:
        """Committed checkpoints (local files / manifests), oldest first."""
        if self.local:
            return [str(p) for p in ckpt.list_checkpoints(Path(self.root))]
        if not self.fs.isdir(self.root):
            return []
        keys = [k for k in self.fs.ls(self.root, detail=False) if _MANIFEST.match(k.rsplit("/", 1)[1])]
        return [self._name(k) for k in sorted(keys)]

    def latest(self) -> str | None:
        names = self.list()
        return names[-1] if names else None

    def newest_valid(self, job_name: str) -> tuple[str | None, dict[str, Any] | None, list[tuple[str, str]]]:
        """(name, state) of the newest checkpoint that verifies, or (None, None); and the torn ones skipped,
        each renamed ``*.torn`` with its defect. A foreign checkpoint raises (``dlsched.train.checkpoint``)."""
        skipped = []
        for name in reversed(self.list()):
            try:
                return name, load(name, job_name), skipped
            except ckpt.TornCheckpoint as e:
                key = self._key(name)
                self.fs.mv(key, key + ".torn")
                skipped.append((name, str(e)))
        return None, None, skipped


def load(name: str | Path, job_name: str) -> dict[str, Any]:
    """Read and verify the checkpoint ``name`` (a local file, or a manifest URI from ``CheckpointStore``)."""
    fs, key = _resolve(name)
    if isinstance(fs, LocalFileSystem):
        return ckpt.load_checkpoint(Path(key), job_name)
    try:
        manifest = json.loads(fs.cat_file(key))
        data = f"{key.rsplit('/', 1)[0]}/{manifest['data']}"
        size, digest = int(manifest["bytes"]), str(manifest["sha256"])
    except (ValueError, KeyError, TypeError) as e:
        raise ckpt.TornCheckpoint(f"{name}: torn manifest ({e})") from None
    try:
        blob = fs.cat_file(data)
    except FileNotFoundError:
        raise ckpt.TornCheckpoint(f"{name}: torn checkpoint (its data {manifest['data']} is missing)") from None
    if len(blob) != size or hashlib.sha256(blob).hexdigest() != digest:
        raise ckpt.TornCheckpoint(f"{name}: torn checkpoint ({len(blob)} of {size} bytes, or hash mismatch)")
    return ckpt.decode_checkpoint(blob, str(name), job_name)


def job_folder(location: str | Path, field: str) -> Path:
    """A job folder's location (a path, or a ``file://`` URI) as a local path; any other protocol is refused.

    Not the checkpoints' fsspec latitude: the folder is a POSIX contract (docs/storage.md) - the service polls
    ``progress.jsonl`` while rank 0 appends to it, ``control.json``/``status.json`` are replaced by rename, and
    ``coordinator.lock`` is an ``flock`` fence - so it must be a local disk or a shared mount (NFS)."""
    text = str(location)
    if "://" not in text:
        if not text or "\x00" in text:
            raise UserError(f"{field}={text!r}: expected a folder path or a file:// URI")
        return Path(text)
    if text.split("://", 1)[0] != "file":
        raise UserError(f"{field}={text!r}: a job folder needs a POSIX file system, a path or file:// URI (its "
                        f"progress file is appended and polled); an object store can hold the checkpoints "
                        f"(checkpoint_uri)")
    if not text.startswith("file:///"):     # file://host/... : a host this process cannot mount
        raise UserError(f"{field}={text!r}: expected file:///absolute/path (no host)")
    return Path(fsspec.core.url_to_fs(text)[1])


def for_job(job_dir: Path, checkpoint_uri: str | None) -> CheckpointStore:
    """A job's checkpoints: at ``checkpoint_uri``, or in its job folder's ``ckpt/`` (the default)."""
    return CheckpointStore(checkpoint_uri or Path(job_dir) / "ckpt")
