"""A grow given up past ``resize_timeout_s``: its slots go to no other job until the runtime trains at the smaller
size again, and its clock is the store's (a restarted service does not start it over)."""
import json

import pytest

from dlsched.backends.local import LocalBackend
from dlsched.service.loop import LiveLoop
from dlsched.service.store import RESCALING, RUNNING, Store
from dlsched.spec import load_cluster_spec, load_job_spec
from tests.service.conftest import RUNTIME, job_yaml
from tests.service.test_script_job import growing_script_job
from tests.waiting import wait_until


@pytest.mark.slow
def test_a_grow_given_up_after_its_larger_group_formed_keeps_its_slots_from_other_jobs_until_the_job_shrinks_back(
        tmp_path):
    """The timeout fired after the runtime had formed the larger group but before its first step there: the job's
    books went back to 1 GPU at once, and a job submitted then started on the slot the grown group still trained on."""
    with growing_script_job(tmp_path, "late_first_step.py", "resize_timeout_s: 3600") as (svc, c, b, gate):
        def job(j: int) -> dict:
            return c.get(f"/jobs/{j}").json()

        status = svc.jobs_dir / str(b) / "status.json"
        wait_until(lambda: (gate / "worker-1.joined").exists(), 120, "b's grown group formed, its first step held")
        assert json.loads(status.read_text())["workers"] == 2 and job(b)["state"] == "rescaling"
        # shortened only now (as in the hanging newcomer's test): under load the group may take long to form
        svc.loop.deadline.timeout_s = 1
        back = wait_until(lambda: [e for e in c.get(f"/jobs/{b}/events").json() if e["kind"] == "running" and
                                   e["detail"].get("from") == "rescaling"], 60, "b given back at the timeout")
        d = back[0]["detail"]
        assert d["gpus"] == 1 and "resize_timeout_s=1 s" in d["reason"] and d["releasing"] == {"n0": 1}, d
        (tmp_path / "c").mkdir()
        spec = f"name: c\ncommand: [python, tests/service/late_first_step.py, --gate, '{tmp_path / 'c'}']\ngpus: 1\n"
        r = c.post("/jobs", content=spec, headers={"content-type": "application/yaml"})
        assert r.status_code == 201, r.text
        x = r.json()["id"]
        rounds = svc.thread.rounds
        wait_until(lambda: svc.thread.rounds >= rounds + 5, 60, "five rounds after c's submission")
        assert json.loads(status.read_text())["workers"] == 2, "b's larger group is still the one training"
        assert job(x)["state"] == "queued", f"c was placed on a slot b still trains on: {svc.backend._slots}"
        (gate / "release").touch()   # the first step at 2 ends; the runtime then shrinks back to 1
        wait_until(lambda: job(x)["state"] == "running", 120, "c started once b trains on 1 again")
        events = c.get("/events", params={"limit": 10000}).json()
        shrunk = [e["id"] for e in events if (e["job_id"], e["kind"]) == (b, "job_resized") and
                  e["detail"].get("workers") == 1]
        started = [e["id"] for e in events if (e["job_id"], e["kind"]) == (x, "running")]
        assert shrunk and started and shrunk[0] < started[0], events
        assert svc.backend._slots[b] == {"n0": [1]} and svc.backend._slots[x] == {"n0": [0]}, svc.backend._slots
        assert svc.store.get(b).releasing is None


def test_a_grows_deadline_counts_from_its_request_across_a_service_restart(tmp_path):
    """The deadline's clock lived in the loop's memory: a service restarted during a grow waited a whole
    resize_timeout_s again (one restarted more often than that never gave a hanging grow up)."""
    t = [0.0]
    spec = load_cluster_spec("nodes: [{name: n0, gpus: 2}]\npolicy: test-elastic\nresize_timeout_s: 100")
    store = Store(tmp_path / "s.db")
    backend = LocalBackend(runtime=RUNTIME, stop_grace_s=1.0)
    loop = LiveLoop(store, backend, spec, tmp_path, clock=lambda: t[0])
    try:   # 600 s steps: the contract job never confirms the grow by itself
        x = store.submit(load_job_spec(job_yaml("x", gpus=1, samples=10**6, step_s=600)), now=0.0)
        a = store.submit(load_job_spec(job_yaml("a", gpus=1, max_gpus=2, samples=10**6, step_s=600)), now=0.0)
        loop.round()
        store.request_cancel(x)
        t[0] = 10.0
        loop.round()                                       # x's slot goes to a: 1 -> 2
        assert (store.get(a).state, store.get(a).num_gpus) == (RESCALING, 2)
        backend.shutdown()                                 # the service goes; the coordinator stays
        store.close()
        t[0] = 105.0
        store = Store(tmp_path / "s.db")
        backend = LocalBackend(runtime=RUNTIME, stop_grace_s=1.0)
        loop = LiveLoop(store, backend, spec, tmp_path, clock=lambda: t[0])
        loop.recover()
        loop.round()                                       # 95 s after the grow's request: not yet
        assert store.get(a).state == RESCALING
        t[0] = 111.0
        loop.round()                                       # 101 s after it, 6 s after the restart: given up
        job = store.get(a)
        assert (job.state, job.num_gpus, job.releasing) == (RUNNING, 1, {"n0": 1}), job
        assert "resize_timeout_s=100 s" in store.events(a, kinds=[RUNNING])[-1]["detail"]["reason"]
    finally:
        backend.stop_all()
