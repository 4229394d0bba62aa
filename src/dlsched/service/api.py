"""REST API of the scheduler service (FastAPI). The API only reads the store and appends submissions and
cancel requests; the loop owns every other state change, so the two never race on a job.

Safety: bodies over ``max_body`` bytes are refused before they are read in full (413); when the service is
bound to a non-loopback address every request needs ``Authorization: Bearer <token>`` (401 otherwise);
every error is ``{"error": "<one line>"}`` with a 4xx status.
"""
from __future__ import annotations

import dataclasses
import hmac
import ipaddress
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, PlainTextResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from dlsched.policy.base import NodeView
from dlsched.service.nodes import LOST
from dlsched.service.refit import expected_times
from dlsched.service.store import Store, UnknownJob
from dlsched.spec import ClusterSpec, SpecError, load_job_spec

DEFAULT_MAX_BODY = 1 << 20
MAX_LOG_CHUNK = 1 << 20
MAX_TAIL_LINES = 100_000
MAX_WORKER_ID = 1 << 16
JSON_TYPES = ("application/json",)
YAML_TYPES = ("application/yaml", "application/x-yaml", "text/yaml", "text/x-yaml", "text/plain")


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _error(status: int, msg: str) -> JSONResponse:
    return JSONResponse({"error": " ".join(str(msg).split())[:500]}, status_code=status)


def _public(path: str) -> bool:
    """Paths served without a token: health, and the dashboard's static files (they carry no data;
    the page sends the token, taken from ``?token=``, on its data requests)."""
    return path in ("/healthz", "/dashboard", "/dashboard/") or path.startswith("/dashboard/static/")


class _Guard:
    """ASGI middleware: bearer token and body size, checked before the app sees the request."""

    def __init__(self, app, token: str | None, max_body: int):
        self.app, self.token, self.max_body = app, token, max_body

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        if self.token is not None and not _public(scope["path"]):
            auth = headers.get("authorization", "")
            if not (auth.startswith("Bearer ") and hmac.compare_digest(auth[7:].encode(), self.token.encode())):
                return await _error(401, "missing or wrong bearer token")(scope, receive, send)
        length = headers.get("content-length")
        if length is not None:
            if not length.isdigit():
                return await _error(400, f"bad Content-Length {length[:20]!r}")(scope, receive, send)
            if int(length) > self.max_body:
                return await _error(413, f"body is {length} bytes, limit is {self.max_body}")(scope, receive, send)
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


