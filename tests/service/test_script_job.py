"""A user's own script submitted with `dlsched submit -- python ...` runs under the service end to end."""
import json
import os
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from dlsched.paths import REPO_ROOT
from dlsched.service.server import Service
from dlsched.spec import load_cluster_spec
from tests.service.teardown import stop_service_and_jobs
from tests.service import policies  # noqa: F401 - registers test-elastic
from tests.service.test_cli import SERVE
from tests.waiting import process_alive, wait_until


@pytest.mark.slow
def test_submit_a_script_its_reported_metrics_reach_logs_and_its_noise_the_dashboard(tmp_path):
    cluster = load_cluster_spec("nodes: [{name: n0, gpus: 2}]\npolicy: goodput\ninterval_s: 0.5")
    svc = Service(cluster, tmp_path / "state", port=0, workdir=REPO_ROOT).start()
    env = dict(os.environ, DLSCHED_TOKEN_FILE=str(svc.token_file), COLUMNS="200")

    def cli(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, str(SERVE), *args], capture_output=True, text=True, env=env,
                              timeout=timeout)

    try:
        r = cli("submit", "--server", svc.url, "--min-gpus", "1", "--max-gpus", "2", "--", "python",
                "examples/cifar_resnet.py", "--epochs", "2", "--samples", "200", "--batch-size", "32")
        assert r.returncode == 0 and r.stdout.strip() == "submitted job 1 (cifar_resnet)", r.stderr
        logs = cli("logs", "1", "-f", "--server", svc.url, timeout=900)  # follows until the job ends
        assert "val_accuracy" in logs.stdout and " loss " in logs.stdout, logs.stdout[-2000:]
        c = httpx.Client(base_url=svc.url, headers=svc.headers, timeout=30)
        end = time.monotonic() + 60
        while c.get("/jobs/1").json()["state"] != "finished" and time.monotonic() < end:
            time.sleep(0.2)
        job = c.get("/jobs/1").json()
        assert job["state"] == "finished", job.get("error")
        curve = c.get("/dashboard/api/jobs/1").json()["curve"]
        assert curve and all(p["loss"] is not None for p in curve)
        assert any(p["noise_scale"] for p in curve)
    finally:
        stop_service_and_jobs(svc)


def test_a_script_that_is_not_there_is_refused_at_submit_in_one_line(tmp_path):
    """`dlsched submit -- python nope.py` was accepted (job 6 'nope', exit 0) and failed only when it started."""
    (tmp_path / "work").mkdir()
    (tmp_path / "work" / "train.py").write_text("print('ok')\n")
    cluster = load_cluster_spec("nodes: [{name: n0, gpus: 1}]\npolicy: fifo\ninterval_s: 0.5")
    svc = Service(cluster, tmp_path / "state", port=0, workdir=tmp_path / "work").start()
    env = dict(os.environ, DLSCHED_TOKEN_FILE=str(svc.token_file), DLSCHED_SERVER=svc.url)

    def cli(*args: str) -> subprocess.CompletedProcess:   # --server would land after '--', in the script's args
        return subprocess.run([sys.executable, str(SERVE), *args], capture_output=True, text=True, env=env, timeout=60)

    try:
        r = cli("submit", "--", "python", "nope.py", "--epochs", "1")
        assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr
        assert "field command: script 'nope.py' not found" in r.stderr and "Traceback" not in r.stderr
        assert svc.store.count() == 0
        r = cli("submit", "--", "python", "train.py")   # the script that is there is accepted
        assert r.returncode == 0 and r.stdout.strip() == "submitted job 1 (train)", r.stderr
    finally:
        stop_service_and_jobs(svc)


