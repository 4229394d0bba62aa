"""The operator's commands as a user runs them (separate processes, piped at 80 columns) against a real service."""
import json
import os
import re
import shlex
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from dlsched.service.server import Service, free_port
from tests.service.conftest import RUNTIME, cluster, job_yaml
from tests.service.teardown import stop_service_and_jobs
from tests.waiting import wait_until

REPO = Path(__file__).resolve().parents[2]
SERVE = REPO / "tests" / "service" / "serve_for_tests.py"


def cli(*args, svc=None, timeout=90, columns=80):
    """``svc``: talk to that service as its user does, with the token from its 0600 token file."""
    extra = ["--server", svc.url] if svc else []
    env = dict(os.environ, COLUMNS=str(columns))
    if svc is not None:
        env["DLSCHED_TOKEN_FILE"] = str(svc.token_file)
    return subprocess.run([sys.executable, str(SERVE), *args, *extra], capture_output=True, text=True,
                          timeout=timeout, env=env, cwd=REPO)


def no_cut_cells(text: str) -> bool:
    return "…" not in text and "..." not in text


@pytest.fixture
def busy_service(tmp_path):
    """A service with one finished, one failed-by-cancel and one long-running job."""
    svc = Service(cluster(slots=(2, 2)), tmp_path / "state", port=0, runtime=RUNTIME).start()
    c = httpx.Client(base_url=svc.url, headers=svc.headers, timeout=30)
    names = ["quick-job-with-a-rather-long-name", "long-running-job", "to-be-cancelled"]
    ids = [c.post("/jobs", content=job_yaml(names[0], samples=64),
                  headers={"content-type": "application/yaml"}).json()["id"],
           c.post("/jobs", content=job_yaml(names[1], samples=10**6, step_s=0.05),
                  headers={"content-type": "application/yaml"}).json()["id"],
           c.post("/jobs", content=job_yaml(names[2], gpus=2, samples=10**6, step_s=0.05),
                  headers={"content-type": "application/yaml"}).json()["id"]]
    wait_until(lambda: c.get(f"/jobs/{ids[0]}").json()["state"] == "finished", 90, "quick job finishes")
    c.post(f"/jobs/{ids[2]}/cancel")
    wait_until(lambda: c.get(f"/jobs/{ids[2]}").json()["state"] == "cancelled", 60, "job cancelled")
    yield svc, ids
    c.close()
    stop_service_and_jobs(svc)


def test_every_table_fits_80_columns_without_cutting_a_cell_and_every_json_parses(busy_service):
    svc, ids = busy_service
    for args in (["status"], ["status", "--active"], ["history"], ["events"], ["events", "--job", str(ids[0])]):
        r = cli(*args, svc=svc)
        assert r.returncode == 0, (args, r.stderr)
        assert no_cut_cells(r.stdout), (args, r.stdout)
        assert all(len(line) <= 80 for line in r.stdout.splitlines()), (args, r.stdout)
    status = cli("status", svc=svc).stdout
    assert "quick-job-with-a-rather-long-name" in status and "long-running-job" in status
    wide = cli("status", "--wide", svc=svc).stdout
    assert "SAMPLES/S" in wide and no_cut_cells(wide)

    jobs = json.loads(cli("status", "--json", svc=svc).stdout)
    assert [j["id"] for j in jobs] == ids
    assert [j["id"] for j in json.loads(cli("status", str(ids[2]), str(ids[0]), "--json", svc=svc).stdout)] == \
        [ids[0], ids[2]]                                  # like squeue -j: only the jobs named
    one = cli("status", str(ids[1]), svc=svc).stdout
    assert "long-running-job" in one and "quick-job" not in one, one
    r = cli("status", "999", svc=svc)
    assert (r.returncode, r.stdout, r.stderr) == (2, "", "error: job 999: no such job\n"), r
    r = cli("status", str(ids[0]), "--active", svc=svc)
    assert r.returncode == 2 and r.stderr == f"error: job {ids[0]}: not queued or running (--active)\n", r
    assert jobs[0]["end_time"].endswith("+00:00") and "T" in jobs[0]["submit_time"]   # ISO 8601, not epoch floats
    hist = json.loads(cli("history", "--json", svc=svc).stdout)
    assert {j["state"] for j in hist} == {"finished", "cancelled"}
    assert json.loads(cli("history", "--state", "cancelled", "--json", svc=svc).stdout)[0]["id"] == ids[2]
    listed = cli("events", svc=svc).stdout          # checkpoints are summarised, not listed one by one
    assert "checkpoint event(s) not shown" in listed and " job_checkpoint " not in listed
    assert '"time": "20' in listed and not re.search(r'"time": \d', listed), listed   # ISO like --json's, not epoch
    assert " job_checkpoint " in cli("events", "--all", svc=svc, columns=200).stdout
    events = json.loads(cli("events", "--json", "--type", "finished", svc=svc).stdout)
    assert events and all(e["kind"] == "finished" for e in events)
    shown = json.loads(cli("show", str(ids[0]), svc=svc).stdout)
    assert shown["state"] == "finished" and isinstance(shown["end_time"], str)


def test_cancelled_jobs_show_their_reason_and_cancelling_an_ended_job_is_an_error(busy_service):
    svc, ids = busy_service
    status = cli("status", svc=svc, columns=200).stdout
    line = next(ln for ln in status.splitlines() if "to-be-cancelled" in ln)
    assert "cancel" in line and "done" not in line
    r = cli("cancel", str(ids[0]), svc=svc)
    assert r.returncode == 1
    # history's GPUS column was num_gpus, what a job holds now: 0 for every ended job; it shows GPU time held
    from dlsched.display import human_duration

    held = {j["id"]: j["attained_service"] for j in json.loads(cli("history", "--json", svc=svc).stdout)}
    assert held[ids[0]] > 0 and held[ids[2]] > 0
    hist = cli("history", "--wide", svc=svc, columns=200).stdout.splitlines()
    assert hist[1].split()[4] == "GPU-TIME"
    for job_id in (ids[0], ids[2]):
        row = next(ln for ln in hist if ln.split()[0] == str(job_id)).split()
        want = human_duration(held[job_id])   # "8s" or "1m 48s": one or two words
        assert " ".join(row[4:4 + len(want.split())]) == want, (row, want)
    assert r.stderr.strip() == f"error: job {ids[0]} already finished; nothing to cancel"


