"""Crashes at the worst moments, with the real runtime: exactly one coordinator per job, every sample trained
exactly once (``--record-samples`` audit), nothing lost.

* The service is SIGKILLed the instant a coordinator process exists and nothing records it yet
  (``DLSCHED_FAULT_AT=coordinator-started``: deterministic, no timer), 3 times in a row. Jobs are held at a
  gate (``tests/train/gated_job.py``) until every kill is done, so each restarted service must find the live
  coordinators, never start a second.
* A coordinator is SIGKILLed (as the OOM killer would) with a torn newest checkpoint: the service re-queues the
  job and the new coordinator resumes from the newest *valid* checkpoint.
"""
import contextlib
import os
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from dlsched.commands.service import job_rows
from dlsched.faults import FAULT_ENV
from dlsched.service.server import Service, free_port, wait_for_http
from dlsched.spec import load_cluster_spec
from dlsched.train.checkpoint import list_checkpoints
from dlsched.train.data import committed_sample_ids
from dlsched.train.files import read_status
from dlsched.train.progress_log import read_progress
from tests.service.teardown import stop_service_and_jobs
from tests.waiting import wait_until

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[2]
SERVE = REPO / "tests" / "service" / "serve_for_tests.py"
RUNTIME = [sys.executable, "-m", "dlsched.train.run", "--record-samples", "--ckpt-every", "2", "--threads", "1"]
KILLS = 3   # the first kill finds no coordinator, the next two find live ones and the last restart adopts all 3
SAMPLES, BATCH = 48, 12
YAML = {"content-type": "application/yaml"}


def gated_job(name: str, gate: Path, samples: int = SAMPLES, throttle_s: float = 0.0) -> str:
    return (f"name: {name}\nentry: tests/train/gated_job.py:make_job\ngpus: 1\n"
            f"params: {{gate_dir: '{gate}', free: 0, hold: prepare, num_samples: {samples}, "
            f"batch_size: {BATCH}, throttle_s: {throttle_s}}}\n")


