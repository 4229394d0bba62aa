"""The dashboard in a real headless Chromium against a running service with real jobs.

The service is the real one (store, loop, API under uvicorn, local backend); the jobs run the contract
runtime (real processes writing progress). Chromium renders each page (``--dump-dom``) and we check what
a person would look for; a screenshot of the overview is saved (``DLSCHED_SCREENSHOT_DIR``, else tmp).
"""
from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from tests.service import policies  # noqa: F401  (registers test-fifo)
from tests.service.teardown import stop_service_and_jobs
from tests.waiting import wait_until
from dlsched.commands.service import job_rows
from dlsched.display import TIME_FIELDS
from dlsched.service.dashboard_routes import gantt_intervals, job_detail, load_reports, overview
from dlsched.service.server import Service
from dlsched.service.store import Store, TransitionError
from dlsched.spec import ClusterSpec, JobSpec

CONTRACT_RUNTIME = [sys.executable, str(Path(__file__).parents[1] / "backends" / "contract_runtime.py")]
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-quic",
                  "--no-first-run", "--disable-component-update", "--disable-sync", "--hide-scrollbars"]


POLICY = "test-fifo"   # tests/service/policies.py: requested GPUs in arrival order


# ----------------------------------------------------------------------------- pure parts

def test_gantt_intervals_end_at_the_next_decision_or_now():
    rows = [{"job_id": 1, "time": 0.0, "num_gpus": 2, "placement": {"a": 2}},
            {"job_id": 1, "time": 10.0, "num_gpus": 4, "placement": {"a": 4}},
            {"job_id": 1, "time": 25.0, "num_gpus": 0, "placement": {}},
            {"job_id": 2, "time": 5.0, "num_gpus": 1, "placement": {"b": 1}}]
    iv = gantt_intervals(rows, {1: 25.0, 2: None}, now=30.0)
    assert [(i["job_id"], i["start"], i["end"], i["gpus"]) for i in iv] == [(1, 0.0, 10.0, 2), (1, 10.0, 25.0, 4),
                                                                           (2, 5.0, 30.0, 1)]


def test_reports_are_csvs_with_a_policy_column(tmp_path):
    (tmp_path / "w1").mkdir()
    (tmp_path / "w1" / "summary.csv").write_text("policy,avg_jct_s,makespan_s\nfifo,120.5,900\ntiresias,80.25,850\n")
    (tmp_path / "other.csv").write_text("a,b\n1,2\n")
    (tmp_path / "broken.csv").write_bytes(b"policy,x\n\"unterminated\n")
    reps = load_reports(tmp_path)
    good = [r for r in reps if "rows" in r]
    assert [r["file"] for r in good] == ["w1/summary.csv"]
    assert good[0]["metrics"] == ["avg_jct_s", "makespan_s"]
    assert good[0]["rows"][1] == {"policy": "tiresias", "avg_jct_s": 80.25, "makespan_s": 850.0}


def test_overview_shows_who_holds_which_gpus(tmp_path):
    store = Store(tmp_path / "db.sqlite")
    a = store.submit(JobSpec(name="alpha", entry="x.py:make_job", gpus=2), now=0.0)
    b = store.submit(JobSpec(name="beta", entry="x.py:make_job", gpus=3), now=1.0)
    store.transition(a, "running", now=2.0, num_gpus=2, placement={"n1": 1, "n2": 1})
    store.record_allocation(a, 2.0, 2, None, {"n1": 1, "n2": 1})
    from dlsched.policy.base import NodeView
    d = overview(store, (NodeView("n1", 2), NodeView("n2", 2)), now=10.0)
    assert d["nodes"][0]["holders"] == [{"job_id": a, "name": "alpha", "gpus": 1}]
    assert [q["state"] for q in d["queue"]] == ["running", "queued"]
    assert d["queue"][1]["id"] == b and d["queue"][1]["predicted_start"] is None   # a's finish is unknown
    assert d["gantt"] == [{"job_id": a, "start": 2.0, "end": 10.0, "gpus": 2, "placement": {"n1": 1, "n2": 1},
                           "batch_size": None, "name": "alpha"}]
    # before a forecast: a's finish at its allocation, b unknown; once the loop made one, the queue shows it
    store.add_prediction(a, 11.0, 0.5, 1000.0, 40.0, 51.0, None)
    d = overview(store, (NodeView("n1", 2), NodeView("n2", 2)), now=12.0)
    assert [(q["predicted_start"], q["predicted_finish"]) for q in d["queue"]] == [(2.0, 51.0), (None, None)]
    store.set_forecast(11.0, {a: (11.0, 60.0), b: (65.0, 90.0)})
    d = overview(store, (NodeView("n1", 2), NodeView("n2", 2)), now=12.0)
    assert [(q["predicted_start"], q["predicted_finish"]) for q in d["queue"]] == [(2.0, 60.0), (65.0, 90.0)]
    # the job page gives the same answer, and no loss fit before the loop stored one
    detail = job_detail(store, b)
    assert (detail["predicted_start"], detail["predicted_finish"], detail["fit"]) == (65.0, 90.0, None)



