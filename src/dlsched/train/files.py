"""The job folder's files (contract in ``dlsched.train.protocol``, docs/runtime.md): control.json in, progress.jsonl and status.json out.

Writers replace whole files atomically (temp + rename) so a reader in another process never sees
half a JSON document; progress.jsonl is append-only, one object per line.
"""
from __future__ import annotations

import errno
import hashlib
import json
import logging
import os
import stat
import tempfile
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Callable, Iterator

from dlsched.errors import UserError
from dlsched.numbers import is_number

log = logging.getLogger("dlsched.train")


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
    raw = control_bytes(job_dir)
    return None if raw is None else parse_control(raw, Path(job_dir) / "control.json")


def parse_control(raw: bytes, path: Path) -> Control:
    """One read of control.json, parsed; UserError naming ``path`` and the field when malformed."""
    try:
        obj = json.loads(raw)
    except ValueError as e:   # JSONDecodeError, or bytes that are not UTF-8
        raise UserError(f"{path}: not JSON ({e})") from e
    if not isinstance(obj, dict):
        raise UserError(f"{path}: expected an object, got {raw[:40].decode(errors='replace')!r}")
    for key in ("workers", "generation"):
        if not isinstance(obj.get(key), int) or isinstance(obj.get(key), bool):
            hint = " (a resize by hand: 1 + status.json's generation)" if key == "generation" else ""
            raise UserError(f"{path}: field {key}={obj.get(key)!r} must be an integer{hint}")
    if obj["workers"] < 1:
        raise UserError(f"{path}: field workers={obj['workers']!r} must be >= 1")
    bs = obj.get("batch_size")
    if bs is not None and (not isinstance(bs, int) or isinstance(bs, bool) or bs < 1):
        raise UserError(f"{path}: field batch_size={bs!r} must be a positive integer or null")
    devices = obj.get("devices")
    if devices is not None and (not isinstance(devices, list) or not all(isinstance(d, str) and d for d in devices)):
        raise UserError(f"{path}: field devices={devices!r} must be a list of device names or null")
    return Control(obj["workers"], bs, obj["generation"], None if devices is None else tuple(devices))


def drop_torn_tail(path: Path) -> None:
    """End ``path`` with a newline, cutting off a torn last line (its writer was killed mid-record, or the disk
    filled): the next record appended to it made the two one bad line mid-file, which every later resume refused.
    For the runtime that holds the job folder's lock, at its start: no other writer is live then."""
    try:
        with open(path, "rb+") as f:
            end = f.seek(0, os.SEEK_END)
            pos = end
            while pos > 0:
                f.seek(max(0, pos - 65536))
                chunk = f.read(pos - max(0, pos - 65536))
                nl = chunk.rfind(b"\n")
                if nl >= 0:
                    pos = pos - len(chunk) + nl + 1
                    break
                pos -= len(chunk)
            if pos < end:
                f.seek(pos)
                try:
                    if end - pos > 1 << 22:   # longer than the service reads a line
                        raise ValueError
                    json.loads(f.read())   # whole, but for its newline (a hand's edit): kept
                    f.write(b"\n")
                except ValueError:
                    log.warning("%s: dropping its torn last line (%d bytes; a writer was killed mid-line)", path,
                                end - pos)
                    f.truncate(pos)
    except FileNotFoundError:
        pass


def read_json_lines(path: Path, warn_torn: bool = True) -> list[dict]:
    """The records of a JSON-lines file written by a process that may have been killed mid-line: a torn last
    line is skipped with a warning (``warn_torn``: readers of a live file, whose last line is usually being
    written, skip it silently); a bad line anywhere else is a ``UserError`` naming the file and line."""
    return list(iter_json_lines(path, warn_torn))


