"""The web dashboard: static pages (``service/dashboard/``) plus the JSON they draw from.

Why one aggregated JSON per page: the overview (cluster, queue, Gantt) must load in well under a
second with 1 000 jobs in the store, so the browser makes one request and the server answers it with
a handful of SQL queries; the browser only lays out SVG. The static files carry no data and need no
token; the JSON routes take the API's auth ``dependencies`` (the page forwards ``#token=...``).

Mount (in ``service/api.py``)::

    app.include_router(make_dashboard_router(store, nodes=lambda: cluster_nodes, reports_dir=..., dependencies=auth))
"""
from __future__ import annotations

import json
import math
import re
import time
from pathlib import Path
from typing import Callable, Sequence

import pandas as pd
from fastapi import APIRouter, HTTPException
from fastapi.responses import FileResponse, RedirectResponse

from dlsched.perf.efficiency import GradientNoise
from dlsched.policy.base import NodeView
from dlsched.service.event_pages import newest_events
from dlsched.service.fleet_status import ensemble_of
from dlsched.service.finish_times import shown_times, stated_targets
from dlsched.service.job_models import metric_target_of
from dlsched.service.metric_target import METRICS_EVENT
from dlsched.service.limits import JobId
from dlsched.service.job_pages import job_page, newest_allocations, recently_ended
from dlsched.service.store import ACTIVE, Store, UnknownJob, job_counts

STATIC_DIR = Path(__file__).with_name("dashboard")
STATIC_FILES = {"index.html": "text/html", "app.js": "text/javascript", "style.css": "text/css"}
# the page holds the token (sessionStorage) and lays out job-written text: should a value ever reach the markup
# unescaped, no inline or foreign script runs and nothing leaves for another origin; no other site may frame it
PAGE_HEADERS = {
    "Content-Security-Policy": "default-src 'none'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
                               "img-src 'self' blob:; connect-src 'self'; base-uri 'none'; form-action 'none'; "
                               "frame-ancestors 'none'",
    "X-Frame-Options": "DENY", "Referrer-Policy": "no-referrer", "X-Content-Type-Options": "nosniff"}
MAX_GANTT_JOBS = 300      # rows drawn in the overview's timeline (most recent first)
MAX_CURVE_POINTS = 400    # progress points sent for one job's loss curve
HIGHER_IS_BETTER = re.compile(r"util|finished|throughput|goodput|accuracy", re.I)   # else lower is better


# ----------------------------------------------------------------------------- convergence fit

def loss_fit_of(prediction: dict | None) -> dict | None:
    """The fits the loop made last (``service.refit``): the Optimus curve l(k) = 1/(b0 k + b1) + b2 from 4 loss points,
    the schedule-aware prediction to the budget, the stated target's; None before any."""
    fit = (prediction or {}).get("loss_fit")
    if not fit or not ("beta0" in fit or fit.get("curve") or fit.get("metric_target")
                       or fit.get("metric_target_missing")):   # or an older version's
        return None
    out = {"beta": [fit["beta0"], fit["beta1"], fit["beta2"]], "scale": fit["scale"], "rmse": fit["rmse"]} \
        if "beta0" in fit else {}
    if fit.get("optimus_steps"):   # a job whose batch changed: the terms are per reference step (refit.in_steps)
        out["optimus_steps"] = fit["optimus_steps"]
    if fit.get("curve"):  # the schedule-aware prediction to the job's budget (service.refit.fit_loss)
        out.update({k: fit.get(k) for k in ("model", "bands", "curve", "final", "final_80", "alpha", "drop", "curve_rmse",
                                            "target_loss", "target_step", "target_time", "target_chance",
                                            "target_beyond_final", "lr")})
    if fit.get("metric_target"):   # the stated target of a reported metric (service.metric_target)
        out["metric_target"] = fit["metric_target"]
    if fit.get("metric_target_missing"):   # ... or why this refit has none (service.metric_target.missing)
        out["metric_target_missing"] = fit["metric_target_missing"]
    return out


# ----------------------------------------------------------------------------- page data

def _clean(x):
    """JSON has no NaN/inf: send null."""
    return None if isinstance(x, float) and not math.isfinite(x) else x


def _noise_scale(p: dict) -> float | None:
    """The gradient noise scale a dlsched.torch job reported (tr Σ / |G|², in samples), else None."""
    sqr, var, batch = p.get("grad_sqr"), p.get("grad_var"), p.get("noise_batch")
    return _clean(GradientNoise(sqr, var).noise_scale(batch)) if sqr and var is not None and batch else None


