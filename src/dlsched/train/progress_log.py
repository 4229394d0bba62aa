"""DIR/progress.jsonl: its writers, its rotation into segments, and reading it across them as one stream of bytes
(protocol: docs/runtime.md, "Rotation").

A job's log grew by a record a step for its whole life (35 MB a day at a step a second). The runtime's own log now
rotates it once it passes ``rotate_bytes``: the live file becomes ``progress.<BASE>.jsonl`` and a new live file
begins. BASE, 16 digits, is the *logical offset* of a file's first byte: where it starts in the concatenation of
every segment, in order, and then the live file. The live file says its BASE on its first line
(``{"event": "progress_segment", "base": BASE, "time": T}``); one without that line starts at 0 (never rotated: every
log written before rotation existed). Every offset a reader keeps (the service's ``progress_offset``, a resume's
summary, a tail) is logical, so it means the same byte before and after a rotation.
"""
from __future__ import annotations

import fcntl
import json
import logging
import os
import re
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator

from dlsched.train.files import drop_torn_tail, iter_json_lines, open_regular
from dlsched.train.no_space import is_no_space

log = logging.getLogger("dlsched.train")

LIVE = "progress.jsonl"
HEADER = "progress_segment"           # the live file's first line once the log has rotated: its BASE
ROTATE_ENV = "DLSCHED_PROGRESS_ROTATE_BYTES"
ROTATE_BYTES = 64 << 20               # about two days at a step a second with one worker
_SEGMENT = re.compile(r"progress\.(\d{16})\.jsonl")
HEADER_BYTES = 256                    # a header line is shorter


def segment_name(base: int) -> str:
    return f"progress.{base:016d}.jsonl"


def segments(job_dir: Path) -> list[tuple[int, Path]]:
    """The rotated segments of the job's log, (BASE, path) in order."""
    try:
        names = os.listdir(job_dir)
    except OSError:
        return []
    return sorted((int(m.group(1)), Path(job_dir) / n) for n in names if (m := _SEGMENT.fullmatch(n)))


def header_base(line: bytes) -> int | None:
    """The BASE a ``progress_segment`` line states, else None."""
    try:
        rec = json.loads(line)
    except ValueError:
        return None
    base = rec.get("base") if isinstance(rec, dict) and rec.get("event") == HEADER else None
    return base if isinstance(base, int) and not isinstance(base, bool) and base >= 0 else None


def _base_of(f) -> int:
    """The BASE of an open log file (its header's, else 0); leaves the file at its start."""
    f.seek(0)
    base = header_base(f.readline(HEADER_BYTES))
    f.seek(0)
    return base or 0


def rotate_limit() -> int:
    """``DLSCHED_PROGRESS_ROTATE_BYTES`` (0: never rotate), else ROTATE_BYTES."""
    raw = os.environ.get(ROTATE_ENV, "")
    try:
        return max(0, int(raw)) if raw else ROTATE_BYTES
    except ValueError:
        log.warning("%s=%r is not a number of bytes: rotating at %d", ROTATE_ENV, raw, ROTATE_BYTES)
        return ROTATE_BYTES


@contextmanager
def _locked(fd: int, exclusive: bool):
    """The job's log lock (DIR/progress.lock): appends share it, a rotation holds it alone, so no line is appended
    to a file after it was rotated (a rank's and the coordinator's logs write beside each other)."""
    fcntl.flock(fd, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
    try:
        yield
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)