def iter_json_lines(path: Path, warn_torn: bool = True, bad: Callable[[int, str, bytes], None] | None = None,
                    offset: int = 0, seen: Callable[[bytes], None] | None = None) -> Iterator:
    """``read_json_lines`` one record at a time: a months-long job's progress.jsonl is gigabytes, and its records as
    a list several times that. ``bad``: a bad line before the last is passed on (line number, error, its bytes) and
    skipped, not an error (a resume: a damaged record must not fail the job for good). ``offset``: from that byte
    (a line's start; line numbers count from there); ``seen``: is given each line read, as it is read."""
    path = Path(path)
    try:
        f = open_regular(path)   # the service reads a job's log too (a summary's fold): a FIFO must not block it
    except FileNotFoundError:
        return
    torn = None   # (line number, error, line) of a bad line: an error unless it is the last
    with f:
        f.seek(offset)
        for n, line in enumerate(f, 1):
            if seen is not None:
                seen(line)
            if torn is not None:
                if bad is None:
                    raise UserError(f"{path}:{torn[0]}: unreadable record ({torn[1]})")
                bad(*torn)
                torn = None
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except ValueError as e:   # UnicodeDecodeError too: a flipped byte
                torn = (n, str(e), line)
                continue
            yield rec
    if torn is not None and warn_torn:
        log.warning("%s: ignoring its torn last line %d (a writer was killed mid-line)", path, torn[0])


class ControlWatch:
    """A runtime's watch on DIR/control.json: ``poll`` gives a request of a higher generation than the last one
    applied, else None. A malformed file is not applied, and ``rejected(error)`` hears of it once per distinct
    content, not once per poll (the file is a level: it stays until the backend writes the next one).
    ``generation`` and ``rejected_digest`` are plain values, so a runtime whose rounds are separate processes
    (the parameter server's) can keep them in its state file and watch on."""

    def __init__(self, job_dir: Path, rejected: Callable[[str], None], generation: int = -1,
                 rejected_digest: str | None = None) -> None:
        self.dir, self.rejected = Path(job_dir), rejected
        self.generation, self.rejected_digest = generation, rejected_digest

    def poll(self) -> Control | None:
        ctl = self.waiting()
        if ctl is not None:
            self.generation = ctl.generation
        return ctl

    def waiting(self) -> Control | None:
        """The request ``poll`` would apply, left unapplied (a resize whose newcomers prepare looks for a newer one)."""
        raw = control_bytes(self.dir)   # read once: the error and the content it is remembered by must agree
        if raw is None:
            return None
        try:
            ctl = parse_control(raw, self.dir / "control.json")
        except UserError as e:
            digest = hashlib.sha256(raw).hexdigest()
            if digest != self.rejected_digest:
                self.rejected_digest = digest
                self.rejected(str(e))
            return None
        return ctl if ctl.generation > self.generation else None