def test_the_job_page_gets_an_optimus_fit_drawn_at_the_steps_where_the_batch_changed(tmp_path):
    """The page draws the Optimus terms over steps; a job whose batch changed was fitted per reference step, so the
    service sends the curve at its steps (``refit.in_steps``) and the page draws that instead."""
    store = Store(tmp_path / "db.sqlite")
    a = store.submit(JobSpec(name="alpha", entry="x.py:make_job", gpus=1), now=0.0)
    fit = {"beta0": 0.01, "beta1": 0.7, "beta2": 0.07, "scale": 1.4, "rmse": 0.01}
    store.add_prediction(a, 1.0, None, None, None, None, fit | {"optimus_steps": [[1.0, 2.0], [9.0, 1.5]]})
    assert job_detail(store, a)["fit"]["optimus_steps"] == [[1.0, 2.0], [9.0, 1.5]]
    store.add_prediction(a, 2.0, None, None, None, None, fit)   # one batch: the page draws the terms over steps
    assert "optimus_steps" not in job_detail(store, a)["fit"]


# ----------------------------------------------------------------------------- in the browser

def _chromium(url: str, tmp: Path, *extra: str, budget_ms: int = 4000) -> str:
    if CHROMIUM is None:
        pytest.skip("chromium is not installed (apt-get install -y chromium chromium-driver): CI must install it")
    out = subprocess.run([CHROMIUM, *CHROMIUM_FLAGS, f"--user-data-dir={tmp / 'chromium-profile'}",
                          f"--virtual-time-budget={budget_ms}", *extra, url],
                         capture_output=True, text=True, timeout=90)
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stdout




@pytest.fixture(scope="module")
def live_service(tmp_path_factory, data_dir):
    """A real service with two 2-slot nodes: a finished job, two running ones, one queued (the running ones run
    for minutes: a busy machine may take a minute to set this up, and they must still hold their GPUs after)."""
    tmp = tmp_path_factory.mktemp("dash")
    cluster = ClusterSpec(nodes=[{"name": "n1", "gpus": 2}, {"name": "n2", "gpus": 2}],
                          policy=POLICY, interval_s=0.2)
    svc = Service(cluster, tmp / "state", port=0, runtime=CONTRACT_RUNTIME).start()
    c = httpx.Client(base_url=svc.url, headers=svc.headers, timeout=10)
    try:
        specs = [("quick", 1, 60, 0.03), ("resnet-a", 2, 80000, 0.1), ("mlp-b", 1, 80000, 0.1), ("waiting", 4, 80, 0.05)]
        ids = {}
        for name, gpus, n, step in specs:
            # resnet-a states a target loss: its fit row says when the run reaches it
            facts = {"prediction": {"target_loss": 0.05}} if name == "resnet-a" else {}
            r = c.post("/jobs", json={"name": name, "entry": "contract.py:make_job", "gpus": gpus,
                                      "params": {"n_samples": n, "step_s": step}, "total_samples": n, **facts},
                       headers={"content-type": "application/json"})
            assert r.status_code == 201, r.text
            ids[name] = r.json()["id"]
        wait_until(lambda: c.get(f"/jobs/{ids['quick']}").json()["state"] == "finished", 60, "job quick to finish", 0.2)
        wait_until(lambda: len(c.get(f"/jobs/{ids['resnet-a']}/progress").json()) >= 12, 60, "progress of resnet-a", 0.2)
        wait_until(lambda: c.get(f"/jobs/{ids['resnet-a']}/predictions").json()
                   and c.get(f"/jobs/{ids['resnet-a']}/predictions").json()[-1]["loss_fit"], 60, "a loss fit", 0.2)
        # a real policy comparison: the simulator on Pollux workload 1 (shared/data/pollux/workloads); ~12 s of CPU,
        # 67 s at a load of 20 on 2 cores and past 120 s above ~35 (every test of the file errored in its fixture)
        sim = subprocess.run([sys.executable, "-m", "dlsched.cli", "simulate", "-w",
                              str(data_dir / "pollux" / "workloads" / "workload-1.csv"), "-p", "fifo", "-p", "tiresias",
                              "--report", str(tmp / "state" / "reports" / "workload-1")],
                             capture_output=True, text=True, timeout=600,
                             env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[2] / "src")})
        assert sim.returncode == 0, sim.stderr[-1000:]
    except BaseException:
        stop_service_and_jobs(svc)
        raise
    yield svc, ids, tmp
    c.close()
    stop_service_and_jobs(svc)