def gantt_intervals(allocations: list[dict], end_times: dict[int, float | None], now: float) -> list[dict]:
    """Allocation rows (one per decision) -> intervals [start, end) with the GPUs and nodes held."""
    by_job: dict[int, list[dict]] = {}
    for a in allocations:
        by_job.setdefault(a["job_id"], []).append(a)
    out = []
    for job_id, rows in by_job.items():
        rows.sort(key=lambda r: r["time"])
        for r, nxt in zip(rows, rows[1:] + [None]):
            if r["num_gpus"] <= 0:
                continue
            end = nxt["time"] if nxt else (end_times.get(job_id) or now)
            if end > r["time"]:
                out.append({"job_id": job_id, "start": r["time"], "end": end, "gpus": r["num_gpus"],
                            "placement": r["placement"], "batch_size": r.get("batch_size")})
    return out


def overview(store: Store, nodes: Sequence[NodeView], now: float | None = None,
             lost: frozenset[str] = frozenset()) -> dict:
    """Cluster (who holds what), queue with predicted start/finish, Gantt and counts, in one answer."""
    now = time.time() if now is None else now
    # the active jobs, counts and the newest few ended: a store of months of jobs is never read whole
    active = store.jobs(states=ACTIVE)
    preds = store.latest_predictions([j.id for j in active])
    holders: dict[str, list[dict]] = {n.name: [] for n in nodes}
    for j in active:
        for node, g in j.placement.items():
            holders.setdefault(node, []).append({"job_id": j.id, "name": j.name, "gpus": g})
    forecasts = store.forecasts()
    queue = []
    for j in active:
        start, finish = shown_times(j, preds.get(j.id), forecasts.get(j.id))
        target, pending = stated_targets(j, preds.get(j.id), finish)
        queue.append({"id": j.id, "name": j.name, "state": j.state, "submit_time": j.submit_time,
                      "gpus": j.held_gpus, "target_gpus": j.num_gpus if j.held_gpus != j.num_gpus else None,
                      "requested": j.spec.gpus, "gpu_range": list(j.spec.gpu_range),
                      "batch_size": j.batch_size or j.trained_batch,   # a script's own where the scheduler sets none
                      "fraction_done": (ensemble_of(store, j.id)["fraction_done"] if j.spec.kind == "ensemble"
                                        else _clean(j.samples / j.total_samples) if j.total_samples else None),
                      "loss": _clean(j.last_loss), "ensemble": j.spec.kind == "ensemble",   # its loss: the best member's
                      "samples_per_s": _clean(j.samples_per_s), "predicted_start": _clean(start), "predicted_finish": _clean(finish),
                      "target": target, "target_pending": pending,
                      "stalled_since": j.stalled_since, "waiting_for": j.waiting_for})
    counts = job_counts(store)
    allocs, with_allocs = newest_allocations(store, MAX_GANTT_JOBS)
    keep = {a["job_id"] for a in allocs}
    drawn = job_page(store, ids=keep, limit=len(keep)).jobs if keep else []
    intervals = gantt_intervals(allocs, {j.id: j.end_time for j in drawn}, now)
    names = {j.id: j.name for j in drawn}
    for iv in intervals:
        iv["name"] = names.get(iv["job_id"], str(iv["job_id"]))
    finished = [{"id": j.id, "name": j.name, "state": j.state, "submit_time": j.submit_time,
                 "start_time": j.start_time, "end_time": j.end_time, "error": j.error}
                for j in recently_ended(store, 50)]
    return {"now": now, "counts": counts, "total_jobs": sum(counts.values()),
            "nodes": [{"name": n.name, "gpus": n.num_gpus, "gpu_type": n.gpu_type, "holders": holders.get(n.name, []),
                       "lost": n.name in lost} for n in nodes],
            "queue": queue, "recent": finished, "gantt": intervals, "gantt_jobs": len(keep),
            "gantt_total_jobs": with_allocs}


def job_detail(store: Store, job_id: int) -> dict:
    """One job: record, loss curve (down-sampled), fitted convergence curve, allocations, events; an ensemble's
    members and flotillas."""
    rec = store.get(job_id)
    prediction = store.latest_prediction(job_id)
    start, finish = shown_times(rec, prediction, store.forecasts().get(job_id))
    curve = [{"step": p["step"], "loss": _clean(p["loss"]), "time": p["time"], "samples": p["samples"],
              "workers": p["workers"], "noise_scale": _noise_scale(p)}
             for p in store.progress(job_id, loss_points=MAX_CURVE_POINTS)]
    job = json.loads(json.dumps(rec.public(), default=str))
    ensemble = ensemble_of(store, job_id) if rec.spec.kind == "ensemble" else None
    if ensemble:
        job["fraction_done"] = ensemble["fraction_done"]
    return {"job": job, "curve": curve, "fit": loss_fit_of(prediction),
            "prediction": prediction, "predicted_start": _clean(start), "predicted_finish": _clean(finish),
            "allocations": store.allocations(job_id), "events": newest_events(store, 200, job_id)[0],
            "ensemble": ensemble, "target": target_series(store, rec)}