def test_submit_overrides_and_a_misspelled_param_gets_did_you_mean_at_submit(tmp_path):
    svc = Service(cluster(slots=(2,)), tmp_path / "state", port=0, workdir=REPO).start()   # real runtime
    try:
        spec = tmp_path / "mlp.yaml"
        spec.write_text("name: mlp\nentry: examples/mlp.py:make_job\ngpus: 1\nparams: {num_sampels: 64}\n")
        r = cli("submit", str(spec), svc=svc)
        assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr
        assert "params.num_sampels" in r.stderr and "did you mean 'num_samples'?" in r.stderr
        spec.write_text("name: mlp\nentry: examples/mlpp.py:make_job\ngpus: 1\n")
        r = cli("submit", str(spec), svc=svc)
        assert r.returncode == 2 and "'examples/mlpp.py' not found" in r.stderr
        assert svc.store.count() == 0
        spec.write_text("name: mlp\nentry: examples/mlp.py:make_job\ngpus: 1\n")
        r = cli("submit", str(spec), "--name", "renamed", "--gpus", "2", "--param", "num_samples=64",
                "--param", "lr=0.01", "--json", svc=svc)
        assert r.returncode == 0, r.stderr
        job_id = json.loads(r.stdout)[0]["id"]
        job = httpx.get(f"{svc.url}/jobs/{job_id}", headers=svc.headers).json()
        assert job["name"] == "renamed" and job["spec"]["gpus"] == 2
        assert job["spec"]["params"] == {"num_samples": 64, "lr": 0.01}
        r = cli("submit", str(spec), "--param", "num_samples", svc=svc)
        assert r.returncode == 2 and "expected key=value" in r.stderr
        # an empty --name (a shell variable left unset) was the file's name, exit 0
        for args in ([str(spec)], ["--", "python", "examples/mlp.py"]):
            r = cli("submit", "--name", "", *args, svc=svc)
            assert r.returncode == 2 and r.stderr.count("\n") == 1 and "field name" in r.stderr, r
            assert "(got '')" in r.stderr, r.stderr
        assert svc.store.count() == 1
    finally:
        stop_service_and_jobs(svc)


def test_serve_without_options_runs_on_this_machine_and_a_busy_port_is_one_line(tmp_path):
    # --port 0: the OS picks one, and the first line names it (it was refused: '--port 0: expected 1..65535')
    proc = subprocess.Popen([sys.executable, "-m", "dlsched.cli", "serve", "--port", "0",
                             "--state-dir", str(tmp_path / "state")], cwd=tmp_path, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        first = proc.stdout.readline()
        port = int(re.search(r"API http://127\.0\.0\.1:(\d+) ", first).group(1))
        assert port > 0 and f"API http://127.0.0.1:{port}" in first and f"dashboard http://127.0.0.1:{port}/dashboard/" in first
        second, third = proc.stdout.readline(), proc.stdout.readline()
        token_file = tmp_path / "state" / "token"
        # how a client and a browser authenticate: the printed dashboard URL alone showed 'HTTP 401'
        assert third.strip() == (f"clients: export DLSCHED_SERVER=http://127.0.0.1:{port} DLSCHED_TOKEN_FILE="
                                 f"{token_file}; the dashboard: http://127.0.0.1:{port}/dashboard/#token=<the token in "
                                 f"{token_file}>")
        wait_until(lambda: _healthy(port), 60, "service answers /healthz")
        token = (tmp_path / "state" / "token").read_text().strip()     # generated 0600 on the first start
        nodes = httpx.get(f"http://127.0.0.1:{port}/cluster", headers={"Authorization": f"Bearer {token}"}).json()["nodes"]
        assert len(nodes) == 1 and nodes[0]["gpus"] >= 1
        n, kind = nodes[0]["gpus"], ("CPU slot" if nodes[0]["gpu_type"] == "slot" else f"{nodes[0]['gpu_type']} GPU")
        assert f"cluster this machine, {n} {kind}{'' if n == 1 else 's'}, policy " in second
        again = subprocess.run([sys.executable, "-m", "dlsched.cli", "serve", "--port", str(port),
                                "--state-dir", str(tmp_path / "other")], capture_output=True, text=True, timeout=60)
        assert again.returncode == 2 and again.stdout == ""
        assert again.stderr.strip() == (f"error: --port {port}: 127.0.0.1:{port} is already in use "
                                        f"(another dlsched serve?); choose another with --port")
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=60)


@pytest.mark.parametrize("host, why", [("192.0.2.1", "Cannot assign requested address"),   # TEST-NET: no host's
                                       ("no-such-host.invalid", "")])