def test_a_script_job_states_its_schedule_and_target_loss_on_the_command_line(tmp_path):
    """``--schedule`` and ``--target-loss`` become the spec's ``prediction`` (a command job has no params to carry
    them); a schedule that does not parse is refused in one line before anything is stored."""
    (tmp_path / "work").mkdir()
    (tmp_path / "work" / "train.py").write_text("print('ok')\n")
    cluster = load_cluster_spec("nodes: [{name: n0, gpus: 1}]\npolicy: fifo\ninterval_s: 0.5")
    svc = Service(cluster, tmp_path / "state", port=0, workdir=tmp_path / "work").start()
    env = dict(os.environ, DLSCHED_TOKEN_FILE=str(svc.token_file), DLSCHED_SERVER=svc.url)

    def cli(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, str(SERVE), *args], capture_output=True, text=True, env=env, timeout=60)

    try:
        r = cli("submit", "--schedule", "cosin", "--", "python", "train.py")
        assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr
        assert r.stderr.startswith("error: --schedule: schedule 'cosin': unknown"), r.stderr   # the option typed
        assert svc.store.count() == 0
        r = cli("submit", "--schedule", "cosine:warmup=50", "--target-loss", "1.5", "--", "python", "train.py")
        assert r.returncode == 0 and r.stdout.strip() == "submitted job 1 (train)", r.stderr
        assert svc.store.get(1).spec.prediction.model_dump(exclude_none=True) == {"schedule": "cosine:warmup=50",
                                                                                  "target_loss": 1.5}
        r = cli("submit", "--target-loss", "1.5", str(REPO_ROOT / "examples" / "demo" / "jobs" / "mlp-wide.yaml"))
        assert r.returncode == 2 and "--target-loss 1.5: for a script after '--'; a spec file sets " \
            "prediction.target_loss" in r.stderr
        # what finished jobs it is like (the prior's task and pool): the dataset, the model's depth, the regime
        r = cli("submit", "--dataset", "tinyshakespeare", "--depth", "6", "--regime", "finetune", "--", "python",
                "train.py")
        assert r.returncode == 0 and r.stdout.strip() == "submitted job 2 (train)", r.stderr
        assert svc.store.get(2).spec.prediction.model_dump(exclude_none=True) == {
            "dataset": "tinyshakespeare", "depth": 6, "regime": "finetune"}
        for flags, said in ((["--regime", "pretrained"], "error: --regime: "),   # the option typed, not the spec field
                            (["--dataset", "a b"], "error: --dataset: "),
                            (["--depth", "0"], "error: --depth: ")):
            r = cli("submit", *flags, "--", "python", "train.py")
            assert r.returncode == 2 and r.stderr.count("\n") == 1 and said in r.stderr, (flags, r.stderr)
        r = cli("submit", "--dataset", "x", str(REPO_ROOT / "examples" / "demo" / "jobs" / "mlp-wide.yaml"))
        assert r.returncode == 2 and "--dataset x: for a script after '--'; a spec file sets prediction.dataset" \
            in r.stderr
        assert svc.store.count() == 2
    finally:
        stop_service_and_jobs(svc)