def open_regular(path: str | Path, mode: str = "rb") -> IO:
    """``open(path, mode)`` for reading a file job code may have made something else: a FIFO blocked the reader (the
    service's scheduling loop, for good) until a writer came, a link to /dev/zero never ended; OSError (ENOENT for
    anything but a regular file: read as absent)."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise FileNotFoundError(errno.ENOENT, "not a regular file", str(path))
        return os.fdopen(fd, mode)
    except BaseException:
        os.close(fd)
        raise


# A record the service reads from a job folder (status.json, launch.json, lr_plan.json) is a few KB when well formed
# (an LR plan: ~800 points). Job code may write it: a 144 MB lr_plan.json took the service from 0.2 to 2.5 GB and
# stopped its scheduling rounds for 100 s, read and parsed whole at every refit; a larger one, the OOM killer.
MAX_RECORD_BYTES = 1 << 20
MAX_PLAN_POINTS = 4096   # dlsched.torch.lr_plan writes at most ~800; 70 000 (within 1 MiB) slowed every round 40 %


class OversizedRecord(ValueError):
    """A job-folder record over ``MAX_RECORD_BYTES``: read as malformed (its readers' ``ValueError``)."""


def read_regular(path: str | Path, errors: str = "strict", max_bytes: int = MAX_RECORD_BYTES) -> str:
    """``Path(path).read_text(errors=errors)`` through ``open_regular``, at most ``max_bytes`` (``OversizedRecord``
    past them: nothing more is read)."""
    with open_regular(path) as f:
        data = f.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise OversizedRecord(f"{path}: over {max_bytes} bytes")
    return data.decode("utf-8", errors)


def appended_lines(path: Path, offset: int, max_bytes: int = -1) -> tuple[list[bytes], int]:
    """The complete lines of ``path`` past byte ``offset`` (at most ``max_bytes`` read) and the offset after them; a
    partial last line is left for the next read (its writer may be mid-line); none while the file does not exist."""
    try:
        with open_regular(path) as f:
            f.seek(offset)
            chunk = f.read(max_bytes)
    except FileNotFoundError:
        return [], offset
    end = chunk.rfind(b"\n") + 1
    return chunk[:end].splitlines(), offset + end


def control_bytes(job_dir: Path) -> bytes | None:
    """DIR/control.json as it is now (None: absent)."""
    try:
        with open_regular(Path(job_dir) / "control.json") as f:
            return f.read()
    except OSError:
        return None


def write_status(job_dir: Path, state: str, pid: int, workers: int, error: str | None = None, **extra: Any) -> None:
    atomic_write_json(Path(job_dir) / "status.json",
                      {"state": state, "pid": pid, "workers": workers, "error": error, **extra})


def job_program(entry: str | None, command: list[str] | None) -> str:
    """What a job folder trains, as status.json records it: the make_job entry, or the script (its file or
    ``-m`` module as given; not its arguments, which a rerun may change, e.g. more epochs)."""
    if command is None:
        return str(entry)
    module = next((command[i + 1] for i, a in enumerate(command[:-1]) if a == "-m"), None)
    script = module or next((a for a in command if a.endswith(".py")), command[0])
    return f"{'-m ' if module else ''}{script}"


def read_lr_plan(job_dir: Path) -> dict | None:
    """DIR/lr_plan.json (``dlsched.torch.lr_plan``) when it is there and well formed: ``step`` and ``batch_size``
    numbers, ``steps`` increasing past ``step``, one finite ``lr`` >= 0 per step; else None. ``samples`` (>= 0) and
    ``lr_factor`` (> 0), which place it at another batch, are dropped unless both are well formed (older runtimes
    write neither)."""
    try:
        plan = json.loads(read_regular(Path(job_dir) / "lr_plan.json"))
        x, lr, at = plan["steps"], plan["lr"], float(plan["step"])
        float(plan["batch_size"])
        ok = (isinstance(x, list) and isinstance(lr, list) and 0 < len(x) == len(lr) <= MAX_PLAN_POINTS
              and all(isinstance(v, (int, float)) for v in x + lr) and at < x[0]
              and all(a < b for a, b in zip(x, x[1:])) and all(0 <= v < float("inf") for v in lr))
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if not ok:
        return None
    samples, factor = plan.get("samples"), plan.get("lr_factor")
    if not (is_number(samples) and 0 <= samples < float("inf") and is_number(factor) and 0 < factor < float("inf")):
        plan.pop("samples", None)
        plan.pop("lr_factor", None)
    return plan


def planned_samples(plan: dict) -> list[float] | None:
    """The samples trained by the end of each of a ``read_lr_plan`` plan's steps (at its ``batch_size`` from the
    ``samples`` of its ``step``): where it lies at any batch, the schedulers' pace counting samples; None for a
    plan that does not say its samples."""
    if "samples" not in plan:
        return None
    return [plan["samples"] + (x - plan["step"]) * plan["batch_size"] for x in plan["steps"]]


def planned_schedule_lr(plan: dict) -> list[float]:
    """A plan's LR over its LR rule's ``lr_factor`` (1 where it does not say it): the schedule's LR."""
    return [v / plan.get("lr_factor", 1.0) for v in plan["lr"]]


def read_status(job_dir: Path) -> dict | None:
    """DIR/status.json, or None while it does not exist yet or cannot be read, or is not an object (job code may
    write it: a list there raised in every scheduling round); an ``error`` that is not text is given as text."""
    try:
        status = json.loads(read_regular(Path(job_dir) / "status.json"))
    except (OSError, ValueError):
        return None
    if not isinstance(status, dict):
        return None
    if status.get("error") is not None and not isinstance(status["error"], str):
        status["error"] = json.dumps(status["error"], default=str)[:500]
    return status
