"""A service restarted with other options, or started twice, on one state folder, with real `serve` processes and
real job processes (the contract runtime): exactly one coordinator per job, nothing lost.

* ``--jobs-dir`` changed across a restart: a running job is re-attached in the folder it runs in (a second
  coordinator was started from step 0 in the new, empty folder, the first one training on, orphaned);
* a cluster file that no longer declares a node a running job sits on: the job is stopped at a checkpoint and
  resumes on the nodes declared (every scheduling round crashed with ``KeyError: 'n0'`` before);
* or declares it with fewer slots than its running jobs hold there: the newer jobs are stopped at a checkpoint and
  re-queued (every round failed on the over-subscribed node before);
* a second `serve` on a state folder in use is refused (two loops scheduled the whole cluster on one store).
"""
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from dlsched.service.server import free_port, wait_for_http
from dlsched.train.progress_log import read_progress
from tests.service.conftest import CONTRACT_JOB, job_yaml
from tests.waiting import process_alive, wait_until

pytestmark = pytest.mark.slow
SERVE = Path(__file__).with_name("serve_for_tests.py")
YAML = {"content-type": "application/yaml"}
ENDED = ("finished", "failed", "cancelled")


def start(tmp_path: Path, cluster: str, *args: str, name: str = "serve") -> tuple[subprocess.Popen, httpx.Client]:
    """`serve` on ``tmp_path/state`` (working directory ``tmp_path``), its output in ``tmp_path/<name>.log``."""
    (tmp_path / f"{name}.yaml").write_text(cluster)
    port = free_port()
    env = dict(os.environ, DLSCHED_RUNTIME=f"{sys.executable} {CONTRACT_JOB}")
    with open(tmp_path / f"{name}.log", "wb") as out:
        proc = subprocess.Popen([sys.executable, str(SERVE), "serve", "--cluster", f"{name}.yaml", "--state-dir",
                                 "state", "--port", str(port), *args], cwd=tmp_path, env=env, stdout=out,
                                stderr=subprocess.STDOUT)
    if not wait_for_http(f"http://127.0.0.1:{port}/healthz", 180, proc):   # its imports took 60 s on a loaded box
        proc.kill()
        raise AssertionError((tmp_path / f"{name}.log").read_text()[-3000:])
    token = (tmp_path / "state" / "token").read_text().strip()
    return proc, httpx.Client(base_url=f"http://127.0.0.1:{port}", headers={"Authorization": f"Bearer {token}"},
                              timeout=30)


def stop(proc: subprocess.Popen, sig=signal.SIGTERM) -> None:
    if proc.poll() is None:
        proc.send_signal(sig)
        proc.wait(timeout=60)


def coordinator(job_dir: Path) -> int:
    return json.loads((job_dir / "launch.json").read_text())["pid"]


def kill_jobs(*folders: Path) -> None:
    for d in folders:
        for launch in d.glob("*/launch.json"):
            try:
                os.killpg(json.loads(launch.read_text())["pid"], signal.SIGKILL)
            except (ProcessLookupError, PermissionError, ValueError, KeyError):
                pass


