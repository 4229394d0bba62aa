"""Bounds on what a request may carry, checked at the edge so no handler sees an out-of-range value.

Ids and offsets are SQLite/C integers: past 2^63-1 SQLite raises OverflowError and ``seek`` fails, which
were 500s; FastAPI refuses them with a 422 instead when a route types its parameter with these."""
from __future__ import annotations

from typing import Annotated

from fastapi import Path, Query

from dlsched.documents import MAX_DOCUMENT_BYTES

MAX_ID = (1 << 63) - 1              # SQLite INTEGER
DEFAULT_MAX_BODY = MAX_DOCUMENT_BYTES
# parsing + validating one spec, waiting for a parser thread included (well under 10 ms of CPU when within the
# limits): at 2 s a loaded host (load 36 on 2 cores) refused an ordinary ensemble spec as "not read within 2 s"
PARSE_TIMEOUT_S = 10.0
PARSE_THREADS = 2                   # specs parsed at once; more wait their turn (and their timeout)
MAX_EVENTS_PAGE = 10_000
# GET /jobs/{id}/progress: rows a page (a job has one a step), by default and at most
DEFAULT_PROGRESS_PAGE, MAX_PROGRESS_PAGE = 10_000, 50_000
# GET /jobs/{id}/predictions: refits a page (one a minute: 43 000, 26 MB, for a month-long job), by default and at
# most; a refit row is ~600 bytes, ten progress rows', so a page is of the bytes of a progress page
DEFAULT_PREDICTIONS_PAGE, MAX_PREDICTIONS_PAGE = 1_000, 5_000
MAX_BATCH_JOBS = 100                # specs one POST /jobs/batch may carry (each parsed within PARSE_TIMEOUT_S)

JobId = Annotated[int, Path(ge=0, le=MAX_ID)]
After = Annotated[int, Query(ge=0, le=MAX_ID)]
Offset = Annotated[int, Query(ge=0, le=MAX_ID)]
Limit = Annotated[int, Query(ge=1, le=MAX_ID)]
OptionalAfter = Annotated[int | None, Query(ge=0, le=MAX_ID)]
OptionalLimit = Annotated[int | None, Query(ge=1, le=MAX_ID)]
