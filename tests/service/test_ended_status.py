"""A job folder's status.json said ``running`` for good after its coordinator was SIGKILLed (the OOM killer, a grace
period's end), while the service had re-queued or failed the job; once the service has found the process gone, the
file says what happened (``service/ended_status.py``)."""
import json
import os
import signal

from dlsched.policy.base import _REGISTRY, Allocation, JobAllocation, Policy, register
from dlsched.service.coordinator_loss import MAX_COORDINATOR_LOSSES
from dlsched.service.server import Service
from tests.service.conftest import RUNTIME, cluster, job_yaml
from tests.service.teardown import stop_service_and_jobs
from tests.waiting import process_alive, wait_until


class FirstRunOnly(Policy):
    """Each job its GPUs while it runs, and once: a job re-queued stays queued (its folder is not rewritten by a
    second run before the test reads it)."""

    name = "test-first-run-only"
    ran: set[str] = set()

    def decide(self, jobs, cluster):
        FirstRunOnly.ran.update(j.id for j in jobs if j.is_running)
        return Allocation({j.id: JobAllocation(j.requested_gpus, batch_size=j.batch_size) for j in jobs
                           if j.is_running or j.id not in FirstRunOnly.ran})


if FirstRunOnly.name not in _REGISTRY:
    register(FirstRunOnly.name)(FirstRunOnly)


def status_of(svc, jid) -> dict:
    return json.loads((svc.jobs_dir / str(jid) / "status.json").read_text())


def post(svc, yaml: str) -> int:
    import httpx

    return httpx.post(f"{svc.url}/jobs", content=yaml, headers={**svc.headers, "content-type": "application/yaml"},
                      timeout=30).json()["id"]


def test_a_killed_coordinators_status_says_killed_once_the_job_is_requeued(tmp_path):
    svc = Service(cluster("test-first-run-only", slots=(1,)), tmp_path / "state", port=0, runtime=RUNTIME).start()
    try:
        jid = post(svc, job_yaml("k", samples=10**6, step_s=0.05))
        wait_until(lambda: svc.store.get(jid).samples > 0, 60, "the job to step")
        pid = status_of(svc, jid)["pid"]
        os.kill(pid, signal.SIGKILL)   # the OOM killer: no word from it
        wait_until(lambda: svc.store.get(jid).state == "queued", 60, "the job re-queued")
        status = status_of(svc, jid)
        assert status["state"] == "killed" and status["pid"] == pid and status["workers"] == 1
        assert status["error"].startswith("coordinator killed by signal 9; the service re-queued the job")
    finally:
        stop_service_and_jobs(svc)


def test_a_job_that_loses_its_coordinator_every_run_ends_failed_in_its_folder_too(tmp_path):
    svc = Service(cluster(slots=(1,)), tmp_path / "state", port=0, runtime=RUNTIME).start()
    try:
        jid = post(svc, job_yaml("k", samples=10**6, step_s=0.02).replace("step_s: 0.02", "step_s: 0.02, kill_at: 200"))
        job = wait_until(lambda: (j := svc.store.get(jid)).state == "failed" and j, 120, "the job to fail")
        status = status_of(svc, jid)
        assert status["state"] == "failed" and not process_alive(status["pid"])
        assert status["error"] == job.error and f"gave up after {MAX_COORDINATOR_LOSSES} resumes" in status["error"]
    finally:
        stop_service_and_jobs(svc)