def test_overview_page_renders_cluster_queue_and_timeline(live_service):
    svc, ids, tmp = live_service
    shots = Path(os.environ.get("DLSCHED_SCREENSHOT_DIR", tmp))
    dom = _chromium(f"{svc.url}/dashboard/?token={svc.token}", tmp, "--dump-dom")
    assert 'id="load-error"' not in dom, dom[:2000]
    cluster = dom[dom.index('id="cluster"'):dom.index('id="queue"')]
    assert 'data-node="n1"' in cluster and 'data-node="n2"' in cluster
    held = re.findall(r'href="#/job/(\d+)" title="job \d+ ([\w-]+)"', cluster)
    assert sorted(held) == sorted([(str(ids["resnet-a"]), "resnet-a")] * 2 + [(str(ids["mlp-b"]), "mlp-b")])
    assert cluster.count("gpu free") == 1
    queue = dom[dom.index('id="queue"'):dom.index('id="gantt"')]
    for name in ("resnet-a", "mlp-b", "waiting"):
        assert name in queue
    assert "quick" not in queue                                  # finished: listed under recently ended
    row = re.search(rf'<tr data-job="{ids["waiting"]}">(.*?)</tr>', queue, re.S).group(1)
    assert "queued" in row
    # GPUs held of those asked for, said so: it read "0/4", and an elastic job grown past its start "2/1"
    assert re.search(r'<td class="num">0 <span class="muted asked" title="asked for 4 GPUs">of 4</span></td>', row)
    assert "GPUs held</th>" in queue
    # the batch the runtime reports where the scheduler sets none (the contract runtime's 8 a worker; "–" before)
    row = re.search(rf'<tr data-job="{ids["resnet-a"]}">(.*?)</tr>', queue, re.S).group(1)
    assert re.search(r'>2 <span class="muted asked" title="asked for 2 GPUs">of 2</span></td><td class="num">16</td>', row)
    gantt = dom[dom.index('id="gantt"'):]
    assert len(re.findall(r'class="alloc"', gantt)) >= 3
    recent = dom[dom.index('id="recent"'):]
    assert "quick" in recent and "finished" in recent
    shot = shots / "dashboard-overview.png"
    _chromium(f"{svc.url}/dashboard/?token={svc.token}", tmp, f"--screenshot={shot}", "--window-size=1400,1000")
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 20_000


def test_status_shows_the_batch_a_job_trains_at_where_the_scheduler_sets_none(live_service):
    """A job whose spec names no batch (a script's own: `submit -- python train.py`) showed "-" in status's BATCH;
    its runtime reports the batch every step, which the API now carries (``trained_batch``) and status shows."""
    svc, ids, _ = live_service
    with httpx.Client(base_url=svc.url, headers=svc.headers, timeout=10) as c:
        jobs = {j["id"]: j for j in c.get("/jobs").json()}
    a = jobs[ids["resnet-a"]]
    assert (a["batch_size"], a["trained_batch"]) == (None, 16)   # the contract runtime's 8 a worker, on 2
    row = next(r for r in job_rows(list(jobs.values())) if r[0] == str(ids["resnet-a"]))
    assert row[4] == "16"
    assert jobs[ids["waiting"]]["trained_batch"] is None          # never trained: nothing to say


def test_job_page_draws_loss_points_and_the_fitted_curve(live_service):
    svc, ids, tmp = live_service
    dom = _chromium(f"{svc.url}/dashboard/?token={svc.token}#/job/{ids['resnet-a']}", tmp, "--dump-dom")
    assert f"Job {ids['resnet-a']} — resnet-a" in dom
    assert "<td>batch size</td><td>16</td>" in dom   # its runtime's batch: its spec names none ("–" before)
    chart = dom[dom.index('id="loss-chart"'):dom.index('id="allocations"')]
    measured = chart[chart.index('data-label="measured loss"'):]
    assert measured.count("<circle") >= 10
    # the service's fit: Optimus, or the schedule-aware prediction to the job's budget (perf.curve_predict)
    assert re.search(r'data-label="fitted (Optimus|optimus|annealing) curve[^"]*"><path d="M[\d.]+,[\d.]+(L[\d.]+,[\d.]+){100,}',
                     chart)
    if 'data-label="fitted Optimus curve' in chart:
        assert "Optimus β = (" in dom and "RMSE" in dom
    else:   # the row describes the curve drawn, not the Optimus fit beside it
        assert re.search(r"(annealing|optimus): final [\d.]+ \(80 %: [\d.]+–[\d.]+\) at the budget.*RMSE [\d.]+ on the "
                         r"points it covers", dom), dom[dom.index("convergence fit"):][:400]
        assert re.search(r"points it covers \(loss units\); LR [^;]+; target loss 0.0500 (not reached by the budget|"
                         r"at step [\d,]+ .*, chance \d+ % by the budget|past the predicted final value: at the budget, "
                         r"step [\d,]+.*, only if the run does better, chance \d+ % by the budget)",
                         dom), dom[dom.index("convergence fit"):][:600]
    assert "running" in dom[dom.index('id="events"'):]
    shots = Path(os.environ.get("DLSCHED_SCREENSHOT_DIR", tmp))
    _chromium(f"{svc.url}/dashboard/?token={svc.token}#/job/{ids['resnet-a']}", tmp, f"--screenshot={shots / 'dashboard-job.png'}",
              "--window-size=1400,1000")


