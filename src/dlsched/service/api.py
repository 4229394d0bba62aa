"""REST API of the scheduler service (FastAPI). The API only reads the store and appends submissions and
cancel requests; the loop owns every other state change, so the two never race on a job.

Safety (the trust model is ``docs/security.md``), checked by ``_Guard`` before the app sees a request:
a ``Host`` the service does not answer to (DNS rebinding) and a foreign ``Origin`` (a web page driving the
API from the user's browser) get 403; every route but health and the dashboard's static files needs
``Authorization: Bearer <token>`` unless the service runs with ``--no-auth`` (401); bodies over
``max_body`` bytes are refused before they are read in full (413). Specs are parsed and validated off the
event loop within ``PARSE_TIMEOUT_S`` (each of a batch's); every error is ``{"error": "<one line>"}`` with a 4xx
status.

Submissions: ``POST /jobs`` takes one spec; ``POST /jobs/batch`` takes ``{"jobs": [spec, ...]}`` all or none (every
spec checked before any is stored; a refusal names ``jobs[i]`` and carries ``"index"``), as ``dlsched submit`` sends
its files. Cancelling (``POST /jobs/{id}/cancel``, ``DELETE /jobs/{id}``) a job that already ended is a 409, as
``dlsched cancel`` says it (exit 1).

Listing: ``GET /jobs`` answers the newest ``limit`` matching jobs (default 500), ``X-Next-Before`` pages to older ones
(``job_pages.py``, ``docs/api.md``): a months-old store's every job was 14 MB and 11 s an answer.
"""
from __future__ import annotations

import asyncio
import dataclasses
import hmac
import ipaddress
import json
import logging
import sqlite3
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Callable
from urllib.parse import urlsplit

from fastapi import Depends, FastAPI, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, PlainTextResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.exceptions import HTTPException as StarletteHTTPException

from dlsched.numbers import finite
from dlsched.policy.base import NodeView, policy_is_rigid
from dlsched.service.finish_times import shown_fields, stated_targets
from dlsched.service.fleet_status import ensemble_of
from dlsched.service.event_kinds import EVENT_KINDS
from dlsched.service.event_pages import newest_events
from dlsched.service.job_folders import job_folder
from dlsched.service.job_pages import DEFAULT_JOBS_PAGE, MAX_IDS, job_page
from dlsched.service.member_cancel import MemberCancelRefused, cancel_member
from dlsched.service.limits import (DEFAULT_MAX_BODY, DEFAULT_PREDICTIONS_PAGE, DEFAULT_PROGRESS_PAGE, MAX_BATCH_JOBS,
                                    MAX_EVENTS_PAGE, MAX_ID, MAX_PREDICTIONS_PAGE, MAX_PROGRESS_PAGE, PARSE_THREADS, PARSE_TIMEOUT_S, After, JobId, Limit, Offset,
                                    OptionalAfter, OptionalLimit)
from dlsched.service.metrics import ServiceCollector, allocated_slots, metrics_registry
from dlsched.service.nodes import LOST
from dlsched.service.query_params import known_query
from dlsched.service.resize_limits import resize_refusal
from dlsched.service.store import (ACTIVE, TERMINAL, ResizeRefused, Store, TransitionError, UnknownJob,
                                   unavailable)
from dlsched.spec import MAX_BATCH, MAX_GPUS, ClusterSpec, SpecError, job_spec_from, load_job_spec, parse_document
from dlsched.train.files import open_regular

