"""How long a running job's rotated ``progress.jsonl`` segments stay in its folder (docs/runtime.md, "Retention").

Rotation bounds each file of a job's log, not its folder: a month-long job kept every segment (35 MB a day at a step
a second) although the service had read and stored each record. Once an hour, a segment of an active job goes once
all of this holds:

* the service has read past it (it ends at or before the job's ``progress_offset``): its steps are in the store;
* a resume will never read it: the job's resume summary (``progress.resume.json``, folded up to the log's end first,
  as a resume would: ``resume_log.summarised_offset``) covers it, and it does not hold the byte before the summary's
  offset (the summary checks that it is of this log by the bytes before it);
* it was last written (rotated) more than ``progress_keep_days`` ago;
* the job does not record its samples (``samples/``: the exactly-once audit reads every rollback in the whole log).

The live file, and the segment a rotation cut short left under both names, are never removed. One
``progress_trimmed`` event per job says which bytes went; ``dlsched predict curve`` on the folder says that its log
starts past them.
"""
from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Callable

from dlsched.service.store import ACTIVE, JobRecord, Store
from dlsched.train.progress_log import LIVE, files_from
from dlsched.train.resume_log import summarised_offset

log = logging.getLogger("dlsched.service")

TRIMMED = "progress_trimmed"
EVERY_S = 3600.0   # segments are days old when they go: an hour late is nothing


def removable(job_dir: Path, stored_offset: int, older_than: float,
              summarise: Callable[[Path], int] = summarised_offset) -> list[tuple[int, int, Path]]:
    """(BASE, size, path) of the job's rotated segments that may go (the module's rules); the summary is folded only
    where a segment is old enough and stored, so a job with none pays no read."""
    if (job_dir / "samples").exists():
        return []
    files = files_from(job_dir)
    if not files or files[-1][1].name != LIVE:
        return []   # no live file: not a log this service knows how to read
    candidates = []
    for base, path in files[:-1]:
        try:
            st = os.stat(path, follow_symlinks=False)
        except OSError:
            continue
        if not (base + st.st_size <= stored_offset and st.st_mtime < older_than):
            break   # only the log's oldest go: never a hole in the middle of what stays
        candidates.append((base, st.st_size, path))
    if not candidates:
        return []
    summary = summarise(job_dir)
    return [(b, n, p) for b, n, p in candidates if b + n < summary]   # the byte before the summary's offset stays


class SegmentRetention:
    def __init__(self, store: Store, job_dir: Callable[[JobRecord], Path], days: float | None):
        self.store, self.job_dir = store, job_dir
        self.keep_s = None if days is None else days * 86_400.0
        self.last: float | None = None

    def maybe_trim(self, now: float) -> dict[int, int]:
        """Once an hour (and at the first round): remove what may go of every active job's log; bytes freed per job."""
        if self.keep_s is None or (self.last is not None and now - self.last < EVERY_S):
            return {}
        self.last = now
        freed = {}
        for job in self.store.jobs(states=ACTIVE):
            if not job.job_dir or not job.progress_offset:
                continue
            try:
                gone = self._trim(Path(self.job_dir(job)), job, now)
            except OSError as e:   # a folder gone or unreadable: the job's own read says so; never the round's end
                log.warning("job %s: progress segments not trimmed (%s)", job.id, e)
                continue
            if gone:
                freed[job.id] = sum(n for _, n, _ in gone)
                self.store.event(TRIMMED, job.id, now, segments=len(gone), bytes=freed[job.id],
                                 first=gone[0][0], to=gone[-1][0] + gone[-1][1], keep_days=self.keep_s / 86_400.0)
        return freed

    def _trim(self, job_dir: Path, job: JobRecord, now: float) -> list[tuple[int, int, Path]]:
        gone = []
        for base, size, path in removable(job_dir, job.progress_offset, now - self.keep_s):
            path.unlink()
            gone.append((base, size, path))
        return gone