def test_the_job_page_lists_events_as_readable_fields(live_service):
    """An event's detail reads as key=value pairs, its times as clock times: not raw JSON with POSIX floats."""
    svc, ids, tmp = live_service
    dom = _chromium(f"{svc.url}/dashboard/?token={svc.token}#/job/{ids['quick']}", tmp, "--dump-dom")
    events = dom[dom.index('id="events"'):]
    assert "name=quick, gpus=1" in events and "&quot;" not in events, events[:1500]
    finished = re.search(r"<td>job_finished</td><td>([^<]*)</td>", events).group(1)
    assert re.fullmatch(r"time=\d\d:\d\d:\d\d", finished), finished
    # an ended job has no prediction: its predicted start and finish read "?", as if the service had failed to make one
    for row in ("predicted start", "predicted finish"):
        assert f"<td>{row}</td><td>–</td>" in dom, re.search(rf"<td>{row}</td><td>.*?</td>", dom).group(0)


def test_the_job_page_says_when_a_stated_metric_target_is_reached(live_service):
    """A job's ``prediction.target`` (service.metric_target): its fit row names the metric, the step it reaches the
    target at, the chance, and the metric's predicted final value with its band; a chart draws the metric as
    reported, its predicted curve to the budget and the target's level; the overview's queue names it."""
    svc, _, tmp = live_service
    store = svc.store
    jid = store.submit(JobSpec(name="evals", command=["python", "t.py"], gpus=64, prediction={
        "target": {"metric": "val_accuracy", "value": 0.97, "kind": "accuracy"}}))   # never placed on 4 slots
    there = store.submit(JobSpec(name="there", command=["python", "t.py"], gpus=64, prediction={
        "target": {"metric": "val_accuracy", "value": 0.9, "kind": "accuracy"}}))     # one its log got to
    waiting = store.submit(JobSpec(name="waiting", command=["python", "t.py"], gpus=64, prediction={
        "target": {"metric": "val_accuracy", "value": 0.95, "kind": "accuracy"}}))    # one not predicted yet
    short = store.submit(JobSpec(name="short", command=["python", "t.py"], gpus=64, prediction={
        "target": {"metric": "val_accuracy", "value": 0.99, "kind": "accuracy"}}))    # past its predicted final
    try:
        fit = {"beta0": 0.01, "beta1": 0.7, "beta2": 0.07, "scale": 1.4, "rmse": 0.01, "model": "annealing",
               "curve": [[10.0, 2.0], [800.0, 0.1]], "final": 0.1, "final_80": [0.08, 0.12], "alpha": 0.5,
               "drop": 0.1, "curve_rmse": 0.01,
               "metric_target": {"metric": "val_accuracy", "kind": "accuracy", "target": 0.97, "final": 0.9823,
                                 "final_80": [0.9609, 0.9842], "target_step": 347.7,
                                 "target_step_80": [320.2, 401.9], "target_chance": 0.8,
                                 "points": 30, "target_time": None,
                                 "curve": [[10.0 + 790 * i / 120, 0.9823 - 0.3 * (1 - i / 120) ** 3] for i in range(121)]}}
        for step in range(10, 310, 10):       # evaluations between steps, and an accuracy reported inside steps 1..5
            store.event("job_metrics", jid, step=step, epoch=0, metrics={"val_accuracy": 0.68 + step / 1000})
        store.add_progress(jid, [{"time": 1.0, "step": k, "samples": 32 * k, "loss": 2.0,
                                  "metrics": {"val_accuracy": 0.5}} for k in range(1, 6)], 1)
        store.add_prediction(jid, 1.0, 0.375, 25600.0, None, None, fit)
        dom = _chromium(f"{svc.url}/dashboard/?token={svc.token}#/job/{jid}", tmp, "--dump-dom")
        assert ("target val_accuracy 0.970 at step 348 [320–402], chance 80 % by the budget (val_accuracy predicted "
                "0.9823 at the budget, 80 %: 0.9609–0.9842)") in dom, dom[dom.index("convergence fit"):][:800]
        assert "Target: val_accuracy 0.97<" in dom
        chart = dom[dom.index('id="target-chart"'):dom.index('id="noise-chart"')]
        reported = chart[chart.index('data-label="reported val_accuracy"'):chart.index('data-label="predicted')]
        assert reported.count("<circle") == 35, reported[:500]
        assert re.search(r'data-label="predicted val_accuracy to the budget"><path d="M[\d.]+,[\d.]+(L[\d.]+,[\d.]+){120}"',
                         chart), chart[:1500]
        assert re.search(r'data-label="target 0.97"><path d="M[\d.]+,([\d.]+)L[\d.]+,\1"', chart), chart[-800:]
        # and the 80 % band of the step it gets there at, on the target's level: steps 320 to 402 of the chart's 1..800
        band = re.search(r'data-label="80 % band of when it gets there"><path d="M([\d.]+),([\d.]+)L([\d.]+),\2"', chart)
        assert band, chart[-1200:]
        x_of = lambda step: 56 + (step - 1) / 799 * (760 - 56 - 16)   # noqa: E731  (lineChart's margins)
        assert (float(band.group(1)), float(band.group(3))) == pytest.approx((x_of(320.2), x_of(401.9)), abs=0.1)
        # a rising accuracy fills the chart's top: its legend goes to the bottom corner, clear of the target's level
        legend = [float(y) for y in re.findall(r'<rect x="[\d.]+" y="([\d.]+)" width="10" height="10"', chart)]
        assert len(legend) == 4 and min(legend) > 150, legend
        # the overview's queue says it too, as `dlsched status`'s TARGET does (no time while it does not train); a
        # target the log already got to says so
        store.add_prediction(there, 1.0, 0.5, 25600.0, None, None, fit | {"metric_target": fit["metric_target"] | {
            "target": 0.9, "target_step": 120.0, "target_step_80": None, "target_reached": True,
            "target_chance": 1.0}})
        store.add_prediction(short, 1.0, 0.5, 25600.0, None, None, fit | {"metric_target": fit["metric_target"] | {
            "target": 0.99, "target_step": 800.0, "target_step_80": None, "target_chance": 0.12,
            "target_beyond_final": True}})
        queue = _chromium(f"{svc.url}/dashboard/?token={svc.token}", tmp, "--dump-dom")
        row = re.search(rf'<tr data-job="{jid}">(.*?)</tr>', queue, re.S).group(1)
        assert '<td class="target">val_accuracy 0.97: step 348 [320–402], chance 80 %</td>' in row, row
        row = re.search(rf'<tr data-job="{there}">(.*?)</tr>', queue, re.S).group(1)
        assert '<td class="target">val_accuracy 0.9: reached step 120</td>' in row, row
        row = re.search(rf'<tr data-job="{waiting}">(.*?)</tr>', queue, re.S).group(1)   # was "–"
        assert '<span title="no refit yet">val_accuracy 0.95: no prediction yet</span></td>' in row, row
        # the budget's step of a target past the predicted final read as when the job gets there (`status` alike)
        row = re.search(rf'<tr data-job="{short}">(.*?)</tr>', queue, re.S).group(1)
        assert ('<td class="target">val_accuracy 0.99: predicted to end at 0.9823; by the budget, step 800, only if it '
                'does better, chance 12 %</td>') in row, row
    finally:
        store.request_cancel(short)
        store.request_cancel(jid)
        store.request_cancel(there)
        store.request_cancel(waiting)