def test_a_script_jobs_target_of_a_metric_it_reports_is_predicted_by_the_service(tmp_path):
    """``submit --target METRIC=V --metric loss -- python script``: the service predicts when a metric the script
    reports reaches V, one reported after each epoch (``val_mse``: ``job_metrics`` events) or inside every step
    (``train_mae``: on the step's record). Real processes: the service, its runtime and each script's worker. V above
    every value the run logs is reached already: at a logged step, for sure."""
    cluster = load_cluster_spec("nodes: [{name: n0, gpus: 2}]\npolicy: fifo\ninterval_s: 0.3")
    svc = Service(cluster, tmp_path / "state", port=0, workdir=REPO_ROOT).start()
    env = dict(os.environ, DLSCHED_TOKEN_FILE=str(svc.token_file), DLSCHED_SERVER=svc.url)

    def cli(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, str(SERVE), *args], capture_output=True, text=True, env=env, timeout=60)

    try:
        for flags, error in ((["--target", "val_score=1e9"], "--target val_score=1e9: say what val_score is: --metric"),
                             (["--target", "val_mse", "--metric", "loss"], "--target val_mse: expected METRIC=VALUE"),
                             (["--target", "val_mse=big", "--metric", "loss"], "'big' is not a number"),
                             (["--target", "val_mse=1", "--metric", "mse"], "--metric mse: Input should be 'loss', "
                                                                            "'error' or 'accuracy' (got 'mse')")):
            r = cli("submit", *flags, "--", "python", "tests/torch/user_script.py")
            assert r.returncode == 2 and r.stderr.count("\n") == 1 and error in r.stderr, (flags, r.stderr)
        assert svc.store.count() == 0
        for job_id, metric, kind in ((1, "val_mse", ["--metric", "loss"]), (2, "train_mae", [])):   # as its name says
            r = cli("submit", "--target", f"{metric}=1e9", *kind, "--", "python",
                    "tests/torch/user_script.py", "--epochs", "6", "--samples", "48", "--report-mae")
            assert r.returncode == 0 and r.stdout.strip() == f"submitted job {job_id} (user_script)", r.stderr
            assert r.stderr == ("" if kind else "note: --metric loss, from the metric's name 'train_mae' (give --metric "
                                "to choose)\n")
            assert svc.store.get(job_id).spec.prediction.target.model_dump() == {"metric": metric, "value": 1e9,
                                                                                 "kind": "loss"}
        c = httpx.Client(base_url=svc.url, headers=svc.headers, timeout=30)

        def predicted(job_id: int) -> dict | None:
            fits = [p["loss_fit"] for p in c.get(f"/jobs/{job_id}/predictions").json() if p["loss_fit"]]
            return next((f["metric_target"] for f in reversed(fits) if "metric_target" in f), None)

        for job_id, metric in ((1, "val_mse"), (2, "train_mae")):
            wait_until(lambda: predicted(job_id) or c.get(f"/jobs/{job_id}").json()["state"] in ("finished", "failed"),
                       300, f"a prediction of job {job_id}'s {metric} target")
            got = predicted(job_id)
            assert got is not None, (c.get(f"/jobs/{job_id}").json(), c.get(f"/jobs/{job_id}/events").json()[-5:])
            # the steps the metric was reported at: the evaluations' events, or the steps stored with it. The job
            # trains on meanwhile: a read between two of the store's holds the first's steps and none past the second's
            def reported() -> set[float]:
                return {float(step) for step, _ in svc.store.metric_values(job_id, metric, "job_metrics").values}
            logged = reported()
            evals = {float(e["detail"]["step"]) for e in c.get(f"/jobs/{job_id}/events").json()
                     if e["kind"] == "job_metrics"}
            assert logged <= evals <= reported() if metric == "val_mse" else len(logged) > 2 * len(evals), \
                (sorted(logged), evals)
            # from its first report on (one point: the finished runs' shapes through it, ``perf.one_point``)
            assert (got["metric"], got["kind"], got["target"]) == (metric, "loss", 1e9) and got["points"] >= 1
            assert got["target_chance"] == 1.0 and got["target_step"] in logged, (got, sorted(logged))
            assert 0 < got["final"] and got["final_80"][0] <= got["final"] <= got["final_80"][1]
            # the dashboard's chart of it: the reports, and the predicted curve to the job's budget (36 steps)
            drawn = c.get(f"/dashboard/api/jobs/{job_id}").json()
            assert logged <= {p[0] for p in drawn["target"]["points"]} <= reported(), (drawn["target"], sorted(logged))
            assert drawn["target"]["value"] == 1e9
            assert drawn["prediction"]["loss_fit"]["metric_target"]["curve"][-1][0] == 36.0
        shown = c.get("/jobs/1").json()      # `dlsched show`, and `dlsched status`'s TARGET while the job runs
        last = shown["prediction"]["loss_fit"]["metric_target"]
        assert shown["target"] == {"metric": "val_mse", "value": 1e9, "step": last["target_step"],
                                   "time": last["target_time"], "chance": 1.0, "step_80": None, "time_80": None,
                                   "reached": True, "final": last["final"], "beyond": False}
        # once they finish, each leaves its target's fit for the prior of new jobs' targets (service.job_models)
        wait_until(lambda: all(c.get(f"/jobs/{i}").json()["state"] in ("finished", "failed") for i in (1, 2)), 300,
                   "jobs 1 and 2 to end")
        assert [c.get(f"/jobs/{i}").json()["state"] for i in (1, 2)] == ["finished"] * 2
        # from its first prediction on, every row holds the target's (the newest row is what the dashboard and
        # `show` read): the second evaluation's refit raised inside the predictor and stored a row without it
        for i in (1, 2):
            fits = [p["loss_fit"] or {} for p in c.get(f"/jobs/{i}/predictions").json()]
            first = next(n for n, f in enumerate(fits) if "metric_target" in f)
            assert all("metric_target" in f for f in fits[first:]), [sorted(f) for f in fits]
        # each target of 1e9 was reached at its first prediction: one target_reached event each, where and when
        told = {i: [e["detail"] for e in c.get(f"/jobs/{i}/events").json() if e["kind"] == "target_reached"]
                for i in (1, 2)}
        assert {i: [(d["metric"], d["value"]) for d in told[i]] for i in told} == \
            {1: [("val_mse", 1e9)], 2: [("train_mae", 1e9)]}, told
        assert all(d["step"] is not None and d["time"] is not None for ds in told.values() for d in ds), told
        wait_until(lambda: len(svc.store.finished_fits()) == 4, 60, "the finished jobs' fits")
        kept = [f["meta"] for f in svc.store.finished_fits() if "kind" in f["meta"]]
        assert [(m["metric"], m["kind"]) for m in kept] == [("val_mse", "loss"), ("train_mae", "loss")], kept
        c.close()
    finally:
        stop_service_and_jobs(svc)