def test_a_restart_with_another_jobs_dir_reattaches_running_jobs_where_they_run(tmp_path):
    one_node = "nodes: [{name: n0, gpus: 2}]\npolicy: test-fifo\ninterval_s: 0.2\n"
    old = tmp_path / "state" / "jobs"
    proc, c = start(tmp_path, one_node)
    procs = [proc]
    try:
        job = c.post("/jobs", content=job_yaml("long", samples=10**6, step_s=0.05), headers=YAML).json()["id"]
        wait_until(lambda: c.get(f"/jobs/{job}").json()["samples"] > 0, 60, "the job's first steps")
        pid = coordinator(old / str(job))
        stop(proc)                                          # SIGTERM: the service goes, its job trains on
        assert process_alive(pid)

        proc, c = start(tmp_path, one_node, "--jobs-dir", "relative/jobs", name="again")
        procs.append(proc)
        wait_until(lambda: any(e["kind"] == "reattached" for e in c.get(f"/jobs/{job}/events").json()), 60,
                   "the job re-attached")
        before = c.get(f"/jobs/{job}").json()["samples"]
        wait_until(lambda: c.get(f"/jobs/{job}").json()["samples"] > before, 60, "its progress read on")
        record = c.get(f"/jobs/{job}").json()
        assert record["state"] == "running" and record["job_dir"] == str(old / str(job)), record
        assert "queued" not in [e["kind"] for e in c.get(f"/jobs/{job}/events").json()]   # never re-queued
        assert not (tmp_path / "relative" / "jobs" / str(job)).exists()                 # nor started afresh there
        assert coordinator(old / str(job)) == pid and (old / str(job) / "output.log").read_text().count(" start: ") == 1
        assert "start:" in c.get(f"/jobs/{job}/logs").text                               # its log, where it runs

        new = c.post("/jobs", content=job_yaml("new", samples=320), headers=YAML).json()["id"]
        wait_until(lambda: c.get(f"/jobs/{new}").json()["state"] in ENDED, 60, "the new job to end")
        record = c.get(f"/jobs/{new}").json()
        # a new job goes to the new --jobs-dir, stored absolute (not as given: it depended on the working directory)
        assert record["state"] == "finished" and record["job_dir"] == str(tmp_path / "relative" / "jobs" / str(new))

        assert c.post(f"/jobs/{job}/cancel").status_code == 200
        wait_until(lambda: c.get(f"/jobs/{job}").json()["state"] == "cancelled", 60, "the cancel")
        wait_until(lambda: not process_alive(pid), 30, "its one coordinator to stop")
    finally:
        for p in procs:
            stop(p)
        kill_jobs(old, tmp_path / "relative" / "jobs")


def test_a_restart_with_a_cluster_without_a_jobs_node_resumes_it_on_the_nodes_declared(tmp_path):
    two_nodes = "nodes: [{name: n0, gpus: 1}, {name: n1, gpus: 1}]\npolicy: test-fifo\ninterval_s: 0.2\n"
    jobs_dir = tmp_path / "state" / "jobs"
    proc, c = start(tmp_path, two_nodes)
    procs = [proc]
    try:
        ids = [c.post("/jobs", content=job_yaml(f"j{i}", samples=10**6, step_s=0.05), headers=YAML).json()["id"]
               for i in range(2)]
        wait_until(lambda: all((jobs_dir / str(j) / "ckpt" / "latest.json").exists() for j in ids), 60,
                   "both jobs checkpointed")
        assert sorted(n for j in ids for n in c.get(f"/jobs/{j}").json()["placement"]) == ["n0", "n1"]
        pids = {j: coordinator(jobs_dir / str(j)) for j in ids}
        stop(proc)

        proc, c = start(tmp_path, "nodes: [{name: solo, gpus: 1}]\npolicy: test-fifo\ninterval_s: 0.2\n",
                        name="small")
        procs.append(proc)
        first, second = ids
        wait_until(lambda: c.get(f"/jobs/{first}").json()["placement"] == {"solo": 1}, 60, "the first job on solo")
        for j in ids:   # both stopped at a checkpoint, said in their event; never two coordinators of one job
            queued = [e for e in c.get(f"/jobs/{j}/events").json() if e["kind"] == "queued"]
            assert len(queued) == 1 and "not in the cluster any more" in queued[0]["detail"]["reason"], queued
            assert queued[0]["detail"]["nodes"] in (["n0"], ["n1"])
            assert not process_alive(pids[j])
        checkpointed = json.loads((jobs_dir / str(first) / "ckpt" / "latest.json").read_text())["samples"]
        wait_until(lambda: c.get(f"/jobs/{first}").json()["samples"] > checkpointed, 60, "the first job training")
        samples = [r["samples"] for r in read_progress(jobs_dir / str(first)) if "event" not in r]
        assert samples.count(32) == 1                       # resumed from its checkpoint, not from step 0
        assert c.get(f"/jobs/{second}").json()["state"] == "queued"
        assert c.post(f"/jobs/{first}/cancel").status_code == 200   # its slot goes to the next job: rounds run
        wait_until(lambda: c.get(f"/jobs/{second}").json()["placement"] == {"solo": 1}, 60, "the second job on solo")
        wait_until(lambda: [(n["name"], n["used"], n["jobs"]) for n in c.get("/nodes").json()["nodes"]]
                   == [("solo", 1, [second])], 30, "the node table: job 2 on solo")
        log = (tmp_path / "small.log").read_text()
        assert "scheduling round failed" not in log and "policy forecast failed" not in log, log[-3000:]
        assert log.count("which the cluster declaration no longer has") == 2, log[-3000:]
    finally:
        for p in procs:
            stop(p)
        kill_jobs(jobs_dir)