def serve(tmp_path: Path, fault: str | None) -> tuple[subprocess.Popen, httpx.Client]:
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k != FAULT_ENV}
    env.update(DLSCHED_RUNTIME=" ".join(RUNTIME), PYTHONPATH=str(REPO / "src"), **({FAULT_ENV: fault} if fault else {}))
    proc = subprocess.Popen([sys.executable, str(SERVE), "serve", "--cluster", str(tmp_path / "cluster.yaml"),
                             "--state-dir", str(tmp_path / "state"), "--port", str(port), "--workdir", str(REPO)],
                            env=env, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    if not wait_for_http(f"{url}/healthz", 180, proc):   # returns as soon as the process exits
        proc.kill()
        raise AssertionError(proc.stdout.read().decode()[-2000:])
    token = (tmp_path / "state" / "token").read_text().strip()
    return proc, httpx.Client(base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=30)


def exactly_once(job_dir: Path, samples: int) -> tuple[int, int]:
    """(duplicated, lost) sample ids of the job's committed steps; steps 1..N each once, counting a restore
    (``resumed``/``worker_lost``) as rolling back the steps after the one it restored."""
    steps = []
    for r in read_progress(job_dir):
        if r.get("event") in ("resumed", "worker_lost"):
            steps = [s for s in steps if s <= r["restored_step"]]
        elif "event" not in r:
            steps.append(r["step"])
    assert steps == list(range(1, samples // BATCH + 1)), steps
    seen = committed_sample_ids(job_dir)
    return sum(n - 1 for n in seen.values() if n > 1), len(set(range(samples)) - set(seen))


def coordinator_starts(job_dir: Path) -> int:
    return (job_dir / "output.log").read_text().count(" start: ")


def test_service_killed_as_each_coordinator_starts_never_runs_two(tmp_path):
    (tmp_path / "cluster.yaml").write_text(f"nodes: [{{name: n0, gpus: {KILLS}}}]\npolicy: fifo\ninterval_s: 0.2\n")
    gate = tmp_path / "gate"
    kills, procs = 0, []
    try:
        for i in range(KILLS):
            proc, c = serve(tmp_path, fault="coordinator-started")
            procs.append(proc)
            assert c.post("/jobs", content=gated_job(f"g{i}", gate), headers=YAML).status_code == 201
            proc.wait(timeout=120)        # killed by its own fault point, right after starting job i's coordinator
            assert proc.returncode == -signal.SIGKILL, proc.stdout.read().decode()[-2000:]
            kills += 1
        proc, c = serve(tmp_path, fault=None)
        procs.append(proc)
        jobs = c.get("/jobs").json()
        assert [j["name"] for j in jobs] == [f"g{i}" for i in range(KILLS)]
        wait_until(lambda: all(j["state"] == "running" for j in c.get("/jobs").json()), 60, "all jobs running")
        (gate / "open").touch()
        wait_until(lambda: all(j["state"] in ("finished", "failed") for j in c.get("/jobs").json()), 180,
                   "all jobs ended")
        jobs = c.get("/jobs").json()
        assert all(j["state"] == "finished" for j in jobs), [(j["id"], j["state"], j["error"]) for j in jobs]
        dups = lost = 0
        for j in jobs:
            d = tmp_path / "state" / "jobs" / str(j["id"])
            assert coordinator_starts(d) == 1, (d / "output.log").read_text()[-2000:]   # one coordinator, adopted
            assert "adopted coordinator" in (d / "output.log").read_text()
            assert not [r for r in read_progress(d) if r.get("event") == "resumed"]    # never restarted
            dup, gone = exactly_once(d, SAMPLES)
            dups, lost = dups + dup, lost + gone
        print(f"\nservice kills at coordinator start: kills={kills} jobs={len(jobs)} coordinators="
              f"{sum(coordinator_starts(tmp_path / 'state' / 'jobs' / str(j['id'])) for j in jobs)} "
              f"duplicates={dups} samples lost={lost}")
        assert dups == 0 and lost == 0
    finally:
        (gate / "open").touch()
        for p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
                p.wait(timeout=60)
        for d in (tmp_path / "state" / "jobs").glob("*"):
            pid = (read_status(d) or {}).get("pid")
            if pid:
                try:
                    os.killpg(pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass


def test_coordinator_sigkill_resumes_from_the_newest_valid_checkpoint(tmp_path):
    samples = 96
    cluster = load_cluster_spec("nodes: [{name: n0, gpus: 2}]\npolicy: fifo\ninterval_s: 0.2")
    svc = Service(cluster, tmp_path / "state", port=0, runtime=RUNTIME, workdir=REPO).start()
    gate = tmp_path / "gate"
    gate.mkdir()
    (gate / "open").touch()
    old_group = None
    try:
        c = httpx.Client(base_url=svc.url, headers=svc.headers, timeout=30)
        job = c.post("/jobs", content=gated_job("victim", gate, samples, throttle_s=0.2), headers=YAML).json()["id"]
        d = tmp_path / "state" / "jobs" / str(job)
        wait_until(lambda: len(list_checkpoints(d / "ckpt")) >= 2, 120, "two checkpoints")
        old_group = read_status(d)["pid"]
        os.killpg(old_group, signal.SIGSTOP)       # freeze the job: no write lands after this point
        ckpts = list_checkpoints(d / "ckpt")
        newest, valid = ckpts[-1], ckpts[-2]
        newest.write_bytes(newest.read_bytes()[:-64])   # the newest checkpoint is torn
        os.kill(old_group, signal.SIGKILL)          # the coordinator alone, as the OOM killer would
        os.killpg(old_group, signal.SIGCONT)        # its workers lose their coordinator and end
        wait_until(lambda: c.get(f"/jobs/{job}").json()["state"] in ("finished", "failed"), 180, "job ended")
        j = c.get(f"/jobs/{job}").json()
        assert j["state"] == "finished", j
        kinds = [e["kind"] for e in c.get(f"/jobs/{job}/events").json()]
        assert "queued" in kinds and "job_checkpoint_skipped" in kinds, kinds
        resumed = [r for r in read_progress(d) if r.get("event") == "resumed"]
        valid_step = int(valid.name[5:14])
        assert len(resumed) == 1 and resumed[0]["restored_step"] == valid_step, resumed
        assert (d / "ckpt" / (newest.name + ".torn")).exists()
        assert coordinator_starts(d) == 2
        dups, lost = exactly_once(d, samples)
        # the replayed steps replaced the rolled-back ones' rows: each step stored once (it was twice)
        assert [r["step"] for r in c.get(f"/jobs/{job}/progress").json()] == list(range(1, samples // BATCH + 1))
        print(f"\ncoordinator SIGKILL with a torn newest checkpoint: resumed at step {valid_step} "
              f"(skipped {newest.name}); duplicates={dups} samples lost={lost}")
        assert dups == 0 and lost == 0
    finally:
        stop_service_and_jobs(svc)
        if old_group is not None:
            try:
                os.killpg(old_group, signal.SIGKILL)
            except ProcessLookupError:
                pass


def test_a_job_that_loses_its_coordinator_every_time_fails_after_bounded_resumes(tmp_path):
    """The contract runtime SIGKILLs itself once past 64 samples, every run: 3 resumes, then one clear error."""
    from dlsched.service.coordinator_loss import MAX_COORDINATOR_LOSSES
    from tests.service.conftest import RUNTIME as CONTRACT, cluster

    svc = Service(cluster(), tmp_path / "state", port=0, runtime=CONTRACT).start()
    try:
        c = httpx.Client(base_url=svc.url, headers=svc.headers, timeout=30)
        spec = "name: oom\nentry: x.py:make_job\ngpus: 1\nparams: {samples: 640, step_s: 0.02, kill_at: 64, ckpt_every: 1}\n"
        job = c.post("/jobs", content=spec, headers=YAML).json()["id"]
        wait_until(lambda: c.get(f"/jobs/{job}").json()["state"] == "failed", 120, "the job to fail")
        j = c.get(f"/jobs/{job}").json()
        assert f"coordinator lost {MAX_COORDINATOR_LOSSES + 1} times" in j["error"] and "signal 9" in j["error"], j
        queued = [e for e in c.get(f"/jobs/{job}/events").json() if e["kind"] == "queued"]
        assert [e["detail"]["coordinator_lost"] for e in queued] == list(range(1, MAX_COORDINATOR_LOSSES + 1))
    finally:
        stop_service_and_jobs(svc)


def test_a_full_job_folder_disk_stops_the_job_and_it_resumes_once_there_is_room(tmp_path):
    """The job folders' disk filled for a moment (another job's checkpoint, a log): the runtime's next write raised
    ENOSPC and it exited 1, the service failed the job for good ('[Errno 28] No space left on device'), and a start
    or resize that could not write the folder failed its job too. Now the runtime stops (EXIT_NO_SPACE, its
    checkpoints stand), the service re-queues the job, its starts wait while the disk is full (``start_no_space``),
    and once there is room it resumes and finishes, every sample trained once. A real 8 MB tmpfs (root only)."""
    disk = tmp_path / "disk"
    disk.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", str(disk)], capture_output=True).returncode:
        pytest.skip("needs root to mount a small tmpfs")
    gate = tmp_path / "gate"
    gate.mkdir()
    (gate / "open").touch()
    cluster = load_cluster_spec("nodes: [{name: n0, gpus: 1}]\npolicy: fifo\ninterval_s: 0.2")
    svc = Service(cluster, tmp_path / "state", port=0, runtime=RUNTIME, workdir=REPO, jobs_dir=disk / "jobs").start()
    try:
        c = httpx.Client(base_url=svc.url, headers=svc.headers, timeout=30)
        spec = gated_job("full", gate, 96, throttle_s=0.1).replace("hold: prepare", "hold: pause")
        job = c.post("/jobs", content=spec, headers=YAML).json()["id"]
        d = disk / "jobs" / str(job)
        wait_until(lambda: len(list_checkpoints(d / "ckpt")) >= 1, 120, "a checkpoint")
        (gate / "pause").touch()                        # between two steps: the disk fills now
        with open(disk / "filler", "wb") as f:
            with contextlib.suppress(OSError):
                while True:
                    f.write(b"\0" * (64 << 10))
                    f.flush()
        (gate / "pause").unlink()
        wait_until(lambda: "start_no_space" in [e["kind"] for e in c.get(f"/jobs/{job}/events").json()], 120,
                   "a start that found the disk full")
        # what it waits for, where the operator looks (it said "waiting for GPUs", with its GPU free)
        queued = wait_until(lambda: (j := c.get(f"/jobs/{job}").json())["waiting_for"] and j, 60, "its reason")
        assert queued["state"] == "queued" and queued["waiting_for"] == "room on its folder's disk (full)", queued
        assert job_rows([queued])[0][10].startswith("waiting for room on its folder's disk (full)")
        r = c.get("/dashboard/api/overview")
        assert r.status_code == 200, (r.status_code, r.text[:500])
        shown = next(q for q in r.json()["queue"] if q["id"] == job)
        assert shown["waiting_for"] == "room on its folder's disk (full)", shown
        (disk / "filler").unlink()
        wait_until(lambda: c.get(f"/jobs/{job}").json()["state"] in ("finished", "failed"), 180, "the job's end")
        j = c.get(f"/jobs/{job}").json()
        assert j["state"] == "finished" and j["waiting_for"] is None, j
        queued = [e["detail"] for e in c.get(f"/jobs/{job}/events").json() if e["kind"] == "queued"]
        assert queued and "disk is full" in queued[0]["reason"], queued
        dups, lost = exactly_once(d, 96)
        assert dups == 0 and lost == 0
    finally:
        stop_service_and_jobs(svc)
        subprocess.run(["umount", "-l", str(disk)], capture_output=True)


def test_a_start_that_finds_the_disk_full_is_one_log_line_a_round_not_a_traceback(tmp_path, caplog):
    """The service tries such a start once a round while the disk is full: each logged 25 lines of chained
    tracebacks (2 500 for one job's wait), burying what else the log said. A real full tmpfs (root only)."""
    from dlsched.backends.local import LocalBackend
    from dlsched.service.loop import LiveLoop
    from dlsched.service.store import QUEUED, Store
    from dlsched.spec import load_job_spec
    from tests.service.conftest import RUNTIME as CONTRACT, cluster, job_yaml
    disk = tmp_path / "disk"
    disk.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(disk)], capture_output=True).returncode:
        pytest.skip("needs root to mount a small tmpfs")
    try:
        (disk / "jobs").mkdir()
        with contextlib.suppress(OSError), open(disk / "filler", "wb") as f:
            while True:
                f.write(b"\0" * 4096)
                f.flush()
        store = Store(tmp_path / "s.db")
        loop = LiveLoop(store, LocalBackend(runtime=CONTRACT), cluster("test-fifo", (1,)), tmp_path / "state",
                        jobs_dir=disk / "jobs")
        job = store.submit(load_job_spec(job_yaml("full")))
        with caplog.at_level("WARNING", logger="dlsched.service"):
            for _ in range(3):
                loop.round()
        said = [r for r in caplog.records if r.name == "dlsched.service" and "start failed" in r.getMessage()]
        assert len(said) == 3 and all(r.exc_info is None and "disk is full" in r.getMessage() for r in said), \
            [(r.getMessage(), r.exc_info) for r in said]
        assert store.get(job).state == QUEUED
    finally:
        subprocess.run(["umount", "-l", str(disk)], capture_output=True)