def test_the_job_page_draws_a_prediction_made_before_any_optimus_terms(live_service):
    """A job predicted from its first loss report (its task's finished runs: no Optimus terms yet) has its curve drawn
    and described as theirs; one that reports only its target's metric says it has no loss fit and gives the target.
    The page read the Optimus terms of every fit, and a fit without them left the job page blank."""
    svc, _, tmp = live_service
    store = svc.store
    first = store.submit(JobSpec(name="first", command=["python", "t.py"], gpus=64))   # never placed on 4 slots
    metric_only = store.submit(JobSpec(name="evals", command=["python", "t.py"], gpus=64, prediction={
        "target": {"metric": "val_accuracy", "value": 0.97, "kind": "accuracy"}}))
    try:
        store.add_progress(first, [{"time": 1.0, "step": 10, "samples": 320, "loss": 4.3}], 1)
        store.add_prediction(first, 1.0, 0.0125, 25600.0, None, None, {
            "model": "prior", "bands": "task_runs", "curve": [[10.0 + 790 * i / 120, 1.34 + 3 * (1 - i / 120) ** 4]
                                                              for i in range(121)],
            "final": 1.34, "final_80": [1.2, 1.5], "curve_rmse": None, "observed_until": 10.0,
            "lr": "cosine:warmup=40 (declared)"})
        dom = _chromium(f"{svc.url}/dashboard/?token={svc.token}#/job/{first}", tmp, "--dump-dom")
        row = dom[dom.index("convergence fit"):][:600]
        assert re.search(r"prior: final 1\.34\d* \(80 %: 1\.2\d*–1\.5\d*\) at the budget \(its task's finished runs, "
                         r"carried to its schedule\); LR cosine:warmup=40 \(declared\)", row), row
        chart = dom[dom.index('id="loss-chart"'):]
        assert re.search(r'data-label="fitted prior curve \+ prediction to the budget"><path d="M[\d.]+,[\d.]+'
                         r'(L[\d.]+,[\d.]+){120}"', chart), chart[:1500]
        store.add_progress(metric_only, [{"time": 1.0, "step": k, "samples": 32 * k} for k in range(1, 6)], 1)
        store.add_prediction(metric_only, 1.0, 0.375, 25600.0, None, None, {"metric_target": {
            "metric": "val_accuracy", "kind": "accuracy", "target": 0.97, "final": 0.9823, "final_80": [0.9609, 0.9842],
            "target_step": 347.7, "target_step_80": [320.2, 401.9], "target_chance": 0.8, "points": 3,
            "target_time": None, "curve": [[10.0, 0.7], [800.0, 0.9823]]}})
        dom = _chromium(f"{svc.url}/dashboard/?token={svc.token}#/job/{metric_only}", tmp, "--dump-dom")
        row = dom[dom.index("convergence fit"):][:600]
        assert "no loss fit" in row and "target val_accuracy 0.970 at step 348 [320–402]" in row, row
    finally:
        store.request_cancel(first)
        store.request_cancel(metric_only)


