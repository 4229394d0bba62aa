"""What a resumed run takes from the job's earlier runs' progress.jsonl, in one pass over it.

The file grows by a record a step for the job's whole life (about 400 bytes with one worker, more with more
workers and partitions): 35 MB a day at a step a second, 350 MB at ten. Read as a list of records, a 100 MB log
took 8 s and 600 MB of memory at every start of the coordinator (each resume after a preemption or a lost
coordinator); read a record at a time, the memory is the few facts below.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from dlsched.train.files import iter_json_lines, read_status
from dlsched.train.replayed_records import ReplayedRecords


def _int(v) -> int:
    return v if isinstance(v, int) and not isinstance(v, bool) else -1


SKIPPED_KEPT = 20   # a file damaged all over is told by its count, not an event a line


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
    before its status said so); ``replays``: ``ReplayedRecords.from_log``."""
    out = ResumeLog(generation=_int((read_status(job_dir) or {}).get("generation")))

    def bad(line: int, error: str, text: bytes) -> None:
        # a damaged record mid-file (a flipped byte, a hand's edit) failed every later resume of the job for good;
        # the samples resume from the checkpoint, and a lost record costs at most a replay's bookkeeping
        out.skipped_count += 1
        if len(out.skipped) < SKIPPED_KEPT:
            out.skipped.append({"line": line, "error": error[:200],
                                "text": text[:120].decode("utf-8", "replace").rstrip("\n")})

    for rec in iter_json_lines(Path(job_dir) / "progress.jsonl", bad=bad):
        if not isinstance(rec, dict):
            continue
        out.answered = max(out.answered, _int(rec.get("control_generation")))
        out.generation = max(out.generation, _int(rec.get("generation")))
        if "event" not in rec and rec.get("step") == restored_step:
            out.batch = rec.get("batch_size")
        out.replays.keep(rec)
    out.replays.restored(restored_step)
    return out


def skipped_events(log: ResumeLog, now: float) -> list[dict]:
    """One ``progress_line_skipped`` event per bad line the resume passed over (the first SKIPPED_KEPT), each with
    the count of all of them: the operator learns which line of the file is damaged, and the job trains on."""
    return [{"event": "progress_line_skipped", "time": now, **s, "skipped_lines": log.skipped_count}
            for s in log.skipped]
