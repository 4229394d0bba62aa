"""``GET /jobs`` a page at a time: the newest ``limit`` jobs that match, older pages by ``before``.

A service that runs for months keeps every job it ever ran (``history`` reads them): answering ``GET /jobs`` with
all of them made each ``dlsched status`` (once a second under ``--watch``) decode, predict-join and send every job
ever submitted. A page holds the newest matching jobs below ``before`` (a job id), oldest first as before;
``next_before`` is the id to ask the next page with, None on the last page; ``total`` counts every match.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Iterable

from dlsched.service.store import TERMINAL, JobRecord, Store, _decode

DEFAULT_JOBS_PAGE = 500
MAX_JOBS_PAGE = 5_000
MAX_IDS = 1_000   # ids one request may name (``?id=1,2,3``)


@dataclass(frozen=True)
class JobPage:
    jobs: list[JobRecord]
    next_before: int | None
    total: int


def job_page(store: Store, states: Iterable[str] | None = None, ids: Iterable[int] | None = None,
             limit: int = DEFAULT_JOBS_PAGE, before: int | None = None) -> JobPage:
    """The newest ``limit`` (at most ``MAX_JOBS_PAGE``) jobs in ``states`` (any where None), of ``ids`` (any where
    None), with an id below ``before``; in id order."""
    where, args = [], []
    for column, values in (("state", states), ("id", ids)):
        if values is not None:
            values = list(values)
            where.append(f"{column} IN ({','.join('?' * len(values))})")
            args += values
    cond = (" WHERE " + " AND ".join(where)) if where else ""
    c = store._conn()
    total = c.execute("SELECT COUNT(*) FROM jobs" + cond, args).fetchone()[0]
    if before is not None:
        cond += (" AND " if cond else " WHERE ") + "id < ?"
        args.append(before)
    limit = max(1, min(limit, MAX_JOBS_PAGE))
    # one past the page: whether an older page exists, without a second count
    rows = c.execute(f"SELECT * FROM jobs{cond} ORDER BY id DESC LIMIT ?", args + [limit + 1]).fetchall()
    jobs = [_decode(r, store._records) for r in reversed(rows[:limit])]
    return JobPage(jobs, jobs[0].id if len(rows) > limit else None, total)


def recently_ended(store: Store, n: int) -> list[JobRecord]:
    """The ``n`` jobs that ended last, the latest first (the dashboard's "recently ended")."""
    rows = store._conn().execute(f"SELECT * FROM jobs WHERE state IN "
                                 f"({','.join('?' * len(TERMINAL))}) ORDER BY end_time DESC, id DESC LIMIT ?",
                                 (*TERMINAL, n)).fetchall()
    return [_decode(r, store._records) for r in rows]


def newest_allocations(store: Store, n_jobs: int) -> tuple[list[dict], int]:
    """The allocation rows of the ``n_jobs`` newest jobs that hold or held any, and how many jobs have some: the
    timeline draws those, not every allocation a months-old store keeps."""
    c = store._conn()
    with_allocs = c.execute("SELECT COUNT(DISTINCT job_id) FROM allocations").fetchone()[0]
    rows = c.execute("SELECT * FROM allocations WHERE job_id IN (SELECT DISTINCT job_id FROM allocations "
                     "ORDER BY job_id DESC LIMIT ?) ORDER BY id", (n_jobs,))
    return [dict(r) | {"placement": json.loads(r["placement"])} for r in rows], with_allocs
