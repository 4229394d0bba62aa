"""What the Ray tests (test_ray*.py, over the cluster of ``conftest.py``) launch and read: jobs of the contract runtime
(``contract_runtime.py``: real processes, real files) or of the real one, services over the module's backend, and
the waits on their state."""
from __future__ import annotations

import json
import sys
import time
from collections import Counter
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

ray = pytest.importorskip("ray")

from dlsched.backends.base import Launch  # noqa: E402
from dlsched.backends.ray import RayBackend  # noqa: E402
from dlsched.service.server import Service  # noqa: E402
from dlsched.spec import ClusterSpec, JobSpec  # noqa: E402
from tests.service.teardown import stop_service_and_jobs  # noqa: E402

CONTRACT_RUNTIME = [sys.executable, str(Path(__file__).with_name("contract_runtime.py"))]


REPO = Path(__file__).resolve().parents[2]


REAL_RUNTIME = [sys.executable, "-m", "dlsched.train.run", "--threads", "1", "--record-samples", "--ckpt-every", "3"]


def launch(tmp_path, job_id, workers, placement=None, n_samples=120, step_s=0.05, generation=1, extra=None):
    spec = JobSpec(name=f"job{job_id}", entry="contract.py:make_job", gpus=workers,
                   params={"n_samples": n_samples, "step_s": step_s, **(extra or {})})
    return Launch(job_id, spec, tmp_path / f"job{job_id}", workers, None, placement or {}, generation)


