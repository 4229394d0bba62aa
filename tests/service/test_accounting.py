"""GPU-time accounting across rounds: what a running job is charged when the wall clock jumps."""
import time

import pytest

from dlsched.backends.recording import RecordingBackend
from dlsched.service.loop import LiveLoop
from dlsched.service.store import RUNNING, Store
from dlsched.spec import load_job_spec
from tests.service.conftest import cluster, job_yaml


def _two_gpu_job(tmp_path):
    """A loop on its own wall and monotonic clocks (lists to move), with a 2-GPU job started in its first round."""
    wall, mono = [1000.0], [50.0]
    store = Store(tmp_path / "s.db")
    loop = LiveLoop(store, RecordingBackend(), cluster("test-fifo", (2,)), tmp_path, clock=lambda: wall[0],
                    monotonic=lambda: mono[0])
    a = store.submit(load_job_spec(job_yaml("a", gpus=2)), now=wall[0])
    loop.round()
    return store, loop, a, wall, mono


def test_a_wall_clock_stepped_forward_charges_the_time_that_passed_not_the_jump(tmp_path):
    """An NTP step (or a resumed VM) of an hour between two rounds charged every running job an hour of GPU time."""
    store, loop, a, wall, mono = _two_gpu_job(tmp_path)
    assert store.get(a).state == RUNNING
    wall[0] += 10.0
    mono[0] += 10.0
    loop.round()
    assert (store.get(a).run_time, store.get(a).attained_service) == pytest.approx((10.0, 20.0))
    wall[0] += 3600.0 + 10.0      # the clock jumps an hour while 10 s pass
    mono[0] += 10.0
    loop.round()
    assert (store.get(a).run_time, store.get(a).attained_service) == pytest.approx((20.0, 40.0))
    wall[0] += 10.0
    mono[0] += 10.0
    loop.round()
    assert store.get(a).run_time == pytest.approx(30.0) and store.get(a).accounted_until == wall[0]


def test_a_cancelled_job_is_charged_up_to_its_stop_like_a_finished_one(tmp_path):
    """The cancel path ended the job without counting its time since the previous round: a cancelled job's GPU-TIME
    fell short of its RAN (end - start) by up to a round interval (3 s of 69 s seen on a 2 s-round service)."""
    from dlsched.service.store import CANCELLED

    store, loop, a, wall, mono = _two_gpu_job(tmp_path)
    wall[0] += 10.0
    mono[0] += 10.0
    loop.round()
    store.request_cancel(a)
    wall[0] += 7.0
    mono[0] += 7.0
    loop.round()
    job = store.get(a)
    assert job.state == CANCELLED and job.end_time == wall[0]
    assert (job.run_time, job.attained_service) == pytest.approx((17.0, 34.0))
    assert job.run_time == pytest.approx(job.end_time - job.start_time)


def test_a_job_started_after_a_slow_stop_is_charged_from_its_start_not_from_before_the_stop(tmp_path):
    """A round stopped a cancelled job (the runtime finishes its step: seconds), then started the job queued behind
    it stamped with the round's start: its start_time and GPU time began before the slot was free (8 s before it
    was even submitted, seen with a real job queued behind two cancelled ones)."""
    import httpx

    from dlsched.service.server import Service
    from dlsched.train.files import read_status
    from tests.service.conftest import RUNTIME
    from tests.service.teardown import stop_service_and_jobs
    from tests.waiting import process_alive, wait_until

    svc = Service(cluster(slots=(1,)), tmp_path / "state", port=0, runtime=RUNTIME).start()
    try:
        c = httpx.Client(base_url=svc.url, headers=svc.headers, timeout=30)
        yaml = {"content-type": "application/yaml"}
        slow = c.post("/jobs", content=job_yaml("slow", samples=10**6, step_s=2.0), headers=yaml).json()["id"]
        queued = c.post("/jobs", content=job_yaml("next", samples=10**6), headers=yaml).json()["id"]
        wait_until(lambda: c.get(f"/jobs/{slow}").json()["samples"] > 0, 60, "the slow job's first step")
        pid = read_status(tmp_path / "state" / "jobs" / str(slow))["pid"]
        c.post(f"/jobs/{slow}/cancel")      # its stop waits for the step under way (up to 2 s) to end
        wait_until(lambda: not process_alive(pid), 30, "the slow job's runtime to exit")
        stopped = (tmp_path / "state" / "jobs" / str(slow) / "ckpt" / "latest.json").stat().st_mtime
        job = wait_until(lambda: (j := c.get(f"/jobs/{queued}").json())["state"] == "running" and j, 30,
                         "the queued job to start")
        assert job["start_time"] >= stopped, (job["start_time"], stopped)
        alloc = c.get(f"/jobs/{queued}").json()
        assert alloc["attained_service"] <= time.time() - stopped, alloc
    finally:
        stop_service_and_jobs(svc)


