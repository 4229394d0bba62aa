"""A cancelled job's GPUs stay taken until its processes are stopped, whenever in the round the cancel lands."""
import threading

import httpx

from dlsched.service.server import Service
from tests.service.conftest import RUNTIME, cluster, job_yaml
from tests.service.teardown import stop_service_and_jobs
from tests.waiting import wait_until


def test_a_cancel_between_observe_and_decide_gives_no_job_the_cancelled_jobs_slots_before_it_stops(tmp_path):
    """A cancel that arrived after the round's observe (which stops cancelled jobs) but before its decide (which
    leaves them out) made their GPUs look free: the other job grew onto slots the cancelled job still trained on
    (slot 2 of a 2-slot node), and kept them after it stopped."""
    svc = Service(cluster("test-elastic", slots=(2,)), tmp_path / "state", port=0, runtime=RUNTIME).start()
    c = httpx.Client(base_url=svc.url, headers={**svc.headers, "content-type": "application/yaml"}, timeout=30)
    armed, cancelled_mid_round = threading.Event(), threading.Event()
    observe = svc.loop.observe

    def observe_then_cancel(now: float) -> None:   # the cancel lands exactly between observe and decide
        observe(now)
        if armed.is_set() and not cancelled_mid_round.is_set():
            assert c.post(f"/jobs/{a}/cancel").json()["cancel_requested"]
            cancelled_mid_round.set()

    svc.loop.observe = observe_then_cancel
    try:
        a = c.post("/jobs", content=job_yaml("a", samples=1000000, step_s=0.05)).json()["id"]
        wait_until(lambda: c.get(f"/jobs/{a}").json()["samples"] > 0, 60, "job a training")
        b = c.post("/jobs", content=job_yaml("b", max_gpus=2, samples=1000000, step_s=0.05)).json()["id"]
        wait_until(lambda: c.get(f"/jobs/{b}").json()["samples"] > 0, 60, "job b training on 1 slot")
        armed.set()
        wait_until(cancelled_mid_round.is_set, 60, "a cancel between a round's observe and decide")
        wait_until(lambda: c.get(f"/jobs/{b}").json()["state"] == "running" and
                   c.get(f"/jobs/{b}").json()["num_gpus"] == 2, 60, "b grown to 2 slots")
        assert c.get(f"/jobs/{a}").json()["state"] == "cancelled"
        ids = {(e["job_id"], e["kind"]): e["id"] for e in c.get("/events").json()}
        assert ids[(a, "cancelled")] < ids[(b, "rescaling")], "b grew before a's processes were stopped"
        assert svc.backend._slots[b] == {"n0": [0, 1]}, svc.backend._slots
    finally:
        c.close()
        stop_service_and_jobs(svc)
