"""Ray backend against a real local Ray cluster: a head without GPUs and two fake GPU nodes
(``gpu_slot`` custom resource, named by the ``dlsched.io/node`` label). One cluster per module;
the runtime is the contract implementation in ``contract_runtime.py`` (real processes, real files)."""
from __future__ import annotations

import json
import os
import sys
import time
from collections import Counter
from pathlib import Path

import httpx
import pytest

ray = pytest.importorskip("ray")
from ray.cluster_utils import Cluster  # noqa: E402

from dlsched.backends.base import Launch  # noqa: E402
from dlsched.backends.ray import NodeLost, RayBackend  # noqa: E402
from dlsched.service.server import Service, free_port  # noqa: E402
from dlsched.spec import ClusterSpec, JobSpec  # noqa: E402

CONTRACT_RUNTIME = [sys.executable, str(Path(__file__).with_name("contract_runtime.py"))]
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def cluster():
    c = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
    nodes = {name: c.add_node(num_cpus=1, resources={"gpu_slot": 2}, labels={"dlsched.io/node": name})
             for name in ("n1", "n2", "n3")}
    c.wait_for_nodes()
    yield c, nodes
    if ray.is_initialized():
        ray.shutdown()
    c.shutdown()


@pytest.fixture(scope="module")
def backend(cluster):
    c, _ = cluster
    b = RayBackend(address=c.address, gpu_resource="gpu_slot", runtime=CONTRACT_RUNTIME, ready_timeout_s=20)
    yield b
    b.stop_all()


def launch(tmp_path, job_id, workers, placement=None, n_samples=120, step_s=0.05, generation=1, extra=None):
    spec = JobSpec(name=f"job{job_id}", entry="contract.py:make_job", gpus=workers,
                   params={"n_samples": n_samples, "step_s": step_s, **(extra or {})})
    return Launch(job_id, spec, tmp_path / f"job{job_id}", workers, None, placement or {}, generation)