def test_a_host_this_machine_lacks_is_named_as_the_host_not_a_busy_port(tmp_path, host, why):
    # it said "--port P: ... is already in use (another dlsched serve?)": the operator went hunting for a process
    port = free_port()
    r = subprocess.run([sys.executable, "-m", "dlsched.cli", "serve", "--host", host, "--port", str(port),
                        "--state-dir", str(tmp_path / "state")], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and r.stdout == "" and r.stderr.count("\n") == 1, r
    assert r.stderr.startswith(f"error: --host {host}: cannot listen on {host}:{port} (" + why), r.stderr
    assert "in use" not in r.stderr and not (tmp_path / "state").exists()


def test_a_refused_serve_does_not_load_the_service():
    """serve imported the service and its backends (scipy, pandas: ~1 CPU-s) before checking its options: a refused
    --host or --jobs-dir took ~1.9 CPU-s to say one line."""
    code = ("import atexit, runpy, sys; atexit.register(lambda: print('dlsched.service.server' in sys.modules)); "
            "sys.argv = ['dlsched', *sys.argv[1:]]; runpy.run_module('dlsched.cli', run_name='__main__')")
    r = subprocess.run([sys.executable, "-c", code, "serve", "--host", "192.0.2.1", "--port", str(free_port()),
                        "--state-dir", "/nonexistent/state"], capture_output=True, text=True, timeout=60)
    assert (r.returncode, r.stdout) == (2, "False\n") and r.stderr.startswith("error: --host 192.0.2.1: "), r


@pytest.mark.parametrize("under", ["", "/jobs"])
def test_a_jobs_dir_that_cannot_hold_folders_is_refused_at_start(tmp_path, under):
    # a file as --jobs-dir started the service; every job submitted then failed at its start (NotADirectoryError,
    # a traceback in the service's log)
    (tmp_path / "notes.txt").write_text("x")
    jobs = tmp_path / "notes.txt"
    r = subprocess.run([sys.executable, "-m", "dlsched.cli", "serve", "--port", str(free_port()), "--state-dir",
                        str(tmp_path / "state"), "--jobs-dir", f"{jobs}{under}"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and r.stdout == "" and r.stderr.count("\n") == 1, r
    named = "" if not under else f"{str(jobs)!r} "
    assert r.stderr.strip() == f"error: --jobs-dir {str(jobs) + under!r}: {named}exists and is not a folder", r.stderr
    assert not (tmp_path / "state").exists()


@pytest.mark.parametrize("stop, code", [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_a_stopped_service_says_its_jobs_keep_running_and_how_to_take_them_up(tmp_path, stop, code):
    """Ctrl-C or SIGTERM ended `serve` without a word, its jobs still running on the machine; on SIGTERM the
    process was killed by the signal uvicorn re-raises, before the service closed."""
    port, state = free_port(), tmp_path / "state"
    (tmp_path / "cluster.yaml").write_text("nodes: [{name: n0, gpus: 1}]\npolicy: test-fifo\ninterval_s: 0.2\n")
    args = ["serve", "--port", str(port), "--state-dir", str(state), "-c", "cluster.yaml", "--runtime",
            " ".join(RUNTIME), "--workdir", str(tmp_path)]
    # the restart named is the command that ran: `--state-dir S` alone scheduled onto this machine, not cluster.yaml
    restart = ["dlsched", *args]
    proc = subprocess.Popen([sys.executable, str(SERVE), *args], cwd=tmp_path, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    launch = state / "jobs" / "1" / "launch.json"
    try:
        wait_until(lambda: _healthy(port), 60, "service answers /healthz")
        c = httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30,
                         headers={"Authorization": f"Bearer {(state / 'token').read_text().strip()}"})
        for name in ("runs", "waits"):
            c.post("/jobs", content=job_yaml(name, samples=10**6, step_s=0.05), headers={"content-type": "application/yaml"})
        wait_until(lambda: c.get("/jobs/1").json()["state"] == "running" and launch.exists(), 60, "job 1 runs")
        proc.send_signal(stop)
        out, err = proc.communicate(timeout=90)
        assert proc.returncode == code, err[-2000:]
        assert out.splitlines()[-1] == (f"dlsched service stopped; job(s) 1 keep running; job(s) 2 stay queued: "
                                        f"`{shlex.join(restart)}` takes them up again "
                                        "(cancel them there to stop them)"), out + err[-2000:]
        os.kill(json.loads(launch.read_text())["pid"], 0)   # the job did keep running
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)
        if launch.exists():
            try:
                os.killpg(json.loads(launch.read_text())["pid"], signal.SIGKILL)
            except ProcessLookupError:
                pass


def _healthy(port: int) -> bool:
    try:
        return httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def test_a_held_batch_is_what_the_job_runs_at_under_a_policy_that_chooses_no_batch(tmp_path):
    """The tester's report under tiresias: `resize 18 -n 2 --batch 128` on a queued job said 'held at 2 worker(s),
    batch 128 (queued)' and the job started at 2 workers and batch 64; `resize 18 -n 3 --batch 256` resized it to 3
    workers at 64 ('requested_batch': 256, 'batch_size': 64). Here the contract runtime's own step records say the
    batch it trains at."""
    svc = Service(cluster(policy="tiresias", slots=(2, 2)), tmp_path / "state", port=0,
                  runtime=RUNTIME).start()
    try:
        c = httpx.Client(base_url=svc.url, headers=svc.headers, timeout=30)
        yaml = {"content-type": "application/yaml"}
        big = c.post("/jobs", content=job_yaml("big", gpus=4, samples=10**6, step_s=0.05), headers=yaml).json()["id"]
        wait_until(lambda: c.get(f"/jobs/{big}").json()["state"] == "running", 60, "the 4-slot job runs")
        job = c.post("/jobs", content=job_yaml("ranged", gpus=1, max_gpus=3, samples=10**6, step_s=0.05,
                                               extra="min_batch_size: 16\nmax_batch_size: 64\n"),
                     headers=yaml).json()["id"]
        r = cli("resize", str(job), "-n", "2", "--batch", "64", svc=svc)
        assert r.returncode == 0 and r.stdout.strip() == f"job {job}: held at 2 worker(s), batch 64 (queued)", r
        c.post(f"/jobs/{big}/cancel")

        def trains_at(workers, batch):
            rows = c.get(f"/jobs/{job}/progress").json()
            return any(p["workers"] == workers and p["batch_size"] == batch for p in rows)

        wait_until(lambda: trains_at(2, 64), 60, "the job trains at 2 workers and the held batch 64")
        running = [e["detail"] for e in c.get(f"/jobs/{job}/events").json() if e["kind"] == "running"]
        assert running[0]["gpus"] == 2 and running[0]["batch_size"] == 64, running
        r = cli("resize", str(job), "-n", "3", "--batch", "16", svc=svc)
        assert r.returncode == 0 and r.stdout.strip() == f"job {job}: held at 3 worker(s), batch 16 (running)", r
        wait_until(lambda: trains_at(3, 16), 60, "the job trains at 3 workers and the held batch 16")
        shown = c.get(f"/jobs/{job}").json()
        assert (shown["requested_batch"], shown["batch_size"]) == (16, 16), shown
        c.close()
    finally:
        stop_service_and_jobs(svc)


def test_resize_by_hand_holds_a_running_job_at_the_asked_size(tmp_path):
    svc = Service(cluster(policy="test-elastic", slots=(2, 2)), tmp_path / "state", port=0,
                  runtime=RUNTIME).start()
    try:
        c = httpx.Client(base_url=svc.url, headers=svc.headers, timeout=30)
        job = c.post("/jobs", content=job_yaml("elastic", gpus=1, max_gpus=4, samples=10**6, step_s=0.05,
                                               extra="min_batch_size: 16\nmax_batch_size: 64\n"),
                     headers={"content-type": "application/yaml"}).json()["id"]
        wait_until(lambda: c.get(f"/jobs/{job}").json()["num_gpus"] == 4, 60, "the elastic job grows to 4")
        r = cli("resize", str(job), "--workers", "2", "--batch", "64", svc=svc)
        assert r.returncode == 0 and r.stdout.strip() == f"job {job}: held at 2 worker(s), batch 64 (running)", r
        wait_until(lambda: c.get(f"/jobs/{job}").json()["num_gpus"] == 2, 60, "the job shrinks to the asked 2")
        kinds = [e["kind"] for e in c.get(f"/jobs/{job}/events").json()]
        assert "resize_requested" in kinds
        # the job's batch range bounds a resize's batch: a batch above max_batch_size was held (only the global MAX_BATCH bounded it)
        r = cli("resize", str(job), "--gpus", "2", "--batch-size", "65", svc=svc)   # submit's and the spec's names
        assert r.returncode == 2 and r.stdout == "" and r.stderr.count("\n") == 1, r
        assert "batch_size: 65 is above the job's max_batch_size=64 (its spec allows 16..64)" in r.stderr, r.stderr
        assert c.get(f"/jobs/{job}").json()["requested_batch"] == 64
        r = cli("resize", str(job), "--workers", "99", svc=svc)
        assert r.returncode == 2 and "workers: expected an integer in 1..4" in r.stderr
        c.post(f"/jobs/{job}/cancel")
        wait_until(lambda: c.get(f"/jobs/{job}").json()["state"] == "cancelled", 60, "cancelled")
        r = cli("resize", str(job), "--workers", "1", svc=svc)
        assert r.returncode == 2 and "only queued or running jobs can be resized" in r.stderr
        # the job's own range bounds a resize, not only the cluster's slots: one line naming the limit, nothing held
        small = c.post("/jobs", content=job_yaml("small", gpus=1, max_gpus=2, samples=10**6, step_s=0.05),
                       headers={"content-type": "application/yaml"}).json()["id"]
        r = cli("resize", str(small), "--workers", "3", svc=svc)
        assert r.returncode == 2 and r.stdout == "" and r.stderr.count("\n") == 1, r
        assert "workers: 3 is above the job's max_gpus=2 (its spec allows 1..2)" in r.stderr, r.stderr
        assert c.get(f"/jobs/{small}").json()["requested_workers"] is None
        c.close()
    finally:
        stop_service_and_jobs(svc)


def test_a_resize_hold_is_shown_in_status_and_released_back_to_the_policy(tmp_path):
    # a `dlsched resize` held the job for good: no command gave it back to the policy, and status showed no reason
    svc = Service(cluster(policy="test-elastic", slots=(2, 2)), tmp_path / "state", port=0,
                  runtime=RUNTIME).start()
    try:
        c = httpx.Client(base_url=svc.url, headers=svc.headers, timeout=30)
        job = c.post("/jobs", content=job_yaml("elastic", gpus=1, max_gpus=4, samples=10**6, step_s=0.05,
                                               extra="min_batch_size: 16\nmax_batch_size: 64\n"),
                     headers={"content-type": "application/yaml"}).json()["id"]
        wait_until(lambda: c.get(f"/jobs/{job}").json()["num_gpus"] == 4, 60, "the elastic job grows to 4")
        assert cli("resize", str(job), "-n", "1", svc=svc).returncode == 0
        wait_until(lambda: c.get(f"/jobs/{job}").json()["num_gpus"] == 1, 60, "the job shrinks to the held 1")
        r = cli("status", "--wide", svc=svc, columns=200)
        assert r.returncode == 0 and "held at 1 by resize" in r.stdout, r.stdout
        r = cli("resize", str(job), "--release", "-n", "2", svc=svc)
        assert r.returncode == 2 and r.stderr.count("\n") == 1 and "--release alone" in r.stderr, r
        r = cli("resize", str(job), "--release", svc=svc)
        assert r.returncode == 0 and r.stdout.strip() == f"job {job}: released, the policy sizes it (running)", r
        assert c.get(f"/jobs/{job}").json()["requested_workers"] is None
        wait_until(lambda: c.get(f"/jobs/{job}").json()["num_gpus"] == 4, 60, "the policy grows the job to 4 again")
        assert "held at" not in cli("status", "--wide", svc=svc, columns=200).stdout
        released = [e["detail"] for e in c.get(f"/jobs/{job}/events").json() if e["kind"] == "resize_released"]
        assert released == [{"workers": 1, "batch_size": None}], released
        # the batch alone: it needed --workers too ('give --workers N (and --batch B)'); the policy sizes the workers
        r = cli("resize", str(job), "--batch", "16", svc=svc)
        assert r.returncode == 0 and r.stdout.strip() == f"job {job}: held at batch 16 (running)", r
        wait_until(lambda: any(p["batch_size"] == 16 for p in c.get(f"/jobs/{job}/progress").json()), 60,
                   "the job trains at the held batch 16")
        shown = c.get(f"/jobs/{job}").json()
        assert (shown["requested_workers"], shown["requested_batch"], shown["num_gpus"]) == (None, 16, 4), shown
        assert "held at batch 16 by resize" in cli("status", "--wide", svc=svc, columns=200).stdout
        assert cli("resize", str(job), "--release", svc=svc).returncode == 0
        assert c.get(f"/jobs/{job}").json()["requested_batch"] is None
        c.post(f"/jobs/{job}/cancel")
        wait_until(lambda: c.get(f"/jobs/{job}").json()["state"] == "cancelled", 60, "cancelled")
        r = cli("resize", str(job), "--release", svc=svc)
        assert r.returncode == 2 and "only queued or running jobs can be resized" in r.stderr, r
        c.close()
    finally:
        stop_service_and_jobs(svc)


def test_logs_follow_shows_loss_lines_within_5s_of_their_step(tmp_path):
    import re
    import threading
    import time

    svc = Service(cluster(slots=(2,)), tmp_path / "state", port=0, workdir=REPO).start()   # real runtime
    try:
        spec = tmp_path / "mlp.yaml"
        spec.write_text("name: mlp\nentry: examples/mlp.py:make_job\ngpus: 1\nbatch_size: 16\n"
                        "params: {num_samples: 1600, epochs: 1, throttle_s: 0.05}\n")
        job = json.loads(cli("submit", str(spec), "--json", svc=svc).stdout)[0]["id"]
        proc = subprocess.Popen([sys.executable, str(SERVE), "logs", "-f", str(job), "--server", svc.url],
                                stdout=subprocess.PIPE, text=True, cwd=REPO,
                                env=dict(os.environ, DLSCHED_TOKEN_FILE=str(svc.token_file)))
        seen: list[tuple[float, str]] = []
        reader = threading.Thread(target=lambda: seen.extend((time.time(), ln) for ln in proc.stdout), daemon=True)
        reader.start()
        assert proc.wait(timeout=300) == 0
        reader.join(timeout=30)
        steps = {r["step"]: r["time"] for r in map(json.loads, (svc.state_dir / "jobs" / str(job) / "progress.jsonl")
                                                  .read_text().splitlines()) if "event" not in r}
        lines = [(t, int(m.group(1))) for t, ln in seen if (m := re.search(r"step (\d+) epoch \d+ loss \S+", ln))]
        assert len(lines) >= 3, [ln for _, ln in seen]
        lags = [t - steps[s] for t, s in lines]
        assert max(lags) < 5.0, lags
        assert any("finished at step" in ln for _, ln in seen)
    finally:
        stop_service_and_jobs(svc)


def test_train_prints_progress_lines_when_piped_and_a_typod_param_is_one_line(tmp_path):
    base = [sys.executable, "-m", "dlsched.cli", "train", "examples/mlp.py:make_job", "--job-dir"]
    r = subprocess.run(base + [str(tmp_path / "a"), "--param", "num_sampels=64"], capture_output=True, text=True,
                       cwd=REPO, timeout=120)
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "did you mean 'num_samples'?" in r.stderr
    r = subprocess.run(base + [str(tmp_path / "b"), "--param", "num_samples=256", "--param", "epochs=2"],
                       capture_output=True, text=True, cwd=REPO, timeout=300)
    assert r.returncode == 0, r.stderr
    assert "step 1 epoch 0 loss" in r.stdout and "epoch 1 done: mean loss" in r.stdout
    assert r.stdout.strip().splitlines()[-1].split(" ", 1)[1].startswith("finished at step 32")


def test_submit_of_a_script_refuses_what_it_used_to_drop_and_records_the_user(tmp_path):
    """`submit --gpus 0 -- python x.py` became a 1-GPU job, `-P k=v` with a script was dropped and
    `--min-gpus` with a spec file ignored, all with exit 0; a script job recorded no user (history -u missed it)."""
    import getpass

    svc = Service(cluster(slots=(2,)), tmp_path / "state", port=0, runtime=RUNTIME).start()
    env = dict(os.environ, DLSCHED_TOKEN_FILE=str(svc.token_file), DLSCHED_SERVER=svc.url, COLUMNS="200")

    def submit(*args: str) -> subprocess.CompletedProcess:   # no --server at the end: it would be the script's
        return subprocess.run([sys.executable, str(SERVE), "submit", *args], capture_output=True, text=True,
                              timeout=90, env=env, cwd=REPO)

    spec = tmp_path / "job.yaml"
    spec.write_text(job_yaml("from-file"))
    try:
        for args, line in [(("--gpus", "0", "--", "python", "examples/mlp.py"), "error: --gpus: "),
                           (("-P", "epochs=1", "--", "python", "examples/mlp.py"), "--param epochs=1: "),
                           (("--min-gpus", "2", str(spec)), "--min-gpus 2: for a script after '--'")]:
            r = submit(*args)
            assert r.returncode == 2 and r.stderr.count("\n") == 1 and line in r.stderr, (args, r.stderr)
            assert "Traceback" not in r.stderr
        assert svc.store.count() == 0
        r = submit("--min-gpus", "1", "--max-gpus", "2", "--json", "--", "python", "examples/mlp.py", "--epochs", "1")
        assert r.returncode == 0, r.stderr
        job = httpx.get(f"{svc.url}/jobs/{json.loads(r.stdout)[0]['id']}", headers=svc.headers).json()
        assert job["spec"]["gpus"] == 1 and job["spec"]["min_gpus"] == 1 and job["spec"]["max_gpus"] == 2
        assert job["spec"]["user"] == getpass.getuser()
    finally:
        stop_service_and_jobs(svc)


def test_submit_says_when_the_clusters_policy_never_uses_a_jobs_gpu_range(tmp_path):
    """Under fifo a `--max-gpus 2` job ran on 1 of 2 free GPUs for its whole run, and nothing said why."""
    svc = Service(cluster(policy="fifo", slots=(2,)), tmp_path / "state", port=0, runtime=RUNTIME).start()
    env = dict(os.environ, DLSCHED_TOKEN_FILE=str(svc.token_file), DLSCHED_SERVER=svc.url, COLUMNS="200")

    def submit(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, str(SERVE), "submit", *args], capture_output=True, text=True,
                              timeout=90, env=env, cwd=REPO)

    try:
        r = submit("--min-gpus", "1", "--max-gpus", "2", "--", "python", "examples/mlp.py", "--epochs", "1")
        assert r.returncode == 0 and r.stderr.count("\n") == 1, r.stderr
        assert "policy fifo runs a job at its request, never within its GPU range (mlp)" in r.stderr, r.stderr
        r = submit("--gpus", "2", "--", "python", "examples/mlp.py", "--epochs", "1")   # no range: nothing to say
        assert r.returncode == 0 and r.stderr == "", r.stderr
    finally:
        stop_service_and_jobs(svc)


def test_status_watch_into_a_file_prints_each_change_as_it_happens(tmp_path):
    """`status -w > file` wrote nothing until it exited (rich Live draws once when not a terminal), and nothing at
    all when it was killed; it prints the table once, then each job whose state changed."""
    from tests.waiting import wait_until

    svc = Service(cluster(slots=(2,)), tmp_path / "state", port=0, runtime=RUNTIME).start()
    out = tmp_path / "watch.txt"
    env = dict(os.environ, DLSCHED_TOKEN_FILE=str(svc.token_file), COLUMNS="120")
    watch = None
    try:
        c = httpx.Client(base_url=svc.url, headers=svc.headers, timeout=30)
        job = c.post("/jobs", content=job_yaml("watched", samples=640, step_s=0.05),
                     headers={"content-type": "application/yaml"}).json()["id"]
        with open(out, "w") as f:
            watch = subprocess.Popen([sys.executable, str(SERVE), "status", "-w", "--interval", "0.2", "--server", svc.url],
                                     stdout=f, stderr=subprocess.STDOUT, env=env, cwd=REPO)
        wait_until(lambda: c.get(f"/jobs/{job}").json()["state"] == "finished", 90, "the job to finish")
        wait_until(lambda: any(ln.split()[:3] == [str(job), "watched", "finished"]
                               for ln in out.read_text().splitlines()), 60, "the watch to print the job finished")
        text = out.read_text()
        assert text.count("dlsched jobs") == 1 and "Traceback" not in text, text
        # a job is printed again when its state, GPUs, batch or reason change, never for its progress alone
        states = [ln.split()[2] for ln in text.splitlines() if ln.split()[:2] == [str(job), "watched"]]
        assert states[-1] == "finished" and len(states) == len(set(states)), text
    finally:
        stop_service_and_jobs(svc, watch)


def test_logs_of_a_queued_job_says_so_and_follow_waits_for_it_to_start(tmp_path):
    """`logs JOB` on a queued job printed nothing at all, as if the job had run silently; `-f` waited without a
    word. The job stays queued for certain: the one it waits behind holds both of the cluster's slots."""
    import threading

    svc = Service(cluster(slots=(2,)), tmp_path / "state", port=0, runtime=RUNTIME).start()
    follow = None
    try:
        c = httpx.Client(base_url=svc.url, headers=svc.headers, timeout=30)
        yaml_type = {"content-type": "application/yaml"}
        blocker = c.post("/jobs", content=job_yaml("blocker", gpus=2, samples=10**6, step_s=0.05),
                         headers=yaml_type).json()["id"]
        wait_until(lambda: c.get(f"/jobs/{blocker}").json()["state"] == "running", 60, "the blocker to run")
        job = c.post("/jobs", content=job_yaml("waiting", gpus=1, samples=64), headers=yaml_type).json()["id"]
        assert c.get(f"/jobs/{job}").json()["state"] == "queued"

        r = cli("logs", str(job), svc=svc)
        assert r.returncode == 0 and r.stdout == "", r
        assert r.stderr == f"job {job} is queued and has no output yet; dlsched logs -f {job} waits for it to start\n"

        follow = subprocess.Popen([sys.executable, str(SERVE), "logs", "-f", str(job), "--server", svc.url],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO,
                                  env=dict(os.environ, DLSCHED_TOKEN_FILE=str(svc.token_file)))
        said: list[str] = []
        reader = threading.Thread(target=lambda: said.extend(follow.stderr), daemon=True)
        reader.start()
        wait_until(lambda: said, 60, "logs -f to say the job is queued")
        assert said == [f"job {job} is queued and has no output yet; waiting for it to start\n"]
        assert c.get(f"/jobs/{job}").json()["state"] == "queued"   # it said so before the job started
        c.post(f"/jobs/{blocker}/cancel")
        wait_until(lambda: c.get(f"/jobs/{job}").json()["state"] == "finished", 90, "the waiting job to run and finish")
        assert follow.wait(timeout=60) == 0
        out = follow.stdout.read()
        assert out == c.get(f"/jobs/{job}/logs").text and "start:" in out   # followed from its start to its end
        reader.join(timeout=30)
        assert len(said) == 1, said
        c.close()
    finally:
        stop_service_and_jobs(svc, follow)


def test_events_of_an_unknown_type_is_one_line_listing_the_types(tmp_path):
    """`events -t bogus` printed nothing, exit 0: the same as a real type with no events yet."""
    svc = Service(cluster(slots=(2,)), tmp_path / "state", port=0, runtime=RUNTIME).start()
    try:
        job = httpx.post(f"{svc.url}/jobs", content=job_yaml("j", samples=10**6), headers=svc.headers
                         | {"content-type": "application/yaml"}).json()["id"]
        r = cli("events", "-t", "submitted", "-t", "bogus", svc=svc, columns=200)
        assert r.returncode == 2 and r.stdout == "" and r.stderr.count("\n") == 1, r
        assert r.stderr.startswith("error: --type 'bogus': not an event type; expected one of submitted, queued, ")
        assert "job_checkpoint" in r.stderr and "cancel_requested" in r.stderr
        r = cli("events", "--type", "submitted", "--json", svc=svc)
        assert r.returncode == 0 and [e["job_id"] for e in json.loads(r.stdout)] == [job], r
    finally:
        stop_service_and_jobs(svc)


def test_following_a_job_cancelled_while_queued_says_it_never_started(tmp_path):
    """`logs -f` of a queued job that was then cancelled ended with no output at all, exit 0."""
    svc = Service(cluster(slots=(1,)), tmp_path / "state", port=0, runtime=RUNTIME).start()
    follow = None
    try:
        c = httpx.Client(base_url=svc.url, headers=svc.headers, timeout=30)
        ids = [c.post("/jobs", content=job_yaml(name, samples=10**6, step_s=0.05),
                      headers={"content-type": "application/yaml"}).json()["id"] for name in ("holds", "waits")]
        wait_until(lambda: c.get(f"/jobs/{ids[0]}").json()["state"] == "running", 60, "the first job runs")
        follow = subprocess.Popen([sys.executable, str(SERVE), "logs", "-f", str(ids[1]), "--server", svc.url],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO,
                                  env=dict(os.environ, DLSCHED_TOKEN_FILE=str(svc.token_file)))
        wait_until(lambda: c.get(f"/jobs/{ids[1]}").json()["state"] == "queued", 10, "the second job waits")
        c.post(f"/jobs/{ids[1]}/cancel")
        out, err = follow.communicate(timeout=60)
        assert follow.returncode == 0 and out == "", (out, err)
        assert err.splitlines()[-1] == f"job {ids[1]} was cancelled before it started: it has no output", err
    finally:
        stop_service_and_jobs(svc, follow)


def test_events_of_two_different_jobs_is_one_line_before_any_request():
    """`events 1 --job 2` listed job 2's events, exit 0, and dropped the 1 without a word."""
    r = cli("events", "1", "--job", "2", "--server", "http://127.0.0.1:1")
    assert r.returncode == 2 and r.stdout == "" and r.stderr == "error: job 1 and --job 2: give one job\n", r


def test_every_event_the_code_stores_is_a_type_events_accepts():
    """``service/event_kinds.py`` is the list ``events --type`` checks: every kind the service stores (its own, and
    job_<event> for each event a runtime writes to progress.jsonl) must be in it, or a real type would be refused."""
    import ast

    from dlsched.service.event_kinds import EVENT_KINDS

    def literal_kinds(arg) -> list[str]:   # "kind", or "a" if ... else "b"; names (new_state) are the states
        if isinstance(arg, ast.IfExp):
            return literal_kinds(arg.body) + literal_kinds(arg.orelse)
        return [arg.value] if isinstance(arg, ast.Constant) and isinstance(arg.value, str) else []

    src = REPO / "src" / "dlsched"
    found: dict[str, str] = {}
    for path in src.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.args:
                if node.func.attr == "event" or (node.func.attr == "_event" and len(node.args) > 3):
                    for kind in literal_kinds(node.args[0 if node.func.attr == "event" else 3]):
                        found[kind] = str(path.relative_to(src))
            if isinstance(node, ast.Dict):
                for k, v in zip(node.keys, node.values):
                    if isinstance(k, ast.Constant) and k.value == "event" and isinstance(v, ast.Constant):
                        found[f"job_{v.value}"] = str(path.relative_to(src))
    found.pop("job_autoscale", None)   # the autoscale engine's own log (autoscale.jsonl), not progress.jsonl
    assert {"submitted", "node_lost", "node_up", "job_resumed", "job_checkpoint"} <= set(found), found
    assert {k: where for k, where in found.items() if k not in EVENT_KINDS} == {}
    assert "job_progress_segment" not in EVENT_KINDS   # a rotated log's header: the readers pass it, none is stored


def test_an_events_detail_shows_a_workers_brackets_as_they_are():
    """`events` printed a failed job's `[rank0]: RuntimeError ...` as `\\[rank0]: ...`: rich's markup escaping, for a
    table the lines never went through (`--json` and `history` showed `[rank0]`)."""
    from dlsched.commands.service import event_rows

    error = "workers {6: 1} died: [rank0]: RuntimeError: Connection closed by peer [127.0.0.1]:51330"
    [row] = event_rows([{"time": 0.0, "job_id": 8, "kind": "failed", "detail": {"error": error}}])
    assert row[1:] == ["8", "failed", json.dumps({"error": error})]


def test_submitting_several_files_is_all_or_nothing_and_a_refusal_names_the_file(tmp_path):
    """`submit good.yaml bad.yaml` submitted good, then failed on bad with `POST /jobs: HTTP 422: request body: ...`:
    what only the service checks (the entry exists and lies in an allowed folder, the params are its function's,
    the cluster holds the GPUs) left the files before it submitted, and a rerun submitted them twice. Rounds an hour
    apart with the real runtime's checks: the jobs are stored, never started."""
    svc = Service(cluster(slots=(2,), interval=3600), tmp_path / "state", port=0, workdir=REPO).start()
    try:
        good = tmp_path / "good.yaml"
        good.write_text("name: good1\nentry: examples/mlp.py:make_job\ngpus: 1\nparams: {num_samples: 64}\n")
        (tmp_path / "bad").mkdir()
        (tmp_path / "outside.py").write_text("def make_job(**kw):\n    pass\n")
        bad = tmp_path / "bad" / "missing.yaml"
        cases = [("entry: examples/nosuch.py:make_job", "field entry: 'examples/nosuch.py' not found"),
                 (f"entry: {tmp_path / 'outside.py'}:make_job", "is outside the allowed job directories"),
                 ("entry: examples/mlp.py:make_job\nparams: {num_sampels: 64}",
                  "field params.num_sampels: make_job() has no parameter 'num_sampels'; did you mean 'num_samples'?"),
                 ("entry: examples/mlp.py:make_job\ngpus: 3", "field gpus: needs 3 GPUs, the cluster has 2")]
        for body, line in cases:
            bad.write_text(f"name: bad1\n{body}\n")
            for args in ((str(good), str(bad)), (str(bad), str(good)), (str(good), str(bad), "--json")):
                r = cli("submit", *args, svc=svc)
                assert r.returncode == 2 and r.stdout == "" and r.stderr.count("\n") == 1, (args, r)
                assert r.stderr.startswith(f"error: {bad}: field ") and line in r.stderr, (args, r.stderr)
                assert "HTTP" not in r.stderr and "request body" not in r.stderr and "jobs[" not in r.stderr
            assert svc.store.count() == 0, body          # none of them: good1 was submitted before
        r = cli("submit", str(bad), svc=svc)             # one file: named too
        assert r.returncode == 2 and r.stderr.startswith(f"error: {bad}: field gpus: needs 3 GPUs"), r.stderr

        bad.write_text("name: bad1\nentry: examples/mlp.py:make_job\nparams: {num_samples: 64}\n")   # fixed
        r = cli("submit", str(good), str(bad), svc=svc)
        assert r.returncode == 0 and r.stdout == "submitted job 1 (good1)\nsubmitted job 2 (bad1)\n", r
        assert [(j.id, j.name) for j in svc.store.jobs()] == [(1, "good1"), (2, "bad1")]   # once each
        r = cli("submit", str(good), "--json", svc=svc)
        assert r.returncode == 0 and json.loads(r.stdout) == [{"id": 3, "name": "good1", "state": "queued"}], r
    finally:
        stop_service_and_jobs(svc)


def test_cancel_gives_every_id_its_line_and_the_api_says_the_same_of_an_ended_job(tmp_path):
    """`cancel 1 999` (1 finished) printed only 999's error and lost 1's; `cancel 11 999` cancelled 11 and then
    failed. `DELETE /jobs/1` on the finished job answered 200 where the CLI said it is an error (exit 1)."""
    svc = Service(cluster(slots=(2,)), tmp_path / "state", port=0, runtime=RUNTIME).start()
    try:
        c = httpx.Client(base_url=svc.url, headers=svc.headers, timeout=30)
        yaml_type = {"content-type": "application/yaml"}
        done = c.post("/jobs", content=job_yaml("done", samples=64), headers=yaml_type).json()["id"]
        wait_until(lambda: c.get(f"/jobs/{done}").json()["state"] == "finished", 90, "the quick job to finish")
        runs = c.post("/jobs", content=job_yaml("runs", gpus=2, samples=10**6, step_s=0.05),
                      headers=yaml_type).json()["id"]
        waits = c.post("/jobs", content=job_yaml("waits", samples=10**6), headers=yaml_type).json()["id"]
        wait_until(lambda: c.get(f"/jobs/{runs}").json()["state"] == "running", 60, "the 2-slot job to run")
        assert c.get(f"/jobs/{waits}").json()["state"] == "queued"

        # the API: an ended job has nothing to cancel (409, one line), by either route; an unknown one is a 404
        for method, path in (("DELETE", f"/jobs/{done}"), ("POST", f"/jobs/{done}/cancel")):
            r = c.request(method, path)
            assert (r.status_code, r.json()) == (409, {"error": f"job {done} already finished; nothing to cancel"})
        assert c.delete("/jobs/999").status_code == 404
        assert c.get(f"/jobs/{done}").json()["cancel_requested"] is False

        def cancel(*ids: int) -> subprocess.CompletedProcess:   # stdout and stderr as one stream: the lines' order
            return subprocess.run([sys.executable, str(SERVE), "cancel", *map(str, ids), "--server", svc.url],
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=90, cwd=REPO,
                                  env=dict(os.environ, DLSCHED_TOKEN_FILE=str(svc.token_file), COLUMNS="80"))

        r = cancel(done, 999)
        assert (r.returncode, r.stdout) == (2, f"error: job {done} already finished; nothing to cancel\n"
                                               "error: job 999: no such job\n"), r
        r = cancel(done)
        assert (r.returncode, r.stdout) == (1, f"error: job {done} already finished; nothing to cancel\n"), r
        r = cancel(999, waits, done, runs)   # the others are cancelled all the same, each said in order
        assert r.stdout == ("error: job 999: no such job\n"
                            f"job {waits}: cancelled\n"
                            f"error: job {done} already finished; nothing to cancel\n"
                            f"job {runs}: cancel requested (running)\n"), r
        assert r.returncode == 2
        assert c.get(f"/jobs/{waits}").json()["state"] == "cancelled"
        wait_until(lambda: c.get(f"/jobs/{runs}").json()["state"] == "cancelled", 60, "the running job to stop")
        r = cancel(runs)
        assert (r.returncode, r.stdout) == (1, f"error: job {runs} already cancelled; nothing to cancel\n"), r
        c.close()
    finally:
        stop_service_and_jobs(svc)


def test_events_follow_says_once_per_job_that_its_checkpoints_are_left_out(tmp_path):
    """`events -f` printed `(job 1: N checkpoint event(s) not shown; --all lists them)` again at every poll that
    brought a new checkpoint (every second, for a job checkpointing every 0.25 s)."""
    import threading
    import time

    svc = Service(cluster(slots=(2,)), tmp_path / "state", port=0, runtime=RUNTIME).start()
    follow = None
    try:
        c = httpx.Client(base_url=svc.url, headers=svc.headers, timeout=30)
        job = c.post("/jobs", content=job_yaml("ckpts", samples=10**6, step_s=0.05),
                     headers={"content-type": "application/yaml"}).json()["id"]
        kinds = lambda: [e["kind"] for e in c.get(f"/jobs/{job}/events").json()]   # noqa: E731
        wait_until(lambda: "job_checkpoint" in kinds(), 60, "a first checkpoint event")
        follow = subprocess.Popen([sys.executable, str(SERVE), "events", "-f", "--server", svc.url],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO,
                                  env=dict(os.environ, DLSCHED_TOKEN_FILE=str(svc.token_file), COLUMNS="200"))
        lines: list[str] = []
        reader = threading.Thread(target=lambda: lines.extend(follow.stdout), daemon=True)
        reader.start()
        # the note of its first poll: a follow still starting (4.5 s of imports under load) had shown nothing yet
        wait_until(lambda: any("checkpoint event(s) not shown" in ln for ln in lines), 120, "the follow's first note")
        seen, since = kinds().count("job_checkpoint"), time.monotonic()
        # then 4 polls or more (one a second), each bringing new checkpoints
        wait_until(lambda: kinds().count("job_checkpoint") >= seen + 4 and time.monotonic() - since >= 4.5, 120,
                   "4 more checkpoints over 4 polls of the follow")
        follow.terminate()
        follow.wait(timeout=30)
        reader.join(timeout=30)
        out, err = "".join(lines), follow.stderr.read()
        notes = [ln for ln in out.splitlines() if "checkpoint event(s) not shown" in ln]
        assert len(notes) == 1 and notes[0].startswith(f"(job {job}: "), out + err
        assert notes[0].endswith("not shown; later ones are left out too; --all lists them)"), notes
        assert " submitted " in out and " job_checkpoint " not in out, out
        c.close()
    finally:
        stop_service_and_jobs(svc, follow)


def test_serve_bound_beyond_loopback_names_a_reachable_url_and_says_the_token_travels_in_clear():
    """Bound to 0.0.0.0, serve printed http://0.0.0.0:P (which reaches nothing from another host) and nothing about
    the token crossing the network in plain HTTP; an IPv6 address was printed without brackets (not a URL)."""
    import socket

    from dlsched.commands.service import started_note

    note = started_note("0.0.0.0", 8642, "/srv/dlsched/token", "cluster c.yaml").splitlines()
    host = socket.gethostname()
    assert note[0] == f"dlsched service: API http://{host}:8642  dashboard http://{host}:8642/dashboard/"
    assert note[-1] == ("  bound to 0.0.0.0 over plain HTTP: the token crosses the network in clear; beyond a trusted "
                        "network put TLS in front (a reverse proxy) or reach it through an SSH tunnel "
                        "(docs/security.md)")
    v6 = started_note("::1", 8642, None, "cluster c.yaml").splitlines()
    assert v6 == ["dlsched service: API http://[::1]:8642  dashboard http://[::1]:8642/dashboard/",
                  "  cluster c.yaml, no authentication (--no-auth)", "  clients: export DLSCHED_SERVER=http://[::1]:8642"]


def test_the_cli_waits_for_a_restarting_service_that_says_retry_after(tmp_path):
    """A restarting service answers 503 + Retry-After until its recovery is done (``api.after_recovery``): the first
    `dlsched status` after a restart failed with it. A stand-in server answers so twice, then the jobs."""
    from tests.standin_server import standin_server

    seen = []

    def restarting(path, headers):
        seen.append(path)
        if len(seen) <= 2:
            return 503, "application/json", b'{"error": "still taking up its jobs"}', {"Retry-After": "1"}
        return 200, "application/json", b"[]", {}

    token = tmp_path / "token"
    token.write_text("t" * 32)
    token.chmod(0o600)
    env = {**os.environ, "DLSCHED_TOKEN_FILE": str(token), "PYTHONPATH": str(REPO / "src")}
    with standin_server(restarting) as base:
        r = subprocess.run([sys.executable, "-m", "dlsched.cli", "status", "--server", base], env=env,
                           capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    assert len(seen) >= 3 and all(p.startswith("/jobs") for p in seen), seen
    assert r.stderr == "GET /jobs: HTTP 503: still taking up its jobs; retrying for up to 120 s\n"   # said once


def test_an_override_of_epochs_or_num_samples_carries_to_a_total_samples_written_as_their_product():
    """--param epochs=1 on a spec with total_samples = num_samples x epochs left the file's total (the forecast
    planned twice the work until the job started)."""
    from dlsched.commands.service import spec_with_overrides

    path = REPO / "examples" / "demo" / "jobs" / "resnet20.yaml"   # num_samples 768, epochs 2, total_samples 1536
    assert spec_with_overrides(path, None, None, ["epochs=1"]).total_samples == 768
    assert spec_with_overrides(path, None, None, ["num_samples=512", "epochs=3"]).total_samples == 1536
    assert spec_with_overrides(path, None, None, ["lr=0.1"]).total_samples == 1536


def test_a_queued_jobs_forecast_start_is_in_status_and_its_moves_are_no_news_to_watch(capsys):
    """The service forecast a queued job's start (the API's predicted_start, the README's "predicted start and
    finish times (status, ...)"), but status said only "waiting for GPUs" (found queueing three jobs on a 2-slot
    service: w6 predicted_start 02:19:53 in --json, nothing in the table)."""
    from datetime import datetime

    from dlsched.commands.service import job_rows, watch_piped

    at = datetime(2026, 12, 6, 2, 19, 53).timestamp()
    queued = {"id": 6, "name": "w6", "state": "queued", "num_gpus": 0, "batch_size": 64, "fraction_done": 0.0,
              "last_loss": None, "samples_per_s": None, "predicted_start": at, "predicted_finish": None}
    assert job_rows([queued])[0][10] == "waiting for GPUs; starts ~02:19:53"
    assert job_rows([queued | {"predicted_start": None}])[0][10] == "waiting for GPUs"
    running = queued | {"state": "running", "num_gpus": 2, "start_time": at}
    assert job_rows([running])[0][10] == ""
    answers = iter([[queued], [queued | {"predicted_start": at + 5}], [running]])

    def fetch():
        try:
            return next(answers)
        except StopIteration:
            raise KeyboardInterrupt from None

    watch_piped(fetch, 0.0, wide=True)
    out = capsys.readouterr().out
    assert out.count("w6") == 2 and "starts ~02:19:53" in out and "02:19:58" not in out, out


def test_a_finished_job_shows_no_resize_hold_as_its_reason():
    """Seen: a ps job resized by hand to 2 slots finished, and status said 'held at 2 by resize' beside it."""
    from dlsched.commands.service import _reason

    assert _reason({"state": "finished", "requested_workers": 2}) == ""
    assert _reason({"state": "running", "requested_workers": 2}) == "held at 2 by resize"


def test_submit_target_that_is_not_a_finite_number_names_the_option_and_value():
    """`submit --target val_accuracy=nan` said "command line: NaN is not a number JSON allows": no option named."""
    from dlsched.commands.service import metric_target
    from dlsched.errors import UserError

    for value in ("nan", "inf", "-inf"):
        with pytest.raises(UserError) as e:
            metric_target(f"val_accuracy={value}", "accuracy")
        assert str(e.value) == f"--target val_accuracy={value}: {value!r} is not a finite number"
    assert metric_target("val_accuracy=0.93", "accuracy") == {"metric": "val_accuracy", "value": 0.93, "kind": "accuracy"}


def test_submit_target_out_of_range_names_the_option_and_value_not_the_spec_field():
    """`submit --target val_accuracy=-1` said "field prediction.target.value: ...", a field the user never typed; and
    `--target val_accuracy=1.5` was taken as 1.5 %, "reached" on any job reporting fractions (as `predict curve`
    refuses it). A stated spec refuses the slip too; a stored one read back keeps it."""
    from dlsched.commands.service import metric_target
    from dlsched.errors import UserError
    from dlsched.spec import JobSpec, SpecError, load_job_spec

    with pytest.raises(UserError) as e:
        metric_target("val_accuracy=-1", "accuracy")
    assert str(e.value) == "--target val_accuracy=-1: an accuracy target must lie in 0-1 (a fraction) or 0-100 (%)"
    with pytest.raises(UserError) as e:
        metric_target("val_accuracy=1.5", "accuracy")
    assert str(e.value).startswith("--target val_accuracy=1.5: an accuracy target above 1 is read as a percentage")
    assert metric_target("val_accuracy=93", "accuracy")["value"] == 93
    assert metric_target("val_loss=1.5", "loss")["value"] == 1.5   # a loss's 1.5 is a loss
    doc = {"name": "j", "command": ["python", "t.py"], "prediction": {"target": {
        "metric": "acc", "kind": "accuracy", "value": 1.5}}}
    with pytest.raises(SpecError) as e:
        load_job_spec(json.dumps(doc), "j.yaml", "json")
    assert str(e.value).startswith("j.yaml: field prediction.target.value: an accuracy target above 1 is read as")
    assert JobSpec.model_validate_json(json.dumps(doc)).prediction.target.value == 1.5


def test_serve_without_a_cluster_file_looks_for_gpus_without_loading_torch_where_the_machine_shows_none():
    """Importing torch to find no GPU cost every `dlsched serve` without --cluster ~1.4 CPU-s."""
    from dlsched.commands.service import gpu_devices_present

    if gpu_devices_present():
        pytest.skip("this machine shows GPU device nodes: torch is the one to ask")
    out = subprocess.run([sys.executable, "-c", "import sys; from dlsched.commands.service import local_cluster_spec; "
                          "s = local_cluster_spec(); print('torch' in sys.modules, s.nodes[0].gpu_type)"],
                         capture_output=True, text=True, check=True).stdout.split()
    assert out == ["False", "slot"]


@pytest.mark.parametrize("args, said", [
    # the spec's field ("command line: field prediction.target_loss: ..."), a field the user never typed
    (["--target-loss", "-1"], "error: --target-loss: Input should be greater than 0 (got -1.0)\n"),
    (["--gpus", "0"], "error: --gpus: Input should be greater than or equal to 1 (got 0)\n"),
    # and the value once ("..., got 'x' (got 'x')")
    (["--regime", "x"], "error: --regime: regime must be one of scratch, finetune, got 'x'\n"),
])
def test_a_script_jobs_bad_option_is_named_as_the_option_typed(monkeypatch, capsys, args, said):
    from dlsched.cli import main

    monkeypatch.chdir(REPO)   # refused before any request: no service needed
    monkeypatch.setattr(sys, "argv", ["dlsched", "submit", *args, "--", "python", "examples/mlp.py"])
    with pytest.raises(SystemExit) as e:
        main()
    out = capsys.readouterr()
    assert e.value.code == 2 and out.out == "" and out.err == said, out
