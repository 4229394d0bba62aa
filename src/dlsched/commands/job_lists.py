"""The CLI's reads of ``GET /jobs``, which answers a page at a time (``service/job_pages.py``): every page of the
active jobs (each one matters), and of the ended ones only the newest ``limit`` (a service that ran for months
keeps thousands; ``history`` lists them)."""
from __future__ import annotations

import sys
from typing import Callable

from dlsched.service.job_pages import MAX_JOBS_PAGE


def newest_jobs(client, params: dict, limit: int = 0) -> tuple[list[dict], int]:
    """The newest ``limit`` jobs matching ``params`` (every one where 0), in id order, and how many older ones
    match beyond them."""
    jobs: list[dict] = []
    before = None
    while True:
        want = MAX_JOBS_PAGE if not limit else min(MAX_JOBS_PAGE, limit - len(jobs))
        r = client.request("GET", "/jobs", params={**params, "limit": want,
                                                   **({"before": before} if before is not None else {})})
        page = r.json()
        jobs = page + jobs
        total = int(r.headers.get("x-total-count", len(jobs)))
        before = r.headers.get("x-next-before")
        if before is None or (limit and len(jobs) >= limit):
            return jobs, max(0, total - len(jobs)) if before is not None else 0


def filtered_newest(client, params: dict, keep: Callable[[dict], bool], limit: int) -> tuple[list[dict], bool]:
    """The newest ``limit`` (all where 0) jobs matching ``params`` that ``keep`` keeps (filters the service does
    not apply), in id order, and whether older ones were left unread."""
    jobs: list[dict] = []
    before = None
    page = min(MAX_JOBS_PAGE, max(limit, 100)) if limit else MAX_JOBS_PAGE   # more pages where the filters drop some
    while True:
        r = client.request("GET", "/jobs", params={**params, "limit": page,
                                                   **({"before": before} if before is not None else {})})
        jobs = [j for j in r.json() if keep(j)] + jobs
        before = r.headers.get("x-next-before")
        if limit and len(jobs) >= limit:
            return jobs[-limit:], len(jobs) > limit or before is not None
        if before is None:
            return jobs, False


def note_unshown(count: int | bool, what: str, hint: str) -> None:
    """One line on stderr (never in ``--json``'s stdout) saying that older jobs were left out, and how to see them."""
    if count:
        n = f"{count} older" if not isinstance(count, bool) else "older"
        print(f"{n} {what} not shown: {hint}", file=sys.stderr, flush=True)
