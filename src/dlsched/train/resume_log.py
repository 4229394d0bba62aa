"""What a resumed run takes from the job's earlier runs' progress.jsonl, in one pass over what is new since the last.

The file grows by a record a step for the job's whole life (about 400 bytes with one worker, more with more
workers and partitions): 35 MB a day at a step a second, 350 MB at ten. Read as a list of records, a 100 MB log
took 8 s and 600 MB of memory at every start of the coordinator (each resume after a preemption or a lost
coordinator); read a record at a time, the memory is the few facts below, but the time still grew with the job's
age (82 MB: 4.4 s a resume). Each resume now leaves what it read folded into ``progress.resume.json`` (the facts,
and the byte offset they are of), and the next one reads only the records past that offset: a resume costs the
records written since the last one. Its offsets are the log's logical ones (``train.progress_log``): a
rotation moves no record past them.
"""
from __future__ import annotations

import hashlib
import json
import logging
from dataclasses import dataclass, field
from pathlib import Path

from dlsched.train.files import atomic_write_json, open_regular, read_regular, read_status
from dlsched.train.progress_log import files_from, iter_records
from dlsched.train.replayed_records import ReplayedRecords

log = logging.getLogger(__name__)
SKIPPED_KEPT = 20   # a file damaged all over is told by its count, not an event a line
SUMMARY = "progress.resume.json"
CHECK_BYTES = 512   # the bytes before the offset (a record or two) whose hash ties a summary to this very file
KEPT_BATCHES = 8    # the batch of the step records of the newest checkpoints' steps (a resume's fallback)


def _int(v) -> int:
    return v if isinstance(v, int) and not isinstance(v, bool) else -1


@dataclass
class ResumeLog:
    answered: int = -1            # the highest control.json generation an earlier run answered or gave up
    generation: int = -1          # the highest coordinator generation an earlier run published
    batch: int | None = None      # the batch the restored step trained at, by its last step record
    replays: ReplayedRecords = field(default_factory=ReplayedRecords)
    skipped: list[dict] = field(default_factory=list)   # bad lines before the last: (at most SKIPPED_KEPT) events
    skipped_count: int = 0


def read_resume_log(job_dir: Path, restored_step: int) -> ResumeLog:
    """The job's progress records read once, none kept. ``answered``: a control.json request an earlier run answered
    or gave up is not applied again (the file is a level and outlives the run: a re-run applied the last run's
    request again, over its own ``--workers``); ``generation``: in status.json or on a step record (a run killed
    before its status said so); ``replays``: ``ReplayedRecords.from_log``. The records before the offset of the
    last resume's summary are taken from it; a summary that is not of this file (moved, cut, rewritten) is ignored."""
    out = ResumeLog(generation=_int((read_status(job_dir) or {}).get("generation")))
    offset, lines, batches, checkpoints = _read_summary(Path(job_dir), out)

    def bad(line: int, error: str, text: bytes) -> None:
        # a damaged record mid-file (a flipped byte, a hand's edit) failed every later resume of the job for good;
        # the samples resume from the checkpoint, and a lost record costs at most a replay's bookkeeping
        out.skipped_count += 1
        if len(out.skipped) < SKIPPED_KEPT:
            out.skipped.append({"line": lines + line, "error": error[:200],
                                "text": text[:120].decode("utf-8", "replace").rstrip("\n")})

    read = _Reading(offset, lines)
    for rec in iter_records(job_dir, bad=bad, offset=offset, seen=read.seen):   # logical offsets: across rotations
        if not isinstance(rec, dict):
            continue
        out.answered = max(out.answered, _int(rec.get("control_generation")))
        out.generation = max(out.generation, _int(rec.get("generation")))
        if "event" not in rec and isinstance(rec.get("step"), int):
            batches[rec["step"]] = rec.get("batch_size")
        elif rec.get("event") == "checkpoint" and isinstance(rec.get("step"), int):
            checkpoints.append(rec["step"])
        out.replays.keep(rec)
        if len(batches) > 4 * KEPT_BATCHES:   # only the newest checkpoints' steps (and the restored one) are read
            batches = _pruned(batches, checkpoints, restored_step)
    out.batch = batches.get(restored_step)
    _write_summary(Path(job_dir), read, out, _pruned(batches, checkpoints, restored_step), checkpoints)
    out.replays.restored(restored_step)
    return out