def test_a_job_noticed_ended_a_round_late_is_charged_up_to_its_end_not_to_the_round(tmp_path):
    """The round that found a job ended charged it GPU time up to that round: up to an interval, more on a loaded
    box or a locked store (a 2-GPU job: 5 s after its runtime's end seen, and 9 s under a 30 s lock)."""
    import httpx

    from dlsched.service.server import Service
    from dlsched.train.files import read_status
    from tests.service.conftest import RUNTIME
    from tests.service.teardown import stop_service_and_jobs
    from tests.waiting import wait_until

    svc = Service(cluster(slots=(2,), interval=4.0), tmp_path / "state", port=0, runtime=RUNTIME).start()
    try:
        c = httpx.Client(base_url=svc.url, headers=svc.headers, timeout=30)
        job = c.post("/jobs", content=job_yaml("short", gpus=2, samples=320), headers={"content-type": "application/yaml"}
                     ).json()["id"]
        rec = wait_until(lambda: (j := c.get(f"/jobs/{job}").json())["state"] == "finished" and j, 60, "the job to end")
        ended = (tmp_path / "state" / "jobs" / str(job) / "status.json").stat().st_mtime
        assert read_status(tmp_path / "state" / "jobs" / str(job))["state"] == "finished"
        assert rec["end_time"] <= ended + 0.05, (rec["end_time"], ended)
        assert rec["run_time"] == pytest.approx(rec["end_time"] - rec["start_time"], abs=0.05)
        assert rec["attained_service"] == pytest.approx(2 * rec["run_time"])
    finally:
        stop_service_and_jobs(svc)


def test_a_cancelled_job_ends_when_its_stop_does_not_before_it(tmp_path):
    """A cancelled job was ended at the start of the round that stopped it: the stop (its runtime finishing the
    step under way) took seconds more, in which it still held its GPUs: its end_time came 6 s before its runtime's
    own 'stopped' record (seen on a real service) and that time was not counted."""
    import httpx

    from dlsched.service.server import Service
    from dlsched.train.files import read_status
    from tests.service.conftest import RUNTIME
    from tests.service.teardown import stop_service_and_jobs
    from tests.waiting import process_alive, wait_until

    svc = Service(cluster(slots=(1,)), tmp_path / "state", port=0, runtime=RUNTIME).start()
    try:
        c = httpx.Client(base_url=svc.url, headers=svc.headers, timeout=30)
        job = c.post("/jobs", content=job_yaml("slow", samples=10**6, step_s=2.0),
                     headers={"content-type": "application/yaml"}).json()["id"]
        wait_until(lambda: c.get(f"/jobs/{job}").json()["samples"] > 0, 60, "the job's first step")
        pid = read_status(tmp_path / "state" / "jobs" / str(job))["pid"]
        c.post(f"/jobs/{job}/cancel")      # its stop waits for the step under way (up to 2 s) to end
        wait_until(lambda: not process_alive(pid), 30, "the runtime to exit")
        stopped = (tmp_path / "state" / "jobs" / str(job) / "ckpt" / "latest.json").stat().st_mtime
        rec = wait_until(lambda: (j := c.get(f"/jobs/{job}").json())["state"] == "cancelled" and j, 30, "the end")
        assert rec["end_time"] >= stopped, (rec["end_time"], stopped)
        assert rec["run_time"] == pytest.approx(rec["end_time"] - rec["start_time"], abs=0.05)
    finally:
        stop_service_and_jobs(svc)