log = logging.getLogger("dlsched.service")
MAX_LOG_CHUNK = 1 << 20
RECOVERY_WAIT_S = 5.0   # a request waits this long for a restart's recovery, then 503 (a client's GET gives up at 10)
MAX_TAIL_LINES = 100_000
MAX_WORKER_ID = 1 << 16
JSON_TYPES = ("application/json",)
# not text/plain: it is one of the types a browser may POST cross-origin without asking first (no preflight)
YAML_TYPES = ("application/yaml", "application/x-yaml", "text/yaml", "text/x-yaml")
LOOPBACK_NAMES = ("localhost", "127.0.0.1", "::1")


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class FiniteJSON(JSONResponse):
    """JSON has no NaN/inf: a diverging job's (a NaN loss or reported metric, in its record and its events) go as
    null. They made every response that carried one a 500: the job's events, the service's, its dashboard page."""

    def render(self, content: Any) -> bytes:
        try:
            return super().render(content)
        except ValueError:  # rare: the walk is paid only then
            return super().render(finite(content))


def _error(status: int, msg: str, **extra: Any) -> JSONResponse:
    return JSONResponse({"error": " ".join(str(msg).split())[:500], **extra}, status_code=status)


def id_page(response: Response, read: Callable[[int], list[dict]], limit: int) -> list[dict]:
    """The first ``limit`` of the rows ``read(n)`` answers (at most ``n``, in id order); ``X-Next-After`` names the
    next page's ``after`` where more remain (a job's progress rows, its refits)."""
    rows = read(limit + 1)
    if len(rows) > limit:
        rows = rows[:limit]
        response.headers["X-Next-After"] = str(rows[-1]["id"])
    return rows


class BatchRefused(Exception):
    """A spec of ``POST /jobs/batch`` that does not pass: ``index``, its place in the list; ``message`` names it
    ``jobs[index]``. None of the batch was stored."""

    def __init__(self, index: int, message: str):
        super().__init__(message)
        self.index = index


def _public(path: str) -> bool:
    """Paths served without a token: health, and the dashboard's static files (they carry no data;
    the page sends the token, taken from ``#token=`` or ``?token=``, on its data requests)."""
    return path in ("/healthz", "/dashboard", "/dashboard/") or path.startswith("/dashboard/static/")


def host_name(authority: str) -> str:
    """``host[:port]`` (``[v6]:port`` too) -> host, lower case."""
    authority = authority.strip().lower()
    if authority.startswith("["):
        return authority[1:authority.find("]")] if "]" in authority else authority
    return authority.rsplit(":", 1)[0] if authority.count(":") == 1 else authority


class _Guard:
    """ASGI middleware: Host, Origin, bearer token and body size, checked before the app sees the request.

    ``hosts``: the names the service answers to (None = any: a non-loopback bind behind a token)."""

    def __init__(self, app, token: str | None, max_body: int, hosts: frozenset[str] | None = None):
        self.app, self.token, self.max_body, self.hosts = app, token, max_body, hosts

    def _refusal(self, scope, headers: dict[str, str]) -> JSONResponse | None:
        host = headers.get("host", "")
        if self.hosts is not None and host_name(host) not in self.hosts:
            return _error(403, f"Host {host[:60]!r} is not a name this service answers to")
        origin = headers.get("origin")
        if origin is not None:
            parts = urlsplit(origin) if origin != "null" else None
            if parts is None or parts.netloc.lower() != host.strip().lower():
                return _error(403, f"cross-origin request from {origin[:60]!r} refused")
        if headers.get("sec-fetch-site") == "cross-site":
            return _error(403, "cross-site request refused")
        if self.token is not None and not _public(scope["path"]):
            scheme, _, credentials = headers.get("authorization", "").partition(" ")
            # the scheme is case-insensitive (RFC 9110 11.1): curl -H 'authorization: bearer T' is a client's right
            if not (scheme.lower() == "bearer" and hmac.compare_digest(credentials.encode(), self.token.encode())):
                return _error(401, "missing or wrong bearer token")
        length = headers.get("content-length")
        if length is not None:
            if not length.isdigit() or len(length) > 18:
                return _error(400, f"bad Content-Length {length[:20]!r}")
            if int(length) > self.max_body:
                return _error(413, f"body is {length} bytes, limit is {self.max_body}")
        return None

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        refusal = self._refusal(scope, headers)
        if refusal is not None:
            return await refusal(scope, receive, send)
        # read the body here, up to the limit, and replay it: a chunked upload cannot smuggle 10 MB past us
        chunks, seen, more = [], 0, True
        while more:
            msg = await receive()
            if msg["type"] != "http.request":
                return
            chunks.append(msg.get("body", b""))
            seen += len(chunks[-1])
            more = msg.get("more_body", False)
            if seen > self.max_body:
                return await _error(413, f"body exceeds {self.max_body} bytes")(scope, receive, send)
        body, sent = b"".join(chunks), False

        async def replay():
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)