@contextmanager
def growing_script_job(tmp_path: Path, script: str, settings: str = "", slots: int = 2):
    """Jobs a (all GPUs but one) and b (1..2 GPUs) of ``tests/service/SCRIPT --gate DIR`` on one node of ``slots``
    GPUs (``settings``: more lines of the cluster file); once b trains, a is cancelled and its first GPU goes to b (a
    resize). Yields (service, client, b's id, b's gate folder). a's gate holds ``release`` from the start: its own
    workers 1.. are no resize newcomers, so none of them waits at it."""
    gates = {name: tmp_path / name for name in ("a", "b")}
    for g in gates.values():
        g.mkdir()
    (gates["a"] / "release").touch()
    cluster = load_cluster_spec(f"nodes: [{{name: n0, gpus: {slots}}}]\npolicy: test-elastic\ninterval_s: 0.3\n"
                                f"{settings}")
    svc = Service(cluster, tmp_path / "state", port=0, workdir=REPO_ROOT).start()
    c = httpx.Client(base_url=svc.url, headers=svc.headers, timeout=30)

    def submit(name: str, gpus: str) -> int:
        spec = f"name: {name}\ncommand: [python, tests/service/{script}, --gate, '{gates[name]}']\n{gpus}\n"
        r = c.post("/jobs", content=spec, headers={"content-type": "application/yaml"})
        assert r.status_code == 201, r.text
        return r.json()["id"]

    try:
        a = submit("a", f"gpus: {slots - 1}")
        wait_until(lambda: c.get(f"/jobs/{a}").json()["state"] == "running", 60, "job a running")
        b = submit("b", "gpus: 1\nmin_gpus: 1\nmax_gpus: 2")
        wait_until(lambda: c.get(f"/jobs/{b}").json()["samples"] > 0, 120, "job b training on 1 GPU")
        c.post(f"/jobs/{a}/cancel")
        yield svc, c, b, gates["b"]
    finally:
        c.close()
        stop_service_and_jobs(svc)


@pytest.mark.slow
def test_a_script_that_ends_during_its_resize_finishes_and_says_the_resize_was_abandoned(tmp_path):
    """A script job growing 1 -> 2 GPUs whose script ended (no End: a plain loop) while its new worker was still
    starting stayed `rescaling` forever: the coordinator waited for the newcomer, then for an End none would send."""
    # its GPU goes to b once a is cancelled: the resize starts a new worker, held at the gate
    with growing_script_job(tmp_path, "ending_script.py") as (svc, c, b, gate):
        def job(j: int) -> dict:
            return c.get(f"/jobs/{j}").json()

        wait_until(lambda: (gate / "worker-1.started").exists(), 120, "b's new worker started")
        (gate / "end").touch()     # the script ends while the newcomer still prepares ...
        first = json.loads((svc.jobs_dir / str(b) / "status.json").read_text())["worker_pids"][0]
        wait_until(lambda: not process_alive(first),
                   60, "b's first worker exited")
        (gate / "release").touch()  # ... and only then joins: no End will ever come
        wait_until(lambda: job(b)["state"] in ("finished", "failed"), 120, "job b ended")
        assert job(b)["state"] == "finished", job(b)["error"]
        events = c.get(f"/jobs/{b}/events").json()
        kinds = [e["kind"] for e in events]
        assert "rescaling" in kinds and "job_resized" not in kinds, kinds
        abandoned = [e for e in events if e["kind"] == "job_resize_abandoned"]
        assert abandoned and "ended before its new workers joined" in json.dumps(abandoned[0]), events