def create_app(store: Store, cluster: ClusterSpec | None = None, state_dir: str | Path | None = None,
               token: str | None = None, max_body: int = DEFAULT_MAX_BODY, loop_thread=None,
               validate=None, node_table=None) -> Any:
    """The ASGI application. ``token=None`` means no authentication (loopback binds only: see ``serve``);
    ``validate(spec, source)`` is the scheduler's submit-time check (raises ``SpecError``); ``node_table()``:
    the loop's ``NodeStatus`` rows (``/nodes``, the dashboard's lost-node marks)."""
    api = FastAPI(title="dlsched", version="1", docs_url=None, redoc_url=None, openapi_url=None)
    jobs_root = Path(state_dir) / "jobs" if state_dir else None

    @api.exception_handler(StarletteHTTPException)
    async def _http(_req, exc: StarletteHTTPException):
        return _error(exc.status_code, exc.detail)

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

    @api.get("/healthz")
    def healthz() -> dict:
        return {"ok": True, "rounds": getattr(loop_thread, "rounds", None)}

    @api.post("/jobs", status_code=201)
    async def submit(request: Request) -> JSONResponse:
        ctype = request.headers.get("content-type", "application/yaml").split(";")[0].strip().lower()
        if ctype not in JSON_TYPES + YAML_TYPES:
            return _error(415, f"content type {ctype[:60]!r} is not JSON or YAML")
        body = await request.body()
        spec = load_job_spec(body, "request body", "json" if ctype in JSON_TYPES else None)
        if validate is not None:
            validate(spec, "request body")
        job_id = await run_in_threadpool(store.submit, spec)
        return JSONResponse({"id": job_id, "name": spec.name, "state": "queued"}, status_code=201)

    @api.get("/jobs")
    def list_jobs(state: str | None = None, all: bool = True) -> list[dict]:
        states = state.split(",") if state else None
        preds, forecasts = store.latest_predictions(), store.forecasts()
        out = []
        for j in store.jobs(states=states):
            d = j.public()
            running = j.state in ("running", "rescaling")
            start, finish = expected_times(preds.get(j.id), forecasts.get(j.id), running)
            d["predicted_start"] = j.start_time if running else start
            d["predicted_finish"] = finish
            out.append(d)
        return out

    @api.get("/jobs/{job_id}")
    def show(job_id: int) -> dict:
        d = store.get(job_id).public()
        d["allocations"] = store.allocations(job_id)
        preds = store.predictions(job_id)
        d["prediction"] = preds[-1] if preds else None
        return d

    @api.post("/jobs/{job_id}/cancel")
    def cancel(job_id: int) -> dict:
        j = store.request_cancel(job_id)
        return {"id": j.id, "state": j.state, "cancel_requested": j.cancel_requested}

    @api.delete("/jobs/{job_id}")
    def delete(job_id: int) -> dict:
        return cancel(job_id)

    @api.get("/jobs/{job_id}/events")
    def job_events(job_id: int, after: int = 0) -> list[dict]:
        store.get(job_id)
        return store.events(job_id, after_id=after)

    @api.get("/events")
    def events(after: int = 0, limit: int = 1000) -> list[dict]:
        return store.events(after_id=after, limit=max(1, min(limit, 10_000)))

    @api.get("/jobs/{job_id}/predictions")
    def predictions(job_id: int) -> list[dict]:
        store.get(job_id)
        return store.predictions(job_id)

    @api.get("/jobs/{job_id}/progress")
    def progress(job_id: int) -> list[dict]:
        store.get(job_id)
        return store.progress(job_id)

    @api.get("/jobs/{job_id}/logs")
    def logs(job_id: int, offset: int = 0, tail: int | None = None, worker: int | None = None) -> PlainTextResponse:
        """The job's output (or worker ``worker``'s) from byte ``offset``, or its last ``tail`` lines;
        ``X-Next-Offset`` tells ``logs -f`` where to continue."""
        store.get(job_id)
        if worker is not None and not 0 <= worker < MAX_WORKER_ID:
            return _error(422, f"worker: expected 0..{MAX_WORKER_ID - 1}, got {worker}")
        if tail is not None and not 0 <= tail <= MAX_TAIL_LINES:
            return _error(422, f"tail: expected 0..{MAX_TAIL_LINES}, got {tail}")
        text, nxt = b"", max(0, min(offset, 1 << 62))
        if jobs_root is not None:
            job_dir = jobs_root / str(job_id)
            path = job_dir / "output.log" if worker is None else job_dir / "logs" / f"worker-{worker}.log"
            try:
                with open(path, "rb") as f:
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

    @api.get("/cluster")
    def cluster_info() -> dict:
        used: dict[str, int] = {}
        for j in store.jobs(states=("running", "rescaling")):
            for node, n in j.placement.items():
                used[node] = used.get(node, 0) + n
        nodes = [] if cluster is None else [n.model_dump() | {"used": used.get(n.name, 0)} for n in cluster.nodes]
        stats = getattr(loop_thread, "last_stats", None)
        return {"policy": cluster.policy if cluster else None, "nodes": nodes,
                "last_round": None if stats is None else {"decide_s": stats.decide_s, "act_s": stats.act_s,
                                                          "active_jobs": stats.active_jobs}}

    from dlsched.service.dashboard_routes import make_dashboard_router
    from dlsched.service.loop import cluster_view

    def dashboard_nodes():
        rows = node_table() if node_table else ()
        if rows:
            return tuple(NodeView(r.name, r.slots, r.gpu_type) for r in rows)
        return cluster_view(cluster, 0).nodes if cluster else ()

    def lost_nodes():
        return frozenset(r.name for r in (node_table() if node_table else ()) if r.health == LOST)

    api.include_router(make_dashboard_router(store, dashboard_nodes, Path(state_dir) / "reports" if state_dir else None,
                                             lost=lost_nodes))
    return _Guard(api, token, max_body)