def test_the_dashboard_formats_the_same_time_fields_as_the_cli():
    js = (Path(__file__).parents[2] / "src/dlsched/service/dashboard/app.js").read_text()
    listed = re.search(r"const TIME_FIELDS = new Set\(\[(.*?)\]\)", js, re.S).group(1)
    assert set(re.findall(r'"(\w+)"', listed)) == TIME_FIELDS


def test_reports_page_compares_policies_from_dlsched_simulate(live_service):
    svc, _, tmp = live_service
    dom = _chromium(f"{svc.url}/dashboard/?token={svc.token}#/reports", tmp, "--dump-dom")
    assert "workload-1/summary.csv" in dom
    avg_jct = re.search(r'<svg[^>]*data-metric="avg_jct".*?</svg>', dom, re.S).group(0)
    best = re.search(r'<rect[^>]*fill="#16a34a"[^>]*><title>([^<]+)</title>', avg_jct)
    assert best and best.group(1).startswith("tiresias")        # lower average JCT than FIFO on workload 1
    util = re.search(r'<svg[^>]*data-metric="gpu_utilisation".*?</svg>', dom, re.S).group(0)
    assert re.search(r'fill="#16a34a"[^>]*><title>tiresias', util)   # higher utilisation is the better one
    assert dom.count('class="report-image"') == 2 and 'src="blob:' in dom    # the simulator's plots
    shots = Path(os.environ.get("DLSCHED_SCREENSHOT_DIR", tmp))
    _chromium(f"{svc.url}/dashboard/?token={svc.token}#/reports", tmp, f"--screenshot={shots / 'dashboard-reports.png'}",
              "--window-size=1400,1400")


def test_report_images_stay_inside_the_reports_folder(live_service):
    svc, _, _ = live_service
    ok = httpx.get(f"{svc.url}/dashboard/api/reports/image/workload-1/jct_cdf.png", headers=svc.headers)
    assert ok.status_code == 200 and ok.content[:4] == b"\x89PNG"
    for bad in ("workload-1/summary.csv", "..%2F..%2Fdlsched.db", "%2Fetc%2Fpasswd.png", "../../../etc/x.png"):
        assert httpx.get(f"{svc.url}/dashboard/api/reports/image/{bad}", headers=svc.headers).status_code == 404, bad


def test_dashboard_data_needs_the_token_but_the_page_does_not(tmp_path):
    cluster = ClusterSpec(nodes=[{"name": "n1", "gpus": 1}], policy=POLICY, interval_s=0.5)
    token = "t" * 32
    svc = Service(cluster, tmp_path / "state", port=0, token=token, runtime=CONTRACT_RUNTIME).start()
    try:
        assert httpx.get(f"{svc.url}/dashboard/").status_code == 200
        assert httpx.get(f"{svc.url}/dashboard/static/app.js").status_code == 200
        assert httpx.get(f"{svc.url}/dashboard/static/dashboard_routes.py").status_code == 404   # fixed list only
        assert httpx.get(f"{svc.url}/dashboard/api/overview").status_code == 401
        r = httpx.get(f"{svc.url}/dashboard/api/overview", headers={"Authorization": f"Bearer {token}"})
        assert r.status_code == 200 and r.json()["nodes"][0]["name"] == "n1"
        dom = _chromium(f"{svc.url}/dashboard/?token={token}", tmp_path, "--dump-dom")
        assert 'data-node="n1"' in dom and "load-error" not in dom
        # opened as serve's start line prints it: the page says how to give the token (it said only 'HTTP 401')
        dom = _chromium(f"{svc.url}/dashboard/", tmp_path, "--dump-dom")
        assert ("this page needs the service's token: open /dashboard/#token=TOKEN, TOKEN being what the token file "
                "named by `dlsched serve` at its start holds (STATE_DIR/token)") in dom
    finally:
        stop_service_and_jobs(svc)


