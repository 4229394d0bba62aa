"""A shrink the policy decides: the slots it takes from a job go to no other job until a step under the shrink's
control request proves the smaller group runs (``slot_holds``), across a service restart too."""
import json
from pathlib import Path

import httpx
import pytest

from dlsched.paths import REPO_ROOT
from dlsched.service.server import Service, free_port
from dlsched.spec import load_cluster_spec
from tests.service.teardown import stop_service_and_jobs
from tests.service.test_resize_deadline import _job, _slots, _submit_late_first_step
from tests.waiting import wait_until


def _launch(jobs_dir: Path, job: int) -> dict:
    return json.loads((jobs_dir / str(job) / "launch.json").read_text())


@pytest.mark.slow
def test_a_shrinks_slot_waits_for_the_smaller_groups_first_step_across_a_service_restart(tmp_path):
    """The policy shrank b (2 -> 1 GPU) to make room for c, and c started on b's second slot in the same round, while
    b's 2-worker group still trained there: its leaving worker goes only once the smaller group has formed."""
    gate = tmp_path / "b"
    gate.mkdir()
    cluster = load_cluster_spec("nodes: [{name: n0, gpus: 2}]\npolicy: test-elastic\ninterval_s: 0.3")

    def serve() -> tuple[Service, httpx.Client]:
        svc = Service(cluster, tmp_path / "state", port=free_port(), workdir=REPO_ROOT).start()
        return svc, httpx.Client(base_url=svc.url, headers=svc.headers, timeout=30)

    svc, c = serve()
    try:
        spec = (f"name: b\ncommand: [python, tests/service/shrunk_first_step.py, --gate, '{gate}']\n"
                f"gpus: 1\nmin_gpus: 1\nmax_gpus: 2\n")
        b = c.post("/jobs", content=spec, headers={"content-type": "application/yaml"}).json()["id"]
        status = svc.jobs_dir / str(b) / "status.json"
        wait_until(lambda: _job(c, b)["samples"] > 0 and json.loads(status.read_text())["workers"] == 2, 120,
                   "b training on 2 workers")
        x = _submit_late_first_step(c, tmp_path, "c", 1)   # the policy gives b 1, c 1: b shrinks
        wait_until(lambda: (gate / "shrunk").exists(), 120, "b's smaller group formed, its first step held")
        assert _job(c, x)["state"] == "queued", \
            f"c was placed on the slot b's larger group trained on: b {_slots(svc.jobs_dir, b)}, c {_slots(svc.jobs_dir, x)}"
        assert svc.store.get(b).releasing == {"n0": 1} and _launch(svc.jobs_dir, b)["releasing"] == {"n0": [1]}
        rounds = svc.thread.rounds
        wait_until(lambda: svc.thread.rounds >= rounds + 3, 60, "three rounds with b's first step at 1 held")
        assert _job(c, x)["state"] == "queued"

        c.close()
        svc.close()                                        # the service goes; b's coordinator stays, its step held
        svc, c = serve()
        wait_until(lambda: svc.thread.rounds >= 3, 60, "three rounds after the restart")
        assert _job(c, x)["state"] == "queued", f"c was placed on b's held slot after the restart: {_slots(svc.jobs_dir, x)}"
        assert svc.store.get(b).releasing == {"n0": 1} and svc.backend._releasing == {b: {"n0": [1]}}

        (gate / "release").touch()                         # the smaller group's first step ends
        wait_until(lambda: _job(c, x)["state"] == "running", 120, "c started once b trains on 1")
        events = c.get("/events", params={"limit": 10000}).json()
        shrunk = [e["id"] for e in events if (e["job_id"], e["kind"]) == (b, "job_resized") and
                  e["detail"].get("workers") == 1]
        started = [e["id"] for e in events if (e["job_id"], e["kind"]) == (x, "running")]
        assert shrunk and started and shrunk[0] < started[0], events
        assert (_slots(svc.jobs_dir, b), _slots(svc.jobs_dir, x)) == ([0], [1])
        assert svc.store.get(b).releasing is None and "releasing" not in _launch(svc.jobs_dir, b)
    finally:
        c.close()
        stop_service_and_jobs(svc)
