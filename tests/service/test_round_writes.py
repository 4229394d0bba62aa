"""A queued job cancelled while the round that starts it runs is not left training."""
import threading

import httpx

from dlsched.round import Start
from dlsched.service.server import Service
from tests.service.conftest import RUNTIME, cluster, job_yaml
from tests.service.teardown import stop_service_and_jobs
from tests.waiting import wait_until


def test_a_queued_job_cancelled_between_decide_and_act_is_stopped_and_the_rounds_other_start_stands(tmp_path):
    """The API cancels a queued job at once; the round that had already decided to start it launched its processes,
    then its cancelled -> running write was refused, which rolled back every write of the round and left the
    cancelled job training on a slot the scheduler counted as free."""
    svc = Service(cluster("test-fifo", slots=(2,)), tmp_path / "state", port=0, runtime=RUNTIME).start()
    c = httpx.Client(base_url=svc.url, headers={**svc.headers, "content-type": "application/yaml"}, timeout=30)
    ids: dict[str, int] = {}
    cancelled = threading.Event()
    decide = svc.loop.decide

    def decide_then_cancel(jobs, now, view):   # both start in one round, and b is cancelled before that round acts
        if cancelled.is_set():
            return decide(jobs, now, view)
        if len(ids) < 2 or {j.id for j in jobs} != set(ids.values()):
            return []   # both stay queued until the round sees both
        actions = decide(jobs, now, view)
        assert {int(a.job_id) for a in actions if isinstance(a, Start)} == set(ids.values()), actions
        assert c.post(f"/jobs/{ids['b']}/cancel").json()["state"] == "cancelled"
        cancelled.set()
        return actions

    svc.loop.decide = decide_then_cancel
    try:
        ids["a"] = c.post("/jobs", content=job_yaml("a", samples=1000000, step_s=0.05)).json()["id"]
        ids["b"] = c.post("/jobs", content=job_yaml("b", samples=1000000, step_s=0.05)).json()["id"]
        wait_until(cancelled.is_set, 60, "b cancelled between the round's decide and act")
        a, b = ids["a"], ids["b"]
        wait_until(lambda: c.get(f"/jobs/{a}").json()["samples"] > 0, 60, "job a training")
        kinds = [(e["job_id"], e["kind"]) for e in c.get("/events").json()]
        assert (a, "running") in kinds
        assert (b, "running") not in kinds
        assert c.get(f"/jobs/{b}").json()["state"] == "cancelled"
        assert b not in svc.backend._procs and b not in svc.backend._slots, "b's processes were left running"
    finally:
        c.close()
        stop_service_and_jobs(svc)