class ProgressLog:
    """Appends one JSON object per line to DIR/progress.jsonl (flushed per line so tailers see it). Each append goes
    to the live file, reopened when another writer rotated it; the runtime's own log (``first``) rotates it past
    ``rotate_limit()`` bytes."""

    def __init__(self, job_dir: Path, echo: Callable[[dict], None] | None = None, first: bool = False):
        """``first``: the runtime's own log, opened at its start (it holds the folder's lock): an earlier run's torn
        last line is cut off (``drop_torn_tail``), and it rotates the log; a rank appending beside a live writer
        leaves the file as it is."""
        self.dir = Path(job_dir)
        self.path = self.dir / LIVE
        if first:
            drop_torn_tail(self.path)
        self.rotate_bytes = rotate_limit() if first else 0
        self._f = open(self.path, "a", buffering=1)
        self._lock_file = open(self.dir / "progress.lock", "ab")   # a file object: a log dropped unclosed frees it
        self._lock = self._lock_file.fileno()
        self._mutex = threading.Lock()   # the coordinator's threads share one log
        self.echo = echo   # e.g. train.progress_lines.HumanProgress: the same records as human lines on stdout

    def write(self, obj: dict) -> None:
        line = json.dumps(obj) + "\n"
        with self._mutex:
            with _locked(self._lock, exclusive=False):
                self._follow()
                self._f.write(line)   # one line, flushed (line buffering): the file's size is what is written
                full = self.rotate_bytes and os.fstat(self._f.fileno()).st_size >= self.rotate_bytes
            if full:
                self._rotate()
        if self.echo is not None:
            self.echo(obj)

    def _follow(self) -> None:
        """Reopen the live file if this one is no longer it (another writer rotated it)."""
        try:
            if os.stat(self.path).st_ino == os.fstat(self._f.fileno()).st_ino:
                return
        except FileNotFoundError:
            pass
        self._f.close()
        self._f = open(self.path, "a", buffering=1)

    def _rotate(self) -> None:
        """The live file becomes ``progress.<BASE>.jsonl`` (a hard link first: the live name is never missing) and a
        new live file starts with its header, BASE = the old one's BASE + its size."""
        with _locked(self._lock, exclusive=True):
            self._follow()
            self._f.flush()
            os.fsync(self._f.fileno())
            with open(self.path, "rb") as f:
                base = _base_of(f)
                size = f.seek(0, os.SEEK_END)
            if self.rotate_bytes and size < self.rotate_bytes:
                return   # another writer rotated it meanwhile
            segment = self.dir / segment_name(base)
            try:
                os.link(self.path, segment)
            except FileExistsError:   # a rotation cut short before it replaced the live file: that one is it
                if not os.path.samefile(self.path, segment):
                    log.warning("%s: not rotated (%s is another file)", self.path, segment.name)
                    self.rotate_bytes = 0
                    return
            except OSError as e:
                if is_no_space(e):    # a full disk: the runtime stops as for any write (train/no_space.py)
                    raise
                log.warning("%s: not rotated (%s)", self.path, e)   # no hard links here: the log stays whole
                self.rotate_bytes = 0
                return
            tmp = self.dir / f".{LIVE}.rotating"
            try:   # cut short (a full disk), the live file goes on as it is, under both names
                with open(tmp, "w") as f:
                    f.write(json.dumps({"event": HEADER, "base": base + size, "time": time.time()}) + "\n")
                    f.flush()
                    os.fsync(f.fileno())
                os.replace(tmp, self.path)
            except BaseException:
                tmp.unlink(missing_ok=True)
                raise
            self._follow()

    def close(self) -> None:
        self._f.close()
        self._lock_file.close()
        close_echo = getattr(self.echo, "close", None)
        if close_echo is not None:
            close_echo()


def _drop_header(lines: list[bytes], at_start: bool) -> list[bytes]:
    return lines[1:] if at_start and lines and header_base(lines[0]) is not None else lines


def read_lines(job_dir: Path, offset: int, max_bytes: int = -1) -> tuple[list[bytes], int, tuple[int, int] | None]:
    """The complete lines of the job's log from logical ``offset`` (at most ``max_bytes`` read), on through the
    files after a rotated segment's end, the offset after them, and the range (from, to) skipped where no file holds
    ``offset`` (a segment deleted or compressed by hand; a torn line that ends a segment), then with no lines (a
    skip met after some is the next read's). A partial last line of the live file is left for the next read; none
    while there is no log. Header lines are left out. One file a read lost the records past a rotation at a job's
    end: the service reads a finished job once more, after its exit."""
    lines, end = [], offset
    while True:
        left = -1 if max_bytes < 0 else max_bytes - (end - offset)
        if left == 0:
            return lines, end, None
        more, after, skipped = _read_one_file(job_dir, end, left)
        if skipped is not None and not lines:
            return more, after, skipped
        if skipped is not None or after == end:
            return lines, end, None
        lines, end = lines + more, after