@pytest.mark.slow
def test_a_resize_whose_new_worker_crashes_returns_the_job_to_running_on_the_gpus_it_trains_on(tmp_path):
    """A script job growing 1 -> 2 GPUs whose new worker crashed in start-up trained on at 1 GPU but stayed
    `rescaling` at 2 for the rest of its run: the service waited for a step on 2 workers that never came."""
    # its GPU goes to b once a is cancelled: the resize's new worker (id 1) crashes in start-up
    with growing_script_job(tmp_path, "crashing_newcomer.py") as (svc, c, b, gate):
        def job(j: int) -> dict:
            return c.get(f"/jobs/{j}").json()

        def kinds(j: int) -> list[dict]:
            return [e for e in c.get(f"/jobs/{j}/events").json() if e["kind"] in ("running", "rescaling")]

        wait_until(lambda: (gate / "worker-1.crashed").exists(), 120, "b's new worker crashed")
        back = wait_until(lambda: [e for e in kinds(b) if e["kind"] == "running" and e["detail"].get("from") ==
                                   "rescaling"], 120, "b back to running after the failed resize")
        d = back[0]["detail"]
        assert d["gpus"] == 1 and d["placement"] == {"n0": 1} and "resize abandoned" in d["reason"], back
        assert "new worker 1 exited with 3" in d["reason"], d
        # the next round decides again: the retry's new worker (id 2) joins, and the job trains on 2
        wait_until(lambda: job(b)["state"] == "running" and job(b)["num_gpus"] == 2, 180, "b grown to 2 on retry")
        events = kinds(b)
        seq = [(e["kind"], e["detail"].get("gpus")) for e in events]
        assert seq == [("running", 1), ("rescaling", 2), ("running", 1), ("rescaling", 2), ("running", None)], seq
        assert events[3]["time"] - events[2]["time"] >= d["no_grow_for_s"] > 0, events   # not the next round: no storm
        assert job(b)["placement"] == {"n0": 2} and svc.backend._slots[b] == {"n0": [0, 1]}
        (gate / "end").touch()
        wait_until(lambda: job(b)["state"] in ("finished", "failed"), 120, "job b ended")
        assert job(b)["state"] == "finished", job(b)["error"]


@pytest.mark.slow
def test_a_resize_whose_new_worker_hangs_in_start_up_is_given_up_at_the_resize_timeout(tmp_path):
    """A script job growing 1 -> 2 GPUs whose new worker hung in start-up (never exited, never joined) stayed
    `rescaling` with the second GPU reserved for good: only a crash was noticed, and nothing timed a resize."""
    with growing_script_job(tmp_path, "hanging_newcomer.py", "resize_timeout_s: 3600") as (svc, c, b, gate):
        def job(j: int) -> dict:
            return c.get(f"/jobs/{j}").json()

        hung = gate / "worker-1.hung"
        pid = int(wait_until(lambda: hung.exists() and hung.read_text().strip(), 120, "b's new worker hanging"))
        # the cluster file's timeout is the loop's; shortened only now, so that under load a newcomer still starting
        # (python and torch imports) is not given up before it hangs
        assert svc.loop.deadline.timeout_s == 3600
        svc.loop.deadline.timeout_s = 4
        back = wait_until(lambda: [e for e in c.get(f"/jobs/{b}/events").json() if e["kind"] == "running" and
                                   e["detail"].get("from") == "rescaling"], 120, "b back to running at the timeout")
        d = back[0]["detail"]
        assert d["gpus"] == 1 and d["placement"] == {"n0": 1} and "resize_timeout_s=4 s" in d["reason"], d
        assert d["no_grow_for_s"] > 0, d   # the backoff applies as after a crash
        wait_until(lambda: not process_alive(pid),
                   60, "the hung newcomer killed")
        superseded = wait_until(lambda: [e for e in c.get(f"/jobs/{b}/events").json()
                                         if e["kind"] == "job_resize_abandoned"], 60, "the runtime's abandonment")
        assert "superseded by a newer request" in superseded[0]["detail"]["reason"], superseded
        assert job(b)["state"] == "running" and svc.backend._slots[b] == {"n0": [1]}, svc.backend._slots
        samples = job(b)["samples"]
        wait_until(lambda: job(b)["samples"] > samples, 60, "b training on at 1 GPU")
        (gate / "end").touch()
        wait_until(lambda: job(b)["state"] in ("finished", "failed"), 120, "job b ended")
        assert job(b)["state"] == "finished", job(b)["error"]
