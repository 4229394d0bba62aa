"""End to end with the real training runtime (``python -m dlsched.train.run``, torch.distributed gloo workers)
and the real ``elastic`` policy: an elastic MLP job and a rigid one arriving later both finish with every
sample trained, within their declared ranges. (Live rescaling itself is pinned down with the contract job in
test_loop.py; whether the elastic policy rescales here depends on the speeds it measures on a shared host.)"""
import time
from contextlib import contextmanager

import httpx
import pytest

from tests.service.teardown import stop_service_and_jobs
from dlsched.paths import REPO_ROOT
from dlsched.service.server import Service
from dlsched.spec import load_cluster_spec
from dlsched.train.progress_log import read_progress, segments

ELASTIC = """name: elastic
entry: examples/mlp.py:make_job
gpus: 1
min_gpus: 1
max_gpus: 2
batch_size: 32
min_batch_size: 32
max_batch_size: 128
total_samples: 4800
params: {num_samples: 2400, epochs: 2, throttle_s: 0.01}
"""
RIGID = """name: rigid
entry: examples/mlp.py:make_job
gpus: 1
batch_size: 32
total_samples: 800
params: {num_samples: 800, epochs: 1, throttle_s: 0.01}
"""


@contextmanager
def _service(tmp_path, cluster_yaml: str):
    """A real service on a free port (the real runtime under the local backend) and a client of it."""
    svc = Service(load_cluster_spec(cluster_yaml), tmp_path / "state", port=0, workdir=REPO_ROOT).start()
    try:
        yield httpx.Client(base_url=svc.url, headers=svc.headers, timeout=30)
    finally:
        stop_service_and_jobs(svc)


@pytest.mark.slow
def test_elastic_job_with_the_real_runtime(tmp_path, monkeypatch):
    # its progress.jsonl rotates every few KB (train/progress_log.py): the service, the resumes and the readers of
    # the whole log follow it across the segments (below); the runtime inherits the service's environment
    monkeypatch.setenv("DLSCHED_PROGRESS_ROTATE_BYTES", "8000")
    with _service(tmp_path, "nodes: [{name: n0, gpus: 2}]\npolicy: elastic\ninterval_s: 0.5") as c:
        a = c.post("/jobs", content=ELASTIC, headers={"content-type": "application/yaml"}).json()["id"]
        end = time.monotonic() + 120
        while time.monotonic() < end and c.get(f"/jobs/{a}").json()["samples"] == 0:
            time.sleep(0.2)
        b = c.post("/jobs", content=RIGID, headers={"content-type": "application/yaml"}).json()["id"]
        while time.monotonic() < end:
            jobs = c.get("/jobs").json()
            if all(j["state"] in ("finished", "failed", "cancelled") for j in jobs):
                break
            time.sleep(0.5)
        assert [j["state"] for j in jobs] == ["finished", "finished"], [(j["name"], j["error"]) for j in jobs]
        assert [j["samples"] for j in jobs] == [4800, 800]
        allocs = c.get(f"/jobs/{a}").json()["allocations"]
        assert all(x["num_gpus"] <= 2 and 32 <= (x["batch_size"] or 32) <= 128 for x in allocs), allocs
        assert c.get(f"/jobs/{b}").json()["allocations"][0]["num_gpus"] == 1
        assert c.get(f"/jobs/{a}/predictions").json()[-1]["loss_fit"] is not None
        # every step the runtime logged, over its rotated segments, is stored once (none lost or read twice)
        folder = tmp_path / "state" / "jobs" / str(a)
        assert len(segments(folder)) >= 2, sorted(p.name for p in folder.iterdir())
        logged = sorted({r["step"] for r in read_progress(folder) if "event" not in r})
        stored = [r["step"] for r in c.get(f"/jobs/{a}/progress", params={"limit": 5000}).json()]
        assert sorted(stored) == logged and logged[-1] == len(logged), (stored, logged)


PS_JOB = """name: ps-job
entry: examples/mlp.py:make_job
gpus: 3
strategy: ps
servers: 1
sync: ssp:1
batch_size: 16
total_samples: 512
params: {num_samples: 256, epochs: 2}
"""


@pytest.mark.slow
def test_parameter_server_job_under_the_service(tmp_path):
    """A ps job's server holds one of its 3 slots: the runtime runs 1 server + 2 workers and trains every sample."""
    with _service(tmp_path, "nodes: [{name: n0, gpus: 3}]\npolicy: fifo\ninterval_s: 0.5") as c:
        a = c.post("/jobs", content=PS_JOB, headers={"content-type": "application/yaml"}).json()["id"]
        end = time.monotonic() + 150
        while time.monotonic() < end and c.get(f"/jobs/{a}").json()["state"] not in ("finished", "failed"):
            time.sleep(0.3)
        job = c.get(f"/jobs/{a}").json()
        assert job["state"] == "finished" and job["samples"] == 512, job
        assert c.get(f"/jobs/{a}").json()["allocations"][0]["num_gpus"] == 3


@pytest.mark.slow
def test_a_parameter_server_job_resized_by_hand_is_running_at_its_new_size(tmp_path):
    """Seen: a ps job resized from 3 slots to 2 trained at 1 server + 1 worker but stayed 'rescaling' until it ended:
    its step records count workers (1), its books count slots (2), and the loop waited for a step at 2."""
    spec = PS_JOB.replace("gpus: 3", "gpus: 3\nmin_gpus: 2\nmax_gpus: 3").replace("epochs: 2", "epochs: 200")
    spec = spec.replace("total_samples: 512\n", "")   # long enough to outlast the resize; cancelled below
    with _service(tmp_path, "nodes: [{name: n0, gpus: 3}]\npolicy: fifo\ninterval_s: 0.5") as c:
        a = c.post("/jobs", content=spec, headers={"content-type": "application/yaml"}).json()["id"]
        end = time.monotonic() + 150
        while time.monotonic() < end and c.get(f"/jobs/{a}").json()["samples"] == 0:
            time.sleep(0.2)
        assert c.post(f"/jobs/{a}/resize", json={"workers": 2}).status_code == 200
        while time.monotonic() < end:
            job = c.get(f"/jobs/{a}").json()
            if (job["state"], job["num_gpus"]) == ("running", 2) or job["state"] in ("finished", "failed"):
                break
            time.sleep(0.3)
        assert (job["state"], job["num_gpus"]) == ("running", 2), job
        c.delete(f"/jobs/{a}")