def wait_state(backend, job, want="finished", timeout=60.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        res = backend.poll(job.job_id, job.job_dir)
        if res.state != "running":
            assert res.state == want, res
            return res
        time.sleep(0.2)
    raise AssertionError(f"job {job.job_id} still running after {timeout} s")


def wait_progress(job_dir, min_steps, timeout=30.0):
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


def wait_free(n, timeout=10.0):
    deadline = time.monotonic() + timeout
    while free_slots() != n and time.monotonic() < deadline:
        time.sleep(0.1)
    return free_slots()


def alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_nodes_are_the_gpu_nodes_by_label(backend):
    views = backend.nodes()
    assert [(v.name, v.num_gpus) for v in views] == [("n1", 2), ("n2", 2), ("n3", 2)]


def test_cluster_declaration_is_generated_from_the_ray_nodes(backend):
    import yaml

    from dlsched.backends.ray import cluster_spec_yaml

    spec = ClusterSpec.model_validate(yaml.safe_load(cluster_spec_yaml(backend, policy="test-fifo")))
    assert spec.backend == "ray" and [(n.name, n.gpus) for n in spec.nodes] == [("n1", 2), ("n2", 2), ("n3", 2)]


def test_job_runs_where_the_policy_placed_it_and_releases_its_gpus(backend, tmp_path):
    job = launch(tmp_path, 1, 2, {"n2": 2})
    backend.start(job)
    assert backend.placement(1) == {"n2": 2}
    assert wait_free(4) == 4                      # the two bundles hold n2's slots
    wait_state(backend, job, "finished")
    assert not backend.is_running(1)
    assert wait_free(6) == 6
    assert sorted(samples_seen(job.job_dir)) == list(range(120))
    assert json.loads((job.job_dir / "status.json").read_text())["state"] == "finished"


def test_strict_spread_puts_one_worker_per_node(backend, tmp_path):
    job = launch(tmp_path, 2, 2, extra={"placement": "spread"})
    backend.start(job)
    try:
        where = backend.placement(2)
        assert len(where) == 2 and set(where.values()) == {1}
    finally:
        backend.stop(2, job.job_dir)
    assert wait_free(6) == 6


def test_resize_is_a_new_group_and_an_elastic_control_generation(backend, tmp_path):
    job = launch(tmp_path, 3, 1, {"n1": 1}, n_samples=200)
    backend.start(job)
    wait_progress(job.job_dir, 2)
    pid_before = json.loads((job.job_dir / "status.json").read_text())["pid"]
    backend.resize(3, job.job_dir, 3, None, 2, placement={"n1": 2, "n2": 1})
    assert backend.placement(3) == {"n1": 2, "n2": 1}
    assert wait_free(3) == 3                      # old 1-bundle group released, new 3-bundle held
    control = json.loads((job.job_dir / "control.json").read_text())
    assert control["workers"] == 3 and control["generation"] == 2
    wait_state(backend, job, "finished")
    lines = [json.loads(x) for x in (job.job_dir / "progress.jsonl").read_text().splitlines()]
    assert any(x.get("event") == "resized" and x["workers"] == 3 for x in lines)
    assert json.loads((job.job_dir / "status.json").read_text())["pid"] == pid_before  # no restart
    assert sorted(samples_seen(job.job_dir)) == list(range(200))


def test_impossible_request_times_out_and_holds_nothing(backend, tmp_path):
    saved, backend.ready_timeout_s = backend.ready_timeout_s, 1.0
    try:
        with pytest.raises(TimeoutError, match="could not reserve 7"):
            backend.start(launch(tmp_path, 4, 7))
    finally:
        backend.ready_timeout_s = saved
    assert not backend.is_running(4)
    assert wait_free(6) == 6


def test_service_restart_reattaches_to_a_running_job(cluster, backend, tmp_path):
    c, _ = cluster
    job = launch(tmp_path, 5, 1, n_samples=100)
    backend.start(job)
    backend.shutdown()                            # the service goes away; the detached actor stays
    assert backend.poll(5, job.job_dir).state == "running"    # a new look finds it through launch.json
    assert backend.is_running(5)
    wait_state(backend, job, "finished")
    assert sorted(samples_seen(job.job_dir)) == list(range(100))


def test_failing_runtime_is_reported_with_its_output(backend, tmp_path):
    job = launch(tmp_path, 6, 1, n_samples=-1)    # contract runtime: a bad param makes it exit non-zero
    backend.start(job)
    res = wait_state(backend, job, "failed")
    assert "exit code" in res.error
    assert wait_free(6) == 6


def test_stop_kills_the_runtime_and_its_workers(backend, tmp_path):
    job = launch(tmp_path, 7, 2, n_samples=10_000)
    backend.start(job)
    wait_progress(job.job_dir, 1)
    status = json.loads((job.job_dir / "status.json").read_text())
    pids = [status["pid"], *status["worker_pids"]]
    assert all(alive(p) for p in pids)
    backend.stop(7, job.job_dir)
    deadline = time.monotonic() + 10
    while any(alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(alive(p) for p in pids)
    assert wait_free(6) == 6


def test_node_loss_is_reported_and_the_job_resumes_elsewhere_exactly_once(cluster, backend, tmp_path):
    c, nodes = cluster
    job = launch(tmp_path, 8, 2, {"n1": 2}, n_samples=240)
    backend.start(job)
    wait_progress(job.job_dir, 3)
    status = json.loads((job.job_dir / "status.json").read_text())
    c.remove_node(nodes["n1"])                    # the node dies: raylet and its workers go
    res = wait_state(backend, job, "gone", timeout=60)
    assert res.error == "node n1 lost"
    assert NodeLost("n1", (8,)) in backend.lost_nodes()
    assert not backend.is_running(8)
    pids = [status["pid"], *status["worker_pids"]]
    deadline = time.monotonic() + 10             # no orphan keeps writing the job dir
    while any(alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(alive(p) for p in pids)
    assert [v.name for v in backend.nodes()] == ["n2", "n3"]
    done_before = len(samples_seen(job.job_dir))
    assert 0 < done_before < 240

    again = launch(tmp_path, 8, 2, {"n1": 2}, n_samples=240, generation=2)   # the loop still believes in n1
    backend.start(again)
    assert "n1" not in backend.placement(8)       # Ray found live GPUs instead
    wait_state(backend, again, "finished")
    assert sorted(samples_seen(job.job_dir)) == list(range(240))  # each sample exactly once
    nodes["n1"] = c.add_node(num_cpus=1, resources={"gpu_slot": 2}, labels={"dlsched.io/node": "n1"})
    c.wait_for_nodes()


# ----------------------------------------------------------------------------- the service on both backends

REPO = Path(__file__).resolve().parents[2]
REAL_RUNTIME = [sys.executable, "-m", "dlsched.train.run", "--threads", "1", "--record-samples", "--ckpt-every", "3"]


@pytest.fixture(params=["local", "ray"])
def make_service(request, backend, tmp_path):
    """The real service (store, loop, API) over the local backend or the module's Ray backend."""
    made = []

    def make(policy, nodes=("n1", "n2"), interval_s=0.2):
        from tests.service import policies  # noqa: F401  (registers test-fifo / test-elastic)

        spec = ClusterSpec(nodes=[{"name": n, "gpus": 2} for n in nodes], policy=policy, interval_s=interval_s,
                           backend=request.param)
        svc = Service(spec, tmp_path / "state", port=free_port(), runtime=CONTRACT_RUNTIME, workdir=REPO,
                      backend=backend if request.param == "ray" else None).start()
        made.append(svc)
        return svc, httpx.Client(base_url=svc.url, timeout=10)

    yield make
    for svc in made:
        svc.backend.stop_all()
        svc.close()


def submit(client, **spec) -> int:
    r = client.post("/jobs", json={"entry": "contract.py:make_job", **spec})
    assert r.status_code == 201, r.text
    return r.json()["id"]


def wait_job(client, job_id, pred, timeout=60.0, what=""):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        j = client.get(f"/jobs/{job_id}").json()
        if pred(j):
            return j
        assert j["state"] not in ("failed", "cancelled"), j
        time.sleep(0.2)
    raise AssertionError(f"job {job_id}: {what} not reached in {timeout} s; last {j}")


def test_service_elastic_job_shrinks_and_grows_exactly_once(make_service):
    svc, c = make_service("test-elastic")
    a = submit(c, name="elastic", gpus=1, min_gpus=1, max_gpus=4, params={"n_samples": 1600, "step_s": 0.1})
    wait_job(c, a, lambda j: j["num_gpus"] == 4 and j["samples"] > 0, what="4 GPUs and progress")
    b = submit(c, name="rigid", gpus=2, params={"n_samples": 80, "step_s": 0.05})
    wait_job(c, b, lambda j: j["state"] == "finished", what="rigid finished")
    wait_job(c, a, lambda j: j["state"] == "finished", what="elastic finished")
    held = [x["num_gpus"] for x in c.get(f"/jobs/{a}").json()["allocations"]]
    assert held[:3] == [4, 2, 4] and held[-1] == 0
    job_dir = svc.state_dir / "jobs" / str(a)
    assert sorted(samples_seen(job_dir)) == list(range(1600))
    resized = [json.loads(x) for x in (job_dir / "progress.jsonl").read_text().splitlines() if '"resized"' in x]
    assert [r["workers"] for r in resized] == [2, 4]
    assert wait_free(6) == 6


def _audit_resumed(job_dir: Path) -> tuple[Counter, int]:
    """Sample ids trained into the final model across a coordinator restart (node loss): in each worker's
    record file the resumed run starts where the step goes back; the first run's records past the step
    it was resumed from never reached the model."""
    kept, restored = Counter(), None
    for path in sorted((job_dir / "samples").glob("worker-*.jsonl")):
        recs = []
        for line in path.read_text().splitlines():
            try:
                recs.append(json.loads(line))
            except ValueError:      # torn by the kill mid-write
                continue
        cut = next(i for i in range(1, len(recs)) if recs[i]["step"] <= recs[i - 1]["step"])
        restored = recs[cut]["step"] - 1
        for r in recs[:cut]:
            if r["step"] <= restored:
                kept.update(r["ids"])
        for r in recs[cut:]:
            kept.update(r["ids"])
    return kept, restored


def test_service_on_ray_node_loss_resumes_the_real_runtime_elsewhere_exactly_once(cluster, backend, tmp_path):
    from tests.service import policies  # noqa: F401

    c_, nodes = cluster
    backend.runtime = REAL_RUNTIME
    spec = ClusterSpec(nodes=[{"name": n, "gpus": 2} for n in ("n1", "n2", "n3")], policy="test-fifo",
                       interval_s=0.3, backend="ray")
    svc = Service(spec, tmp_path / "state", port=free_port(), workdir=REPO, backend=backend).start()
    c = httpx.Client(base_url=svc.url, timeout=10)
    try:
        job = submit(c, name="mlp", entry="examples/mlp.py:make_job", gpus=2,
                     params={"num_samples": 480, "batch_size": 12, "throttle_s": 0.1})
        wait_job(c, job, lambda j: j["samples"] >= 12 * 7, timeout=120, what="7 steps")
        (victim,) = backend.placement(job)                     # PACK: one node holds both workers
        c_.remove_node(nodes[victim])
        wait_job(c, job, lambda j: j["state"] == "finished", timeout=150, what="resumed and finished")
        events = [e["kind"] for e in c.get(f"/jobs/{job}/events").json()]
        assert events.count("running") == 2 and "queued" in events     # gone -> re-queued -> restarted
        placements = [a["placement"] for a in c.get(f"/jobs/{job}").json()["allocations"] if a["num_gpus"]]
        assert len(placements) == 2
        kept, restored = _audit_resumed(svc.state_dir / "jobs" / str(job))
        assert restored >= 3                                   # resumed from a checkpoint, not from scratch
        assert kept == Counter(range(480))                     # every sample exactly once
    finally:
        backend.stop_all()
        svc.close()
        c.close()
        backend.runtime = CONTRACT_RUNTIME
        nodes[victim] = c_.add_node(num_cpus=1, resources={"gpu_slot": 2}, labels={"dlsched.io/node": victim})
        c_.wait_for_nodes()
