"""The CLI's reads of ``GET /jobs``, which answers a page at a time (``service/job_pages.py``): every page of the
active jobs (each one matters), and of the ended ones only the newest ``limit`` (a service that ran for months
keeps thousands; ``history`` lists them)."""
from __future__ import annotations

import sys
from typing import Callable

from dlsched.service.job_pages import MAX_JOBS_PAGE


def newest_jobs(client, params: dict, limit: int = 0,
                keep: Callable[[dict], bool] | None = None) -> tuple[list[dict], int | bool]:
    """The newest ``limit`` jobs (every one where 0) matching ``params`` and, where given, ``keep`` (a filter the
    service does not apply), in id order; and the older ones that match left out: their count, or where ``keep``
    filters (the service cannot count them) whether any were left unread."""
    jobs: list[dict] = []
    before = None
    while True:
        # exactly the jobs still wanted, or with ``keep`` whole pages (it drops some of each)
        want = MAX_JOBS_PAGE if not limit else min(MAX_JOBS_PAGE, max(limit, 100) if keep else limit - len(jobs))
        r = client.request("GET", "/jobs", params={**params, "limit": want,
                                                   **({"before": before} if before is not None else {})})
        jobs = [j for j in r.json() if keep is None or keep(j)] + jobs
        before = r.headers.get("x-next-before")
        if before is None or (limit and len(jobs) >= limit):
            break
    shown = jobs[-limit:] if limit else jobs
    if keep is not None:
        return shown, len(jobs) > len(shown) or before is not None
    total = int(r.headers.get("x-total-count", len(jobs)))
    return shown, max(0, total - len(shown)) if before is not None else 0


def note_unshown(count: int | bool, what: str, hint: str) -> None:
    """One line on stderr (never in ``--json``'s stdout) saying that older jobs were left out, and how to see them."""
    if count:
        n = f"{count} older" if not isinstance(count, bool) else "older"
        print(f"{n} {what} not shown: {hint}", file=sys.stderr, flush=True)