def test_job_page_shows_an_ensembles_members_and_flotillas(live_service):
    """An ensemble job's members and flotillas, read back from the FLEET runtime's events (service/fleet_status)."""
    svc, ids, tmp = live_service
    store = svc.store
    # 64 slots, and members profiled on up to 64 each: never placed on this 4-slot cluster, so only the events below
    # describe it (profiles without rates left the policy a 1-slot job: placed, its start failed, and the page was
    # right to show no flotilla of a failed job)
    jid = store.submit(JobSpec(name="sweep", entry="examples/ensemble/ensemble_job.py:from_yaml", kind="ensemble",
                               gpus=64))
    try:
        store.event("job_profiled", jid,
                    profiles=[{"member": m, "rates": [100.0] * 64} for m in ("cnn-a", "cnn-b", "mlp-c")],
                    max_samples={"cnn-a": 1000, "cnn-b": 1000, "mlp-c": 500})
        store.event("job_flotillas", jid, flotillas=[{"members": {"cnn-a": 1, "cnn-b": 2}}], share=3, waiting=["mlp-c"],
                    samples_done={"cnn-a": 300, "cnn-b": 200, "mlp-c": 0})
        store.event("job_member_converged", jid, member="mlp-c", reason="max_epochs", epoch=4, best_acc=0.8125,
                    best_checkpoint="/jobs/9/ckpt/mlp-c.best.pt")
        ens = job_detail(store, jid)["ensemble"]
        assert ens["members"] == {"cnn-a": "training", "cnn-b": "training", "mlp-c": "stopped at max_epochs"}
        dom = _chromium(f"{svc.url}/dashboard/?token={svc.token}#/job/{jid}", tmp, "--dump-dom")
        section = dom[dom.index('id="ensemble"'):dom.index('id="loss-chart"')]
        assert "share 3 slots" in section and "cnn-a × 1, cnn-b × 2" in section
        # a member that left: its epochs, best validation accuracy and weights (the page had its state only)
        assert ('<td>mlp-c</td><td>stopped at max_epochs</td><td class="num">4</td><td class="num">0.8125</td>'
                "<td>/jobs/9/ckpt/mlp-c.best.pt</td>") in section
        # 300 + 200 of 2 x 1000, and mlp-c's 500 (it left): 40 % of the work its members could do
        assert "<td>fraction done</td><td>40.0%</td>" in dom
        listed = {j["id"]: j for j in httpx.get(f"{svc.url}/jobs", headers=svc.headers).json()}[jid]
        assert listed["fraction_done"] == 0.4 and job_rows([listed])[0][5] == "40.0%"     # `dlsched status`'s DONE
    finally:
        with contextlib.suppress(TransitionError):   # placed meanwhile: the contract runtime refuses --strategy fleet
            store.request_cancel(jid)


def test_an_ensembles_job_written_fields_are_shown_as_text_not_markup(live_service):
    """The members table and flotillas come from the job's progress events, which job code writes: an epoch, a
    flotilla's slot count or the share given as markup ran in the page of every token holder who opened the job
    (and could read the token from its sessionStorage)."""
    svc, ids, tmp = live_service
    store = svc.store
    jid = store.submit(JobSpec(name="sweep", entry="examples/ensemble/ensemble_job.py:from_yaml", kind="ensemble",
                               gpus=64))
    mark = '<img src="x" id="{}">'
    try:
        store.event("job_profiled", jid, profiles=[{"member": "a"}, {"member": "b"}], max_samples={"a": 10, "b": 10})
        store.event("job_flotillas", jid, flotillas=[{"members": {"a": 1}}], share=mark.format("share"))
        store.event("job_member_converged", jid, member="b", epoch=mark.format("epochs"))
        dom = _chromium(f"{svc.url}/dashboard/?token={svc.token}#/job/{jid}", tmp, "--dump-dom")
        assert 'id="members"' in dom
        for where in ("share", "epochs"):   # a flotilla's slot count must be a number (fleet_status.well_formed)
            assert mark.format(where) not in dom and f'&lt;img src="x" id="{where}"&gt;' in dom, where
    finally:
        with contextlib.suppress(TransitionError):   # placed meanwhile: the contract runtime refuses --strategy fleet
            store.request_cancel(jid)


def test_the_token_leaves_the_address_bar_once_the_page_has_it(tmp_path):
    """The page kept ?token= in the address bar, so in the browser's history and bookmarks and in the Referer of
    every request it made. It keeps the token for the tab (sessionStorage) and replaces the URL without it. The
    real page in a real browser, served by a stand-in that records what the page's API requests carry."""
    from dlsched.service.dashboard_routes import STATIC_DIR
    from tests.standin_server import standin_server

    seen = []

    def record(path, headers):
        if path.startswith("/dashboard/api/"):
            seen.append((headers.get("Authorization"), headers.get("Referer")))
            return 401, "application/json", b'{"detail": "recorded"}', {}
        name = "index.html" if path.split("?")[0] == "/dashboard/" else path.rsplit("/", 1)[-1]
        kind = {"js": "text/javascript", "css": "text/css"}.get(name.rsplit(".", 1)[-1], "text/html")
        return 200, kind, (STATIC_DIR / name).read_bytes(), {}

    with standin_server(record) as base:
        url = f"{base}/dashboard/"
        _chromium(f"{url}?token=s3cret#/job/7", tmp_path, "--dump-dom")
    assert seen and seen[0] == ("Bearer s3cret", url), seen   # the token sent, the URL without it (a Referer has no #)