def target_series(store: Store, rec) -> dict | None:
    """The metric a job states a target of (``spec.MetricTarget``) as reported, [step, value] (of its steps' and of its
    evaluations' reports every k-th, at most ``MAX_CURVE_POINTS`` each), with the target; None for a job that states
    none."""
    target = metric_target_of(rec)
    if target is None:
        return None
    reports = store.metric_values(rec.id, target.metric, METRICS_EVENT, points=MAX_CURVE_POINTS)
    evaluations = reports.between[::max(1, math.ceil(len(reports.between) / MAX_CURVE_POINTS))]
    return {"metric": target.metric, "value": target.value, "kind": target.kind,
            "points": sorted([s, v] for s, v in reports.inside + evaluations)}


def load_reports(reports_dir: Path | None) -> list[dict]:
    """Policy comparison reports written by ``dlsched simulate``: every CSV with a ``policy`` column
    (one row per policy, numeric metric columns) under ``reports_dir``, newest first."""
    if reports_dir is None or not Path(reports_dir).is_dir():
        return []
    out = []
    for path in sorted(Path(reports_dir).rglob("*.csv"), key=lambda p: -p.stat().st_mtime)[:20]:
        try:
            df = pd.read_csv(path)
        except (ValueError, OSError) as e:
            out.append({"file": str(path.relative_to(reports_dir)), "error": f"{path}: unreadable CSV ({e})"})
            continue
        if "policy" not in df.columns:
            continue
        metrics = [c for c in df.columns if c != "policy" and pd.api.types.is_numeric_dtype(df[c])]
        rows = [{"policy": str(r["policy"]), **{m: _clean(float(r[m])) for m in metrics}} for _, r in df.iterrows()]
        images = sorted(str(p.relative_to(reports_dir)) for p in path.parent.glob("*.png"))
        out.append({"file": str(path.relative_to(reports_dir)), "metrics": metrics, "rows": rows,
                    "higher_is_better": [m for m in metrics if HIGHER_IS_BETTER.search(m)],
                    "images": images, "mtime": path.stat().st_mtime})
    return out


# ----------------------------------------------------------------------------- router

def make_dashboard_router(store: Store, nodes: Callable[[], Sequence[NodeView]],
                          reports_dir: Path | None = None, dependencies: list | None = None,
                          lost: Callable[[], frozenset[str]] = frozenset) -> APIRouter:
    """``/dashboard/`` (static page) and ``/dashboard/api/*`` (its data, behind ``dependencies``); ``lost()``
    names the nodes the backend lost (drawn marked)."""
    router = APIRouter()
    data = APIRouter(dependencies=dependencies or [])

    @router.get("/dashboard", include_in_schema=False)
    def _root():
        return RedirectResponse("/dashboard/")

    @router.get("/dashboard/", include_in_schema=False)
    def _index():
        return FileResponse(STATIC_DIR / "index.html", media_type="text/html", headers=PAGE_HEADERS)

    @router.get("/dashboard/static/{name}", include_in_schema=False)
    def _static(name: str):
        if name not in STATIC_FILES:          # a fixed list: no path ever reaches the file system
            raise HTTPException(404, f"no dashboard file {name!r}")
        return FileResponse(STATIC_DIR / name, media_type=STATIC_FILES[name], headers=PAGE_HEADERS)

    @data.get("/dashboard/api/overview")
    def _overview():
        return overview(store, nodes(), lost=lost())

    @data.get("/dashboard/api/jobs/{job_id}")
    def _job(job_id: JobId):
        try:
            return job_detail(store, job_id)
        except UnknownJob:
            raise HTTPException(404, f"no job {job_id}") from None

    @data.get("/dashboard/api/reports")
    def _reports():
        return {"dir": str(reports_dir) if reports_dir else None, "reports": load_reports(reports_dir)}

    @data.get("/dashboard/api/reports/image/{name:path}")
    def _report_image(name: str):
        """A plot ``dlsched simulate --report`` wrote (PNG), only from inside ``reports_dir``."""
        if reports_dir is None or not name.endswith(".png"):
            raise HTTPException(404, f"no report image {name!r}")
        root = Path(reports_dir).resolve()
        path = (root / name).resolve()
        if not path.is_relative_to(root) or not path.is_file():
            raise HTTPException(404, f"no report image {name!r}")
        return FileResponse(path, media_type="image/png")

    router.include_router(data)
    return router