def summarised_offset(job_dir: Path) -> int:
    """Fold the records written since the last summary into it now, as a resume does (restoring no step), and return
    the logical offset it covers: a resume never reads the bytes before it again, but checks that the summary is of
    this log by the CHECK_BYTES before it, so the file that holds the byte before it must stay
    (``service/progress_segments.py``). 0 where no summary could be written (an empty log, a full disk)."""
    read_resume_log(job_dir, restored_step=-1)
    offset, *_ = _read_summary(Path(job_dir), ResumeLog())
    return offset


class _Reading:
    """Where the complete lines read so far end (a torn last line is not past it) and how many there were."""

    def __init__(self, offset: int, lines: int):
        self.offset, self.lines = offset, lines

    def seen(self, line: bytes) -> None:
        if line.endswith(b"\n"):
            self.offset += len(line)
            self.lines += 1


def _pruned(batches: dict[int, int | None], checkpoints: list[int], restored_step: int) -> dict[int, int | None]:
    keep = set(checkpoints[-KEPT_BATCHES:]) | {restored_step}
    newest = sorted(batches)[-KEPT_BATCHES:]
    return {s: b for s, b in batches.items() if s in keep or s in newest}


def skipped_events(log: ResumeLog, now: float) -> list[dict]:
    """One ``progress_line_skipped`` event per bad line the resume passed over (the first SKIPPED_KEPT), each with
    the count of all of them: the operator learns which line of the file is damaged, and the job trains on."""
    return [{"event": "progress_line_skipped", "time": now, **s, "skipped_lines": log.skipped_count}
            for s in log.skipped]


def _check(job_dir: Path, offset: int) -> str | None:
    """The hash of the bytes before logical ``offset`` (which must end a line) in the log's file that holds them (at
    most CHECK_BYTES, from that file's start on), None where the log has no such bytes."""
    files = files_from(job_dir, offset - 1) if offset > 0 else []
    if not files:
        return None
    base, path = files[0]
    start = max(base, offset - CHECK_BYTES)
    try:
        with open_regular(path) as f:
            f.seek(start - base)
            before = f.read(offset - start)
    except OSError:
        return None
    if len(before) != offset - start or (before and not before.endswith(b"\n")):
        return None
    return hashlib.sha256(before).hexdigest()


def _read_summary(job_dir: Path, out: ResumeLog) -> tuple[int, int, dict, list]:
    """(offset, lines, batches, checkpoints) the last resume's summary holds, its facts put into ``out``; from the
    file's start where there is none or it is not of this file."""
    try:
        s = json.loads(read_regular(job_dir / SUMMARY))
        offset, lines = int(s["offset"]), int(s["lines"])
        if offset <= 0 or _check(job_dir, offset) != s["check"]:
            return 0, 0, {}, []
        out.answered, out.generation = max(out.answered, int(s["answered"])), max(out.generation, int(s["generation"]))
        out.replays.evaluations.update({int(k): int(n) for k, n in s["evaluations"]})
        out.replays.ended.update(s["ended"])
        return offset, lines, {int(k): b for k, b in s["batches"]}, [int(c) for c in s["checkpoints"]]
    except FileNotFoundError:
        return 0, 0, {}, []
    except (OSError, ValueError, KeyError, TypeError) as e:   # a damaged summary: the whole file is read, as before
        log.warning("%s: ignoring it (%s); reading the whole progress log", job_dir / SUMMARY, e)
        return 0, 0, {}, []


def _write_summary(job_dir: Path, read: _Reading, out: ResumeLog, batches: dict, checkpoints: list) -> None:
    check = _check(job_dir, read.offset)
    if read.offset <= 0 or check is None:
        return
    try:
        atomic_write_json(job_dir / SUMMARY, {
            "offset": read.offset, "lines": read.lines, "check": check, "answered": out.answered,
            "generation": out.generation, "evaluations": sorted((k, n) for k, n in out.replays.evaluations.items() if isinstance(k, int)),
            "ended": [e for e in out.replays.ended if isinstance(e, int)], "batches": sorted(batches.items()),
            "checkpoints": checkpoints[-KEPT_BATCHES:]})
    except OSError as e:   # a full disk: the next resume reads the whole file again, no worse than before
        log.warning("%s: not written (%s)", job_dir / SUMMARY, e)