def allowed_hosts(bind: str, extra: tuple[str, ...] = ()) -> frozenset[str] | None:
    """Host names a service bound to ``bind`` answers to: loopback names on a loopback bind (so a DNS-rebound
    name cannot reach it from a browser), any on a wider bind (the token guards it), plus ``extra``."""
    if not is_loopback(bind):
        return None
    return frozenset({*LOOPBACK_NAMES, bind.lower(), *(h.lower() for h in extra)})


def create_app(store: Store, cluster: ClusterSpec | None = None, state_dir: str | Path | None = None,
               token: str | None = None, max_body: int = DEFAULT_MAX_BODY, loop_thread=None,
               validate=None, hosts: frozenset[str] | None = None, node_table=None,
               jobs_dir: str | Path | None = None, claim=None) -> Any:
    """The ASGI application. ``token=None`` means no authentication (``--no-auth``, loopback binds only: see
    ``Service``); ``validate(spec, source, batch)`` is the scheduler's submit-time check (raises ``SpecError``;
    ``batch``: the specs of the same ``POST /jobs/batch`` before it); ``claim(spec, source)``: its checks that
    depend on the jobs stored (raises ``SpecError``), run again in the transaction that stores the spec;
    ``hosts``: see ``allowed_hosts``; ``node_table()``: the loop's ``NodeStatus`` rows (``/nodes``, the
    dashboard's lost-node marks)."""
    recovered = getattr(loop_thread, "recovered", None)

    async def after_recovery(request: Request) -> None:
        """Every route but the public ones waits for the restart's recovery (``service/recovery.py``), then 503.
        Answered during it, `status` showed a job that had ended meanwhile as running (LEFT -23s) and one on a node
        since removed, and a cancel sent then was recorded before the recovery's events, as 'requested before it'."""
        if recovered is None or recovered.is_set() or _public(request.url.path):
            return
        if not await run_in_threadpool(recovered.wait, RECOVERY_WAIT_S):
            raise StarletteHTTPException(503, "the service is still taking up its jobs after a restart (re-attaching "
                                              "them, stopping those on nodes it no longer has); retry in a moment",
                                         headers={"Retry-After": "1"})   # nothing was done: the CLI retries

    api = FastAPI(title="dlsched", version="1", docs_url=None, redoc_url=None, openapi_url=None,
                  default_response_class=FiniteJSON, dependencies=[Depends(after_recovery), Depends(known_query)])
    jobs_root = Path(jobs_dir) if jobs_dir is not None else Path(state_dir) / "jobs" if state_dir else None
    parser = ThreadPoolExecutor(PARSE_THREADS, thread_name_prefix="dlsched-parse")

    def read_spec(body: bytes, fmt: str | None):
        spec = load_job_spec(body, "request body", fmt)
        if validate is not None:
            validate(spec, "request body")
        return spec

    def read_batch(body: bytes, fmt: str | None) -> list:
        """``{jobs: [spec, ...]}`` -> the documents, 1..MAX_BATCH_JOBS of them (validated by ``read_batch_specs``)."""
        doc = parse_document(body, "request body", fmt)
        jobs = doc.get("jobs") if isinstance(doc, dict) else None
        if not isinstance(doc, dict) or set(doc) != {"jobs"} or not isinstance(jobs, list):
            raise SpecError("request body: expected a mapping with one field, jobs: a list of job specs")
        if not 1 <= len(jobs) <= MAX_BATCH_JOBS:
            raise SpecError(f"request body: field jobs: expected 1..{MAX_BATCH_JOBS} job specs, got {len(jobs)}")
        return jobs

    def read_batch_specs(docs: list) -> list:
        """Every spec of a batch parsed and checked as ``POST /jobs`` checks one; the first that fails names its
        place (``BatchRefused``)."""
        specs = []
        for i, doc in enumerate(docs):
            where = f"jobs[{i}]"
            try:
                spec = job_spec_from(doc, where)
                if validate is not None:
                    validate(spec, where, tuple(specs))
            except SpecError as e:
                raise BatchRefused(i, str(e)) from None
            specs.append(spec)
        return specs

    async def off_loop(fn, args: tuple, timeout_s: float):
        """``fn(*args)`` off the event loop (health and the other routes keep answering), bounded in time."""
        work = asyncio.get_running_loop().run_in_executor(parser, fn, *args)
        return await asyncio.wait_for(work, timeout_s)

    def body_format(request: Request) -> str | JSONResponse:
        """"json" or "yaml" from the content type (``documents.load_document``'s ``fmt``); a 415 for any other."""
        ctype = request.headers.get("content-type", "").split(";")[0].strip().lower()
        if ctype not in JSON_TYPES + YAML_TYPES:
            return _error(415, f"content type {ctype[:60]!r} is not one of {', '.join(JSON_TYPES + YAML_TYPES)}")
        return "json" if ctype in JSON_TYPES else "yaml"

    @api.exception_handler(StarletteHTTPException)
    async def _http(_req, exc: StarletteHTTPException):
        answer = _error(exc.status_code, exc.detail)
        answer.headers.update(exc.headers or {})
        return answer

    @api.exception_handler(RequestValidationError)
    async def _invalid(_req, exc: RequestValidationError):
        e = exc.errors()[0]
        where = ".".join(str(p) for p in e.get("loc", ())) or "request"
        return _error(422, f"{where}: {e.get('msg')} (got {str(e.get('input'))[:40]!r})")

    @api.exception_handler(UnknownJob)
    async def _unknown(_req, exc: UnknownJob):
        return _error(404, f"no job {exc.args[0]}")

    @api.exception_handler(SpecError)
    async def _bad_spec(_req, exc: SpecError):
        return _error(422, str(exc))

    @api.exception_handler(BatchRefused)
    async def _bad_batch(_req, exc: BatchRefused):
        return _error(422, str(exc), index=exc.index)

    @api.exception_handler(sqlite3.OperationalError)
    async def _store_down(_req, exc: sqlite3.OperationalError):
        # locked past the busy timeout, a full disk, a read-only folder: a 500 with no body said nothing, and a
        # client could not tell whether its submission was stored (it was not: the transaction rolled back)
        log.warning("API request refused: %s", exc)
        response = _error(503, unavailable(exc))
        response.headers["Retry-After"] = "10"
        return response

    @api.exception_handler(TransitionError)
    async def _ended(_req, exc: TransitionError):
        return _error(409, str(exc))

    @api.get("/healthz")
    def healthz() -> dict:
        return {"ok": True, "rounds": getattr(loop_thread, "rounds", None)}

    @api.post("/jobs", status_code=201)
    async def submit(request: Request) -> JSONResponse:
        fmt = body_format(request)
        if isinstance(fmt, JSONResponse):
            return fmt
        body = await request.body()
        try:
            spec = await off_loop(read_spec, (body, fmt), PARSE_TIMEOUT_S)
        except asyncio.TimeoutError:
            return _error(422, f"request body: not read within {PARSE_TIMEOUT_S:g} s; send a simpler spec")
        check = None if claim is None else (lambda: claim(spec, "request body"))
        job_id = await run_in_threadpool(store.submit, spec, check=check)
        return JSONResponse({"id": job_id, "name": spec.name, "state": "queued"}, status_code=201)

    @api.post("/jobs/batch", status_code=201)
    async def submit_batch(request: Request) -> JSONResponse:
        """``{"jobs": [spec, ...]}``: all or none. Every spec is checked as ``POST /jobs`` checks one before any is
        stored, then all are stored in one transaction; the first that fails is a 422 naming it (``jobs[i]: ...``,
        and ``"index": i``), and nothing is stored. Answers ``{"jobs": [{"id", "name", "state"}, ...]}`` in order."""
        fmt = body_format(request)
        if isinstance(fmt, JSONResponse):
            return fmt
        body = await request.body()
        try:
            docs = await off_loop(read_batch, (body, fmt), PARSE_TIMEOUT_S)
        except asyncio.TimeoutError:
            return _error(422, f"request body: not read within {PARSE_TIMEOUT_S:g} s; send simpler specs")
        try:
            specs = await off_loop(read_batch_specs, (docs,), PARSE_TIMEOUT_S * len(docs))
        except asyncio.TimeoutError:
            return _error(422, f"request body: {len(docs)} specs not checked within {PARSE_TIMEOUT_S:g} s each; "
                               "send simpler specs")

        def claim_all() -> None:
            for i, spec in enumerate(specs):
                try:
                    claim(spec, f"jobs[{i}]")
                except SpecError as e:
                    raise BatchRefused(i, str(e)) from None

        ids = await run_in_threadpool(store.submit_many, specs, check=claim_all if claim is not None else None)
        return JSONResponse({"jobs": [{"id": i, "name": s.name, "state": "queued"} for i, s in zip(ids, specs)]},
                            status_code=201)

    @api.get("/jobs")
    def list_jobs(response: Response, state: str | None = None, id: str | None = None,
                  limit: Limit = DEFAULT_JOBS_PAGE, before: OptionalAfter = None) -> list[dict]:
        """The newest ``limit`` jobs (``job_pages.py``; at most ``MAX_JOBS_PAGE``) of ``state`` and ``id`` (both
        comma-separated) below id ``before``, in id order; ``X-Next-Before`` names the next older page's ``before``
        (absent on the last page), ``X-Total-Count`` counts every match."""
        states = state.split(",") if state else None
        unknown = [x for x in states or [] if x not in ACTIVE + TERMINAL]
        if unknown:   # a typo answered [] with 200: "no such jobs"
            return _error(422, f"state: {unknown[0][:40]!r} is not one of {', '.join(ACTIVE + TERMINAL)}")
        ids = id.split(",") if id else None
        bad = [x for x in ids or [] if not (x.isascii() and x.isdigit() and int(x) <= MAX_ID)]
        if bad or len(ids or ()) > MAX_IDS:
            return _error(422, f"id: {bad[0][:40]!r} is not a job id" if bad else
                               f"id: {len(ids)} ids, expected at most {MAX_IDS} (ask in several requests)")
        page = job_page(store, states, ids and [int(x) for x in ids], limit, before)
        if page.next_before is not None:
            response.headers["X-Next-Before"] = str(page.next_before)
        response.headers["X-Total-Count"] = str(page.total)
        preds = store.latest_predictions([j.id for j in page.jobs])
        forecasts = store.forecasts()
        out = []
        for j in page.jobs:
            d = j.public()
            d |= shown_fields(j, preds.get(j.id), forecasts.get(j.id))
            # an ended job's too: whether it got there (`status` showed "-" for a finished job that stated one)
            d["target"], d["target_pending"] = stated_targets(j, preds.get(j.id), d["predicted_finish"])
            if j.state not in ACTIVE:
                d["target_pending"] = None
            if j.spec.kind == "ensemble":
                d["ensemble"] = ensemble_of(store, j.id)
                d["fraction_done"] = d["ensemble"]["fraction_done"]
            out.append(d)
        return out

    @api.get("/jobs/{job_id}")
    def show(job_id: JobId) -> dict:
        job = store.get(job_id)
        d = job.public()
        d["allocations"] = store.allocations(job_id)
        d["prediction"] = store.latest_prediction(job_id)
        d |= shown_fields(job, d["prediction"], store.forecasts().get(job_id))
        d["target"], d["target_pending"] = stated_targets(job, d["prediction"], d["predicted_finish"])
        if job.spec.kind == "ensemble":
            d["ensemble"] = ensemble_of(store, job_id)
            d["fraction_done"] = d["ensemble"]["fraction_done"]
        return d

    @api.post("/jobs/{job_id}/cancel")
    def cancel(job_id: JobId) -> dict:
        """A queued job is cancelled at once (``state``: cancelled), a running one stops at the next round
        (``cancel_requested``: true). A job that had already ended is a 409 (``dlsched cancel``: exit 1)."""
        j = store.request_cancel(job_id)
        return {"id": j.id, "state": j.state, "cancel_requested": j.cancel_requested}

    @api.post("/jobs/{job_id}/members/{member}/cancel")
    def cancel_member_(job_id: JobId, member: str) -> JSONResponse:
        """One member of an ensemble leaves at its next step, checkpointed; the others train on
        (``service/member_cancel.py``). 404: no such member; 409: not an ensemble, ended, or it already left."""
        try:
            return JSONResponse(cancel_member(store, job_id, member, jobs_root))
        except MemberCancelRefused as e:
            return _error(e.status, str(e))

    @api.post("/jobs/{job_id}/resize")
    async def resize(job_id: JobId, request: Request) -> JSONResponse:
        """``{"workers": N, "batch_size": B}``: hold a queued or running job at N workers and/or batch B (either
        alone: the policy sizes the other)."""
        raw = await request.body()
        ctype = request.headers.get("content-type", "").split(";")[0].strip().lower()
        if raw and ctype not in JSON_TYPES:
            return _error(415, f"content type {ctype[:60]!r} is not application/json")
        try:
            body = json.loads(raw or b"{}")
        except (ValueError, RecursionError):
            return _error(400, "body: expected a JSON object such as {\"workers\": 2}")
        if not isinstance(body, dict) or set(body) - {"workers", "batch_size"}:
            return _error(422, f"body: expected fields workers and batch_size, got {sorted(body) if isinstance(body, dict) else type(body).__name__}")
        workers, batch = body.get("workers"), body.get("batch_size")
        capacity = sum(n.gpus for n in cluster.nodes) if cluster is not None else MAX_GPUS
        if workers is None and batch is None:
            return _error(422, "body: give workers, batch_size or both (DELETE releases a hold)")
        if workers is not None and (type(workers) is not int or not 1 <= workers <= capacity):
            return _error(422, f"workers: expected an integer in 1..{capacity} (the cluster's slots), got {workers!r}")
        if batch is not None and (type(batch) is not int or not 1 <= batch <= MAX_BATCH):
            return _error(422, f"batch_size: expected an integer in 1..{MAX_BATCH}, got {batch!r}")
        # checked on the row the store updates (one read): outside its spec's ranges the job would run at a size
        # or batch its code was not written for
        refuse = lambda spec: resize_refusal(spec, workers, batch)   # noqa: E731
        try:
            j = await run_in_threadpool(store.request_resize, job_id, workers, batch, refuse=refuse)
        except ResizeRefused as e:
            return _error(422, str(e))
        except TransitionError as e:
            return _error(409, str(e))
        return JSONResponse({"id": j.id, "state": j.state, "requested_workers": j.requested_workers,
                             "requested_batch": j.requested_batch})

    @api.delete("/jobs/{job_id}/resize")
    def release_resize(job_id: JobId) -> dict:
        """Release a ``resize`` hold: the policy sizes the job again from the next round on."""
        j = store.request_resize(job_id, None, None)   # an ended job: 409, as for a resize
        return {"id": j.id, "state": j.state, "requested_workers": None, "requested_batch": None}

    @api.delete("/jobs/{job_id}")
    def delete(job_id: JobId) -> dict:
        """The same as ``POST /jobs/{id}/cancel`` (the record stays: ``history`` lists it)."""
        return cancel(job_id)

    def event_page(response: Response, job_id: int | None, after: int, limit: int, tail: int | None,
                   before: int | None, kind: str | None):
        """Events after ``after``, oldest first (at most ``limit``); or, with ``tail``, the newest ``tail`` below
        ``before`` (``event_pages.py``), ``X-Next-Before`` naming the next older page's ``before``."""
        kinds = kind.split(",") if kind else None
        unknown = [k for k in kinds or [] if k not in EVENT_KINDS]
        if unknown:   # a typo answered [] with 200: "no such events"
            return _error(422, f"kind: {unknown[0][:40]!r} is not an event kind (`dlsched events --help`)")
        if tail is None:
            if before is not None:
                return _error(422, "before: pages back from the newest events; give tail too")
            return store.events(job_id, after_id=after, limit=min(limit, MAX_EVENTS_PAGE), kinds=kinds)
        page, older = newest_events(store, min(tail, MAX_EVENTS_PAGE), job_id, before, kinds, after)
        if older is not None:
            response.headers["X-Next-Before"] = str(older)
        return page

    @api.get("/jobs/{job_id}/events")
    def job_events(job_id: JobId, response: Response, after: After = 0, limit: Limit = 1000,
                   tail: OptionalLimit = None, before: OptionalAfter = None, kind: str | None = None) -> list[dict]:
        store.get(job_id)
        return event_page(response, job_id, after, limit, tail, before, kind)

    @api.get("/events")
    def events(response: Response, after: After = 0, limit: Limit = 1000, tail: OptionalLimit = None,
               before: OptionalAfter = None, kind: str | None = None) -> list[dict]:
        return event_page(response, None, after, limit, tail, before, kind)

    @api.get("/jobs/{job_id}/predictions")
    def predictions(job_id: JobId, response: Response, after: After = 0,
                    limit: Limit = DEFAULT_PREDICTIONS_PAGE) -> list[dict]:
        """The job's refits after row ``after``, the first ``limit`` (at most ``MAX_PREDICTIONS_PAGE``; ``X-Next-After``
        as ``progress``): one a minute or per 1 % of its progress, and the newest (``store.KEEP_EVERY_S``); each
        carries its ``id`` to page on. Without a limit a month-long job's answer was every refit: 26 MB."""
        store.get(job_id)
        return id_page(response, lambda n: store.predictions(job_id, after_id=after, limit=n),
                       min(limit, MAX_PREDICTIONS_PAGE))

    @api.get("/jobs/{job_id}/progress")
    def progress(job_id: JobId, response: Response, after: OptionalAfter = None, points: OptionalLimit = None,
                 limit: Limit = DEFAULT_PROGRESS_PAGE) -> list[dict]:
        """The job's progress rows, each with its ``id``, the first ``limit`` (at most ``MAX_PROGRESS_PAGE``;
        ``X-Next-After`` names the next page's ``after`` when more remain); ``after``: those stored after row ``after``
        (to follow a job); ``points``: at most that many of those with a step and a loss, evenly spaced, and the newest
        (to draw)."""
        store.get(job_id)
        # every row with its id, whichever way it was asked for: a first page's rows had none, the next page's had,
        # so a client that read the first page could not follow on from a row of it (its last row's id was only in
        # the header) and one row read two ways compared unequal
        if points is not None:   # at most a page's rows: ?points=1e9 answered every row of a job, millions for months
            return store.progress(job_id, after_id=after or 0, loss_points=min(points, MAX_PROGRESS_PAGE))
        # a page: a job that ran for months has a row a step (millions), all of them one answer
        return id_page(response, lambda n: store.progress(job_id, after_id=after or 0, limit=n),
                       min(limit, MAX_PROGRESS_PAGE))

    @api.get("/jobs/{job_id}/logs")
    def logs(job_id: JobId, offset: Offset = 0, tail: int | None = None, worker: int | None = None) -> PlainTextResponse:
        """The job's output (or worker ``worker``'s) from byte ``offset``, or its last ``tail`` lines;
        ``X-Next-Offset`` tells ``logs -f`` where to continue."""
        job = store.get(job_id)
        if worker is not None and not 0 <= worker < MAX_WORKER_ID:
            return _error(422, f"worker: expected 0..{MAX_WORKER_ID - 1}, got {worker}")
        if tail is not None and not 0 <= tail <= MAX_TAIL_LINES:
            return _error(422, f"tail: expected 0..{MAX_TAIL_LINES}, got {tail}")
        text, nxt = b"", max(0, min(offset, 1 << 62))
        if jobs_root is not None:
            job_dir = job_folder(job, jobs_root)   # where it ran, whatever --jobs-dir is now
            path = job_dir / "output.log" if worker is None else job_dir / "logs" / f"worker-{worker}.log"
            try:
                with open_regular(path) as f:
                    if tail is not None:
                        size = f.seek(0, 2)
                        start = max(0, size - MAX_LOG_CHUNK)
                        f.seek(start)
                        lines = f.read().splitlines(keepends=True)
                        text, nxt = b"".join(lines[-tail:] if tail else []), size
                    else:
                        f.seek(nxt)
                        text = f.read(MAX_LOG_CHUNK)
                        nxt += len(text)
            except FileNotFoundError:
                if worker is not None:
                    return _error(404, f"job {job_id} has no log for worker {worker}")
        return PlainTextResponse(text.decode("utf-8", "replace"), headers={"X-Next-Offset": str(nxt)})

    @api.get("/nodes")
    def nodes_info() -> dict:
        rows = node_table() if node_table else ()
        return {"nodes": [dataclasses.asdict(r) for r in rows]}

    @api.get("/metrics")
    def metrics() -> Response:
        """Prometheus metrics (``service/metrics.py``); scraped with the token, as every route but health."""
        return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)

    @api.get("/cluster")
    def cluster_info() -> dict:
        used = allocated_slots(store.jobs(states=("running", "rescaling")))
        nodes = [] if cluster is None else [n.model_dump() | {"used": used.get(n.name, 0)} for n in cluster.nodes]
        stats = getattr(loop_thread, "last_stats", None)
        # a client says so when a job asks for a GPU range that this policy never uses (fifo, srtf, tiresias)
        return {"policy": cluster.policy if cluster else None,
                "policy_rigid": policy_is_rigid(cluster.policy) if cluster else None, "nodes": nodes,
                "last_round": None if stats is None else {"decide_s": stats.decide_s, "act_s": stats.act_s,
                                                          "active_jobs": stats.active_jobs}}

    from dlsched.service.dashboard_routes import make_dashboard_router
    from dlsched.service.loop import cluster_view

    def dashboard_nodes():   # the nodes as the loop last saw them, else as declared (the dashboard's and /metrics')
        rows = node_table() if node_table else ()
        if rows:
            return tuple(NodeView(r.name, r.slots, r.gpu_type) for r in rows)
        return cluster_view(cluster, 0).nodes if cluster else ()

    def lost_nodes():
        return frozenset(r.name for r in (node_table() if node_table else ()) if r.health == LOST)

    registry = metrics_registry(ServiceCollector(store, dashboard_nodes, lost_nodes, loop_thread,
                                                 cluster.policy if cluster else ""))

    api.include_router(make_dashboard_router(store, dashboard_nodes, Path(state_dir) / "reports" if state_dir else None,
                                             lost=lost_nodes))
    return _Guard(api, token, max_body, hosts)

