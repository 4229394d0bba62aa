"""A running job whose process lives but makes no progress is said stalled (``service.stalls``): before, a job whose
process was stopped stayed `running` for good with the speed and finish of its last step, and nothing said so."""
import json
import os
import signal

import httpx

from dlsched.commands.service import _reason
from dlsched.service.server import Service
from tests.service.conftest import RUNTIME, cluster, job_yaml
from tests.service.teardown import stop_service_and_jobs
from tests.waiting import wait_until


def test_a_job_alive_without_progress_is_marked_stalled_and_unmarked_when_it_steps_again(tmp_path):
    spec = cluster(slots=(1,)).model_copy(update={"stall_after_s": 2.0})
    svc = Service(spec, tmp_path / "state", port=0, runtime=RUNTIME).start()
    pid = None
    try:
        c = httpx.Client(base_url=svc.url, headers=svc.headers, timeout=30)
        jid = c.post("/jobs", content=job_yaml("hangs", samples=10**6, step_s=0.05),
                     headers={"content-type": "application/yaml"}).json()["id"]
        launch = svc.jobs_dir / str(jid) / "launch.json"
        wait_until(lambda: launch.exists() and c.get(f"/jobs/{jid}").json()["samples"] > 0, 60, "the job steps")
        pid = json.loads(launch.read_text())["pid"]
        os.kill(pid, signal.SIGSTOP)   # alive, and no step will come: a hung worker, as the backend sees it
        job = wait_until(lambda: (j := c.get(f"/jobs/{jid}").json())["stalled_since"] and j, 60, "stalled_since")
        assert job["state"] == "running" and job["stalled_since"] >= job["start_time"]
        stalled = [e for e in c.get(f"/jobs/{jid}/events").json() if e["kind"] == "stalled"]
        assert stalled[-1]["detail"]["since"] == job["stalled_since"] and stalled[-1]["detail"]["quiet_s"] >= 2.0
        assert _reason(job).startswith("no progress since ")
        assert f'dlsched_job_stalled_since_timestamp_seconds{{job="{jid}",name="hangs"}}' in c.get("/metrics").text
        os.kill(pid, signal.SIGCONT)
        job = wait_until(lambda: (j := c.get(f"/jobs/{jid}").json())["stalled_since"] is None and j, 60, "progress")
        kinds = [e["kind"] for e in c.get(f"/jobs/{jid}/events").json()]
        assert kinds.index("progressing") > kinds.index("stalled") and _reason(job) == ""
        assert "dlsched_job_stalled_since_timestamp_seconds{" not in c.get("/metrics").text
    finally:
        if pid is not None:
            os.kill(pid, signal.SIGCONT)
        stop_service_and_jobs(svc)


def test_a_wall_clock_stepped_forward_does_not_mark_running_jobs_stalled(tmp_path):
    """NTP stepping the clock (or a VM resumed) an hour forward made every running job an hour quiet at once."""
    from dlsched.service.stalls import StallWatch
    from dlsched.service.store import RUNNING, Store
    from dlsched.spec import load_job_spec

    store = Store(tmp_path / "s.db")
    jid = store.submit(load_job_spec(job_yaml("j"), "spec"), now=1000.0)
    store.transition(jid, RUNNING, 1000.0)
    store.update(jid, progressed_at=1000.0)
    mono = [0.0]
    watch = StallWatch(60.0, store, monotonic=lambda: mono[0])
    watch.check(store.get(jid), 1001.0)
    mono[0] = 2.0
    watch.check(store.get(jid), 1002.0 + 3600)   # the wall clock jumped; 2 s passed
    assert store.get(jid).stalled_since is None
    mono[0] = 61.5
    watch.check(store.get(jid), 1061.5 + 3600)   # and now it has been quiet past stall_after_s
    assert store.get(jid).stalled_since == 1000.0
    assert [e["kind"] for e in store.events(jid)][-1] == "stalled"


def test_a_slow_first_step_is_not_a_stall_but_a_hang_before_it_is_after_first_step_after_s(tmp_path):
    """A job whose first step (a large model built, its data loaded) took longer than stall_after_s was marked stalled."""
    spec = cluster(slots=(1, 1)).model_copy(update={"stall_after_s": 1.0, "first_step_after_s": 8.0})
    svc = Service(spec, tmp_path / "state", port=0, runtime=RUNTIME).start()
    try:
        c = httpx.Client(base_url=svc.url, headers=svc.headers, timeout=30)
        slow, hung = (c.post("/jobs", content=job_yaml(name, samples=10**6, step_s=0.05,
                                                       ).replace("step_s: 0.05", f"step_s: 0.05, first_step_s: {s}"),
                             headers={"content-type": "application/yaml"}).json()["id"]
                      for name, s in (("slow", 4), ("hung", 10**6)))
        wait_until(lambda: c.get(f"/jobs/{slow}").json()["samples"] > 0, 60, "its first step")
        # 4 s > stall_after_s, < first_step_after_s: not stalled before it (after it, a loaded host may pause 1 s)
        assert [e for e in c.get(f"/jobs/{slow}/events").json()
                if e["kind"] == "stalled" and e["detail"]["samples"] == 0] == []
        job = wait_until(lambda: (j := c.get(f"/jobs/{hung}").json())["stalled_since"] and j, 60, "the hung job's mark")
        stalled = [e for e in c.get(f"/jobs/{hung}/events").json() if e["kind"] == "stalled"]
        assert job["samples"] == 0 and stalled[0]["detail"]["quiet_s"] >= 8.0
        assert stalled[0]["detail"]["stall_after_s"] == 8.0   # the allowance it was held to
    finally:
        stop_service_and_jobs(svc)