def wait_state(backend, job, want="finished", timeout=180.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        res = backend.poll(job.job_id, job.job_dir)
        if res.state != "running":
            assert res.state == want, res
            return res
        time.sleep(0.2)
    raise AssertionError(f"job {job.job_id} still running after {timeout} s")


def wait_progress(job_dir, min_steps, timeout=120.0):
    path, deadline = Path(job_dir) / "progress.jsonl", time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists() and sum(1 for line in path.read_text().splitlines() if '"step"' in line) >= min_steps:
            return
        time.sleep(0.1)
    raise AssertionError(f"{path}: fewer than {min_steps} steps in {timeout} s")


def samples_seen(job_dir):
    return [int(x) for line in (Path(job_dir) / "samples.log").read_text().splitlines() for x in line.split()]


def free_slots():
    return ray.available_resources().get("gpu_slot", 0)


def wait_free(n, timeout=60.0):   # Ray frees placement groups slowly on a busy machine
    deadline = time.monotonic() + timeout
    while free_slots() != n and time.monotonic() < deadline:
        time.sleep(0.1)
    return free_slots()


def submit(client, **spec) -> int:
    """A job of the contract entry, or of ``command`` when given; its id."""
    r = client.post("/jobs", json=spec if "command" in spec else {"entry": "contract.py:make_job", **spec})
    assert r.status_code == 201, r.text
    return r.json()["id"]


def wait_for(pred, what, timeout=180.0):
    deadline = time.monotonic() + timeout
    while not pred():
        assert time.monotonic() < deadline, f"{what}: not within {timeout} s"
        time.sleep(0.1)


def wait_job(client, job_id, pred, timeout=180.0, what=""):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        j = client.get(f"/jobs/{job_id}").json()
        if pred(j):
            return j
        assert j["state"] not in ("failed", "cancelled"), j
        time.sleep(0.2)
    raise AssertionError(f"job {job_id}: {what} not reached in {timeout} s; last {j}")


def moves(client, job_id: int) -> list[tuple]:
    """(kind, gpus, reason) of the job's running and rescaling events, in order."""
    return [(e["kind"], e["detail"].get("gpus"), e["detail"].get("reason", ""))
            for e in client.get(f"/jobs/{job_id}/events").json() if e["kind"] in ("running", "rescaling")]


def held_slots(svc, job_id: int) -> dict[str, int]:
    """node -> GPUs the backend's own books hold for the job (Ray's slots, or the local backend's)."""
    if isinstance(svc.backend, RayBackend):
        return svc.backend.placement(job_id)
    return {n: len(s) for n, s in svc.backend._slots[job_id].items()}


def audit_resumed(job_dir: Path) -> tuple[Counter, int | None]:
    """Sample ids trained into the final model across a coordinator restart (node loss).

    Workers record each step's ids just before its all-reduce. In each worker's record file the resumed
    run starts where the generation counter starts again or the step goes back; the first run's records
    past the step it was resumed from never reached the model. When the first run died right after a
    checkpoint nothing overlaps: the steps simply continue and every record counts (restored is None).
    The cut is per file: one worker may have recorded a step past the checkpoint before dying while
    another had not, so one file shows the restart and the other simply continues.
    """
    kept, restored = Counter(), None
    for path in sorted((job_dir / "samples").glob("worker-*.jsonl")):
        recs = []
        for line in path.read_text().splitlines():
            try:
                recs.append(json.loads(line))
            except ValueError:      # torn by the kill mid-write
                continue
        cut = next((i for i in range(1, len(recs)) if recs[i]["generation"] < recs[i - 1]["generation"]
                    or recs[i]["step"] <= recs[i - 1]["step"]), len(recs))
        resumed_at = recs[cut]["step"] - 1 if cut < len(recs) else None
        if resumed_at is not None:
            restored = resumed_at
        for r in recs[:cut]:
            if resumed_at is None or r["step"] <= resumed_at:
                kept.update(r["ids"])
        for r in recs[cut:]:
            kept.update(r["ids"])
    return kept, restored


@contextmanager
def fifo_service_on_ray(backend, tmp_path, runtime=REAL_RUNTIME, policy="test-fifo", **service_args):
    """A ``policy`` (test-fifo) service over the module's two Ray nodes, whose backend runs ``runtime``: (service,
    client)."""
    from tests.service import policies  # noqa: F401

    backend.runtime = runtime
    spec = ClusterSpec(nodes=[{"name": n, "gpus": 2} for n in ("n1", "n2")], policy=policy,
                       interval_s=0.3, backend="ray")
    svc = Service(spec, tmp_path / "state", port=0, workdir=REPO, backend=backend, **service_args).start()
    c = httpx.Client(base_url=svc.url, headers=svc.headers, timeout=10)
    try:
        yield svc, c
    finally:
        stop_service_and_jobs(svc)
        c.close()
        backend.runtime = CONTRACT_RUNTIME


def ray_node_ids():
    return {(n.get("Labels") or {}).get("dlsched.io/node"): n["NodeID"] for n in ray.nodes() if n["Alive"]}


def worker_hosts(job_dir: Path) -> dict[int, dict]:
    """What each worker process recorded about where it runs (``logs/worker-<id>.host.json``)."""
    return {h["worker_id"]: h for h in (json.loads(p.read_text()) for p in (job_dir / "logs").glob("worker-*.host.json"))}


def worker_nodes(job_dir: Path) -> dict[int, str]:
    """Worker (or rank) id -> the node it ran on; each must have been started by its bundle's actor, not forked
    beside the runtime."""
    names = {v: k for k, v in ray_node_ids().items()}
    hosts = worker_hosts(job_dir)
    runtime = json.loads((job_dir / "status.json").read_text())["pid"]
    assert hosts and all(h["ppid"] != runtime for h in hosts.values()), hosts
    return {w: names.get(h["ray_node_id"]) for w, h in hosts.items()}


def real_launch(tmp_path, job_id, workers, placement=None, spread=False, num_samples=96, throttle_s=0.0):
    params = {"num_samples": num_samples, "batch_size": 12, "throttle_s": throttle_s}
    if spread:
        params["placement"] = "spread"
    spec = JobSpec(name=f"real{job_id}", entry="examples/mlp.py:make_job", gpus=workers, params=params)
    return Launch(job_id, spec, tmp_path / f"job{job_id}", workers, None, placement or {}, 1)


def events(job_dir: Path, kind: str) -> list[dict]:
    path = job_dir / "progress.jsonl"
    lines = path.read_text().splitlines() if path.exists() else []
    return [r for r in map(json.loads, lines) if r.get("event") == kind]


def steps_since(job_dir: Path, generation: int) -> list[dict]:
    """The step records of ``generation`` and later ones."""
    return [r for r in map(json.loads, (job_dir / "progress.jsonl").read_text().splitlines())
            if "event" not in r and r["generation"] >= generation]