def test_a_job_whose_runtime_finished_before_its_cancel_was_carried_out_ends_finished(tmp_path):
    """A cancel that came after the runtime had finished, before the round that would have seen it, stopped the
    (ended) job and recorded it cancelled, every sample trained (seen on a real service: job_finished 09:14:36,
    cancel_requested and cancelled 09:14:37, samples 45000 of 45000)."""
    import httpx

    from dlsched.service.server import Service
    from dlsched.train.files import read_status
    from tests.service.teardown import stop_service_and_jobs
    from tests.service.conftest import RUNTIME
    from tests.waiting import wait_until

    svc = Service(cluster(slots=(1,), interval=4.0), tmp_path / "state", port=0, runtime=RUNTIME).start()
    try:
        c = httpx.Client(base_url=svc.url, headers=svc.headers, timeout=30)
        job = c.post("/jobs", content=job_yaml("short", samples=320), headers={"content-type": "application/yaml"}
                     ).json()["id"]
        folder = tmp_path / "state" / "jobs" / str(job)
        wait_until(lambda: (read_status(folder) or {}).get("state") == "finished", 60, "the runtime to finish")
        c.post(f"/jobs/{job}/cancel")
        rec = wait_until(lambda: (j := c.get(f"/jobs/{job}").json())["state"] in ("finished", "cancelled") and j, 30,
                         "the job to end")
        assert rec["state"] == "finished" and rec["samples"] == rec["total_samples"], rec
    finally:
        stop_service_and_jobs(svc)


def test_a_coordinator_killed_while_the_store_cannot_be_written_is_charged_to_its_end(tmp_path, monkeypatch):
    """A coordinator killed while every round failed to write (a full disk, a database locked past the busy timeout)
    was charged as running until rounds worked again: 2 GPUs for the whole outage (38 s on a full disk). It is
    charged to its last record, as a job found finished is."""
    import os
    import signal
    import sqlite3

    import httpx

    from dlsched.service import store as store_module
    from dlsched.service.server import Service
    from dlsched.train.files import read_status
    from tests.service.conftest import RUNTIME
    from tests.service.teardown import stop_service_and_jobs
    from tests.waiting import wait_until

    monkeypatch.setattr(store_module, "BUSY_TIMEOUT_S", 0.5)   # each round fails fast while the lock is held
    svc = Service(cluster(slots=(2,), interval=0.5), tmp_path / "state", port=0, runtime=RUNTIME).start()
    try:
        c = httpx.Client(base_url=svc.url, headers=svc.headers, timeout=30)
        job = c.post("/jobs", content=job_yaml("victim", gpus=2, samples=10**6, step_s=0.1),
                     headers={"content-type": "application/yaml"}).json()["id"]
        wait_until(lambda: c.get(f"/jobs/{job}").json()["samples"] > 0, 60, "the job's first steps")
        holder = sqlite3.connect(svc.state_dir / "dlsched.db", isolation_level=None)
        holder.execute("BEGIN IMMEDIATE")           # no round can write from here on
        os.killpg(read_status(tmp_path / "state" / "jobs" / str(job))["pid"], signal.SIGKILL)
        killed = time.time()
        time.sleep(6.0)                             # the outage the job must not be charged for
        holder.execute("ROLLBACK")
        # its re-queue ends its allocation where its time was counted to (the next round may start it again at once,
        # so its state is not waited on): the row at 0 GPUs
        ended = wait_until(lambda: [a for a in c.get(f"/jobs/{job}").json()["allocations"] if a["num_gpus"] == 0],
                           60, "its re-queue")[0]
        started = c.get(f"/jobs/{job}").json()["allocations"][0]["time"]
        assert ended["time"] <= killed + 0.5, (ended["time"] - started, killed - started)
    finally:
        stop_service_and_jobs(svc)