def test_a_restart_with_fewer_slots_on_a_jobs_node_requeues_it_and_rounds_run(tmp_path):
    # n0 declared with 1 slot where a running job held 2: every round and forecast failed ("allocation
    # over-subscribes nodes: ['n0']"), `nodes` showed 2 used of 1, and no queued job ever started
    jobs_dir = tmp_path / "state" / "jobs"
    proc, c = start(tmp_path, "nodes: [{name: n0, gpus: 2}]\npolicy: tiresias\ninterval_s: 0.2\n")
    procs = [proc]
    try:
        wide = c.post("/jobs", content=job_yaml("wide", gpus=2, samples=10**6, step_s=0.05), headers=YAML).json()["id"]
        wait_until(lambda: (jobs_dir / str(wide) / "ckpt" / "latest.json").exists(), 60, "the job checkpointed")
        pid = coordinator(jobs_dir / str(wide))
        stop(proc)

        proc, c = start(tmp_path, "nodes: [{name: n0, gpus: 1}, {name: n1, gpus: 2}]\npolicy: tiresias\n"
                                  "interval_s: 0.2\n", name="fewer")
        procs.append(proc)
        small = c.post("/jobs", content=job_yaml("small", samples=10**6, step_s=0.05), headers=YAML).json()["id"]
        wait_until(lambda: c.get(f"/jobs/{small}").json()["state"] == "running", 60, "a new job starts: rounds run")
        queued = [e for e in c.get(f"/jobs/{wide}/events").json() if e["kind"] == "queued"]
        assert len(queued) == 1 and "declared with fewer slots" in queued[0]["detail"]["reason"], queued
        assert queued[0]["detail"]["nodes"] == ["n0"] and not process_alive(pid)
        wait_until(lambda: all(n["used"] <= n["slots"] for n in c.get("/nodes").json()["nodes"])
                   and c.get(f"/jobs/{wide}").json()["state"] == "running", 60, "the job resumed within the slots")
        log = (tmp_path / "fewer.log").read_text()
        assert "scheduling round failed" not in log and "policy forecast failed" not in log, log[-3000:]
    finally:
        for p in procs:
            stop(p)
        kill_jobs(jobs_dir)


def test_a_second_serve_on_a_state_folder_in_use_is_refused_and_a_killed_one_does_not_block_a_restart(tmp_path):
    cluster = "nodes: [{name: n0, gpus: 1}]\npolicy: test-fifo\ninterval_s: 0.2\n"
    proc, c = start(tmp_path, cluster)
    try:
        (tmp_path / "second.yaml").write_text(cluster)
        second = subprocess.run([sys.executable, str(SERVE), "serve", "--cluster", "second.yaml", "--state-dir", "state",
                                 "--port", str(free_port())], cwd=tmp_path, capture_output=True, text=True, timeout=120)
        assert second.returncode == 2 and second.stdout == "", second.stdout + second.stderr
        assert second.stderr.count("\n") == 1 and second.stderr.startswith(
            f"error: --state-dir {tmp_path / 'state'}: another dlsched serve (pid {proc.pid}) uses this state folder"), \
            second.stderr
        assert c.get("/jobs").status_code == 200            # the first one is untouched
        stop(proc, signal.SIGKILL)                         # the kernel drops its lock
        proc, c = start(tmp_path, cluster, name="restarted")
        assert c.get("/jobs").status_code == 200
    finally:
        stop(proc)