def _read_one_file(job_dir: Path, offset: int, max_bytes: int) -> tuple[list[bytes], int, tuple[int, int] | None]:
    """``read_lines`` within the one file that holds ``offset``."""
    job_dir = Path(job_dir)
    try:
        with open_regular(job_dir / LIVE) as f:
            live = _base_of(f)
            if offset >= live:
                f.seek(offset - live)
                chunk = f.read(max_bytes)
                end = chunk.rfind(b"\n") + 1
                return _drop_header(chunk[:end].splitlines(), offset == live), offset + end, None
    except FileNotFoundError:
        live = None
    segs = [(b, p) for b, p in segments(job_dir) if live is None or b < live]
    for b, p in reversed(segs):
        if b <= offset:
            try:
                with open_regular(p) as f:
                    size = f.seek(0, os.SEEK_END)
                    if offset < size + b:
                        f.seek(offset - b)
                        chunk = f.read(max_bytes)
                        end = chunk.rfind(b"\n") + 1
                        if end == 0 and offset + len(chunk) == b + size:   # a torn line ends it: never completed
                            return [], b + size, (offset, b + size)
                        return _drop_header(chunk[:end].splitlines(), offset == b), offset + end, None
            except FileNotFoundError:
                pass
            break
    later = [b for b, _ in segs if b > offset] + ([live] if live is not None and live > offset else [])
    return ([], min(later), (offset, min(later))) if later else ([], offset, None)


def unread_bytes(job_dir: Path, offset: int) -> int:
    """Bytes of the log's file that holds logical ``offset`` past it (0 where none does)."""
    files = files_from(job_dir, offset)
    try:
        return max(0, files[0][1].stat().st_size - (offset - files[0][0])) if files else 0
    except OSError:
        return 0


def files_from(job_dir: Path, offset: int = 0) -> list[tuple[int, Path]]:
    """(BASE, path) of the log's files that hold bytes at or past logical ``offset``, in order; the live one last."""
    job_dir = Path(job_dir)
    try:
        with open_regular(job_dir / LIVE) as f:
            live = _base_of(f)
    except FileNotFoundError:
        live = None
    segs = [(b, p) for b, p in segments(job_dir) if live is None or b < live]
    out = segs + ([(live, job_dir / LIVE)] if live is not None else [])
    keep = [i for i, (b, _) in enumerate(out) if i + 1 == len(out) or out[i + 1][0] > offset]
    return out[keep[0]:] if keep else []


def iter_records(job_dir: Path, warn_torn: bool = True, bad: Callable[[int, str, bytes], None] | None = None,
                 offset: int = 0, seen: Callable[[bytes], None] | None = None) -> Iterator:
    """``files.iter_json_lines`` over the whole log (its segments, then the live file) from logical ``offset``;
    header lines are passed to ``seen`` but not yielded. A segment's torn last line is skipped as a bad line."""
    files = files_from(job_dir, offset)
    for i, (base, path) in enumerate(files):
        last = i + 1 == len(files)
        for rec in iter_json_lines(path, warn_torn and last, bad, max(0, offset - base), seen):
            if not (isinstance(rec, dict) and rec.get("event") == HEADER):
                yield rec


def removed_bytes(job_dir: Path) -> int:
    """How many of the log's first bytes no file holds any more (0 for a whole log): the BASE of its first file, where
    the service's retention removed the segments before it (``service/progress_segments.py``)."""
    files = files_from(job_dir)
    return files[0][0] if files else 0


def read_progress(job_dir: Path) -> list[dict]:
    """Every record of the job's log, its rotated segments first."""
    return list(iter_records(job_dir))


class ProgressTail:
    """The records appended to the job's log since the last ``read`` (complete lines only; a torn or malformed
    line is skipped), across rotations. A reader that polls a live job: re-reading the whole log at each poll took
    0.4 s at 50 000 steps, a core of a 2-core host at 5 polls a second. ``from_end`` starts past the records
    already there."""

    def __init__(self, job_dir: Path, from_end: bool = False):
        self.dir, self.offset = Path(job_dir), 0
        if from_end:
            self.read()

    def read(self) -> list[dict]:
        out = []
        while True:
            lines, end, skipped = read_lines(self.dir, self.offset)
            if end == self.offset:
                return out
            self.offset = end
            for line in lines:
                try:
                    rec = json.loads(line) if line.strip() else None
                except ValueError:
                    continue
                if isinstance(rec, dict):
                    out.append(rec)