def test_a_token_given_in_the_fragment_never_reaches_the_server_in_a_url(tmp_path):
    """``serve`` prints ``/dashboard/#token=...``: a fragment stays in the browser, where ``?token=`` was in the
    request line of the page's load, so in a reverse proxy's access log. The real page in a real browser, served by a
    stand-in that records every request line: none carries the token; the API requests carry it as a bearer token,
    and the address bar keeps neither."""
    from dlsched.service.dashboard_routes import STATIC_DIR
    from tests.standin_server import standin_server

    lines, seen = [], []

    def record(path, headers):
        lines.append(path)
        if path.startswith("/dashboard/api/"):
            seen.append(headers.get("Authorization"))
            return 200, "application/json", json.dumps({"now": 0, "counts": {}, "nodes": [], "total_jobs": 0,
                                                         "queue": [], "recent": [], "gantt": [], "gantt_jobs": 0,
                                                         "gantt_total_jobs": 0}).encode(), {}
        name = "index.html" if path.split("?")[0] == "/dashboard/" else path.rsplit("/", 1)[-1]
        kind = {"js": "text/javascript", "css": "text/css"}.get(name.rsplit(".", 1)[-1], "text/html")
        return 200, kind, (STATIC_DIR / name).read_bytes(), {}

    with standin_server(record) as base:
        dom = _chromium(f"{base}/dashboard/#token=fr4gment-s3cret", tmp_path, "--dump-dom")
    assert seen and set(seen) == {"Bearer fr4gment-s3cret"}, seen
    assert not [x for x in lines if "s3cret" in x], lines
    assert 'id="counts"' in dom and "load-error" not in dom


def test_a_live_job_that_trained_its_budget_is_ending_not_past_its_finish(tmp_path):
    """A job at 100 % still saving its last checkpoint showed its predicted finish "(3s ago)", read as overdue;
    it says ending, as `dlsched status`'s LEFT does. The real page in a real browser, given the real overview of a
    real store by a stand-in (no live job stops exactly there)."""
    import json

    from dlsched.policy.base import NodeView
    from dlsched.service.dashboard_routes import STATIC_DIR
    from tests.standin_server import standin_server

    store = Store(tmp_path / "db.sqlite")
    done, half = (store.submit(JobSpec(name=n, entry="x.py:make_job", gpus=1, total_samples=640), now=0.0)
                  for n in ("saving", "halfway"))
    for jid, samples in ((done, 640.0), (half, 320.0)):
        store.transition(jid, "running", now=1.0, num_gpus=1, placement={"n1": 1})
        store.update(jid, samples=samples, total_samples=640.0)
        store.add_prediction(jid, 5.0, samples / 640, 640.0, 0.0, 8.0, None)   # its finish: 8 s, passed
    body = json.dumps(overview(store, (NodeView("n1", 2),), now=10.0)).encode()

    def answer(path, headers):
        if path.startswith("/dashboard/api/overview"):
            return 200, "application/json", body, {}
        name = "index.html" if path.split("?")[0] == "/dashboard/" else path.rsplit("/", 1)[-1]
        kind = {"js": "text/javascript", "css": "text/css"}.get(name.rsplit(".", 1)[-1], "text/html")
        return 200, kind, (STATIC_DIR / name).read_bytes(), {}

    with standin_server(answer) as base:
        dom = _chromium(f"{base}/dashboard/?token=t", tmp_path, "--dump-dom")
    rows = {j: re.search(rf'<tr data-job="{j}">(.*?)</tr>', dom, re.S).group(1) for j in (done, half)}
    assert "ending" in rows[done] and " ago" not in rows[done].split("ending")[1], rows[done]
    assert "ending" not in rows[half] and " ago" in rows[half]   # short of its budget: past its finish, said so
    store.close()


def test_markup_that_reached_the_page_runs_no_script_under_the_pages_policy(tmp_path):
    """The page holds the token in sessionStorage and lays out job-written text. Should one value ever reach the
    markup unescaped, the page's Content-Security-Policy keeps its script from running (and no other site may frame
    the page). The real service's page and headers, relayed to a real browser by a stand-in that adds such markup;
    before the policy, the inline script and the onerror handler ran."""
    from tests.standin_server import standin_server

    cluster = ClusterSpec(nodes=[{"name": "n1", "gpus": 1}], policy=POLICY, interval_s=0.5)
    svc = Service(cluster, tmp_path / "state", port=0, runtime=CONTRACT_RUNTIME).start()
    kept = ("content-security-policy", "x-frame-options", "referrer-policy", "x-content-type-options")
    injected = (b'<script>document.title = "inline ran"</script>'
                b'<img src="/nothing.png" onerror="document.title = \'handler ran\'">')

    def relay(path, headers):
        r = httpx.get(f"{svc.url}{path}", headers={k: v for k, v in headers.items() if k.lower() == "authorization"})
        body = r.content.replace(b"<main", injected + b"<main") if path.startswith("/dashboard/?") else r.content
        return r.status_code, r.headers.get("content-type", ""), body, {k: r.headers[k] for k in kept if k in r.headers}

    try:
        page = httpx.get(f"{svc.url}/dashboard/")
        assert "frame-ancestors 'none'" in page.headers.get("content-security-policy", ""), page.headers
        assert page.headers["x-frame-options"] == "DENY" and page.headers["referrer-policy"] == "no-referrer"
        with standin_server(relay) as base:
            dom = _chromium(f"{base}/dashboard/?token={svc.token}", tmp_path, "--dump-dom")
        assert "<title>dlsched</title>" in dom and "ran" not in dom.split("</title>")[0], dom[:500]
        assert 'data-node="n1"' in dom and "load-error" not in dom   # the page itself still works under it
    finally:
        stop_service_and_jobs(svc)
