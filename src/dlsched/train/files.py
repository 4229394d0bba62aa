"""The job folder's files (contract in ``dlsched.train.protocol``, docs/runtime.md): control.json in, progress.jsonl and status.json out.

Writers replace whole files atomically (temp + rename) so a reader in another process never sees
half a JSON document; progress.jsonl is append-only, one object per line.
"""
from __future__ import annotations

import json
import os
import tempfile
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Iterator

from dlsched.errors import UserError


@contextmanager
def atomic_file(path: Path, mode: str = "w") -> Iterator[IO]:
    """Write ``path`` all or nothing: a temp file beside it, fsynced, then ``os.replace``d onto it.

    A reader (or a crash) sees the old file or the new one, never half; on error the temp file goes.
    The one atomic-write implementation: JSON files here and in the backends, checkpoints, FLEET models."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, mode) as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def atomic_write_json(path: Path, obj: Any) -> None:
    with atomic_file(path) as f:
        json.dump(obj, f)


@dataclass(frozen=True)
class Control:
    """A resize / batch-size request; only a higher ``generation`` than the last one applied counts.

    ``devices``: the CUDA devices the backend now grants the job (one per worker), None = unchanged."""

    workers: int
    batch_size: int | None
    generation: int
    devices: tuple[str, ...] | None = None


def write_control(job_dir: Path, workers: int, batch_size: int | None, generation: int,
                  devices: list[str] | None = None) -> None:
    obj = {"workers": workers, "batch_size": batch_size, "generation": generation}
    if devices is not None:
        obj["devices"] = list(devices)
    atomic_write_json(Path(job_dir) / "control.json", obj)


def read_control(job_dir: Path) -> Control | None:
    """Parse DIR/control.json; None when absent; UserError naming the field when malformed."""
    path = Path(job_dir) / "control.json"
    try:
        raw = path.read_text()
    except FileNotFoundError:
        return None
    try:
        obj = json.loads(raw)
    except json.JSONDecodeError as e:
        raise UserError(f"{path}: not JSON ({e})") from e
    if not isinstance(obj, dict):
        raise UserError(f"{path}: expected an object, got {raw[:40]!r}")
    for key in ("workers", "generation"):
        if not isinstance(obj.get(key), int) or isinstance(obj.get(key), bool):
            raise UserError(f"{path}: field {key}={obj.get(key)!r} must be an integer")
    if obj["workers"] < 1:
        raise UserError(f"{path}: field workers={obj['workers']!r} must be >= 1")
    bs = obj.get("batch_size")
    if bs is not None and (not isinstance(bs, int) or isinstance(bs, bool) or bs < 1):
        raise UserError(f"{path}: field batch_size={bs!r} must be a positive integer or null")
    devices = obj.get("devices")
    if devices is not None and (not isinstance(devices, list) or not all(isinstance(d, str) and d for d in devices)):
        raise UserError(f"{path}: field devices={devices!r} must be a list of device names or null")
    return Control(obj["workers"], bs, obj["generation"], None if devices is None else tuple(devices))


class ProgressLog:
    """Appends one JSON object per line to DIR/progress.jsonl (flushed per line so tailers see it)."""

    def __init__(self, job_dir: Path):
        self.path = Path(job_dir) / "progress.jsonl"
        self._f = open(self.path, "a", buffering=1)

    def write(self, obj: dict) -> None:
        self._f.write(json.dumps(obj) + "\n")

    def close(self) -> None:
        self._f.close()


def read_progress(job_dir: Path) -> list[dict]:
    path = Path(job_dir) / "progress.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def write_status(job_dir: Path, state: str, pid: int, workers: int, error: str | None = None, **extra: Any) -> None:
    atomic_write_json(Path(job_dir) / "status.json",
                      {"state": state, "pid": pid, "workers": workers, "error": error, **extra})


def read_status(job_dir: Path) -> dict | None:
    """DIR/status.json, or None while it does not exist yet or cannot be read."""
    try:
        return json.loads((Path(job_dir) / "status.json").read_text())
    except (OSError, ValueError):
        return None
