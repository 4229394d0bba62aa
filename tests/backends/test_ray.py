"""Ray backend against a real local Ray cluster: a head without GPUs and two fake GPU nodes
(``gpu_slot`` custom resource, named by the ``dlsched.io/node`` label). One cluster per module;
the runtime is the contract implementation in ``contract_runtime.py`` (real processes, real files)."""
from __future__ import annotations

import json
import os
import signal
import sys
import time
from collections import Counter
from contextlib import contextmanager
from dataclasses import replace
from itertools import groupby
from pathlib import Path

import httpx
import psutil
import pytest

ray = pytest.importorskip("ray")
from ray.cluster_utils import Cluster  # noqa: E402

from dlsched.backends.base import Launch, read_status  # noqa: E402
from dlsched.backends.ray import STOP_GRACE_S, RayBackend  # noqa: E402
from dlsched.ray.host import NAMESPACE  # noqa: E402
from dlsched.service.server import Service  # noqa: E402
from tests.service.teardown import stop_service_and_jobs  # noqa: E402
from tests.waiting import process_alive  # noqa: E402
from dlsched.errors import UserError  # noqa: E402
from dlsched.spec import ClusterSpec, JobSpec  # noqa: E402

CONTRACT_RUNTIME = [sys.executable, str(Path(__file__).with_name("contract_runtime.py"))]
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def cluster():
    # fast failure detection: a removed node is declared dead within ~1 s instead of ~30 s
    fast = {"health_check_initial_delay_ms": 0, "health_check_period_ms": 250, "health_check_timeout_ms": 250,
            "health_check_failure_threshold": 3}
    c = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False, "_system_config": fast})
    nodes = {name: c.add_node(num_cpus=1, resources={"gpu_slot": 2}, labels={"dlsched.io/node": name})
             for name in ("n1", "n2")}
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


def test_nodes_are_the_gpu_nodes_by_label(backend):
    views = backend.nodes()
    assert [(v.name, v.num_gpus) for v in views] == [("n1", 2), ("n2", 2)]


def test_cluster_declaration_is_generated_from_the_ray_nodes(backend):
    import yaml

    from dlsched.backends.ray import cluster_spec_yaml

    spec = ClusterSpec.model_validate(yaml.safe_load(cluster_spec_yaml(backend, policy="test-fifo")))
    assert spec.backend == "ray" and [(n.name, n.gpus) for n in spec.nodes] == [("n1", 2), ("n2", 2)]


def test_a_cluster_declaration_for_a_resource_no_node_has_names_the_ones_they_have(backend):
    """Seen: cluster-spec on docs/ray.md §5's cluster (nodes with gpu_slot) said only "no node with resource 'GPU'"."""
    import dataclasses

    from dlsched.backends.ray import cluster_spec_yaml
    from dlsched.backends.ray_nodes import RayNodes

    @dataclasses.dataclass
    class Asking:   # the real cluster, seen through another --gpu-resource
        ray_nodes: RayNodes
        gpu_resource: str = "GPU"

        def nodes(self):
            return self.ray_nodes.views()

    with pytest.raises(UserError) as e:
        cluster_spec_yaml(Asking(RayNodes(ray, "GPU")))
    assert str(e.value) == ("the Ray cluster has no node with resource 'GPU'; its nodes have gpu_slot: --gpu-resource "
                            "names the one a worker needs")


def test_job_runs_where_the_policy_placed_it_and_releases_its_gpus(backend, tmp_path):
    job = launch(tmp_path, 1, 2, {"n2": 2})
    backend.start(job)
    assert backend.placement(1) == {"n2": 2}
    assert wait_free(2) == 2                      # the two bundles hold n2's slots
    wait_state(backend, job, "finished")
    assert not backend.is_running(1)
    assert wait_free(4) == 4
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
    assert wait_free(4) == 4


def test_resize_is_a_new_group_and_an_elastic_control_generation(backend, tmp_path):
    job = launch(tmp_path, 3, 1, {"n1": 1}, n_samples=600)      # ~4 s: long enough to see the resize
    backend.start(job)
    wait_progress(job.job_dir, 2)
    pid_before = json.loads((job.job_dir / "status.json").read_text())["pid"]
    backend.resize(replace(job, num_gpus=3, generation=2, placement={"n1": 2, "n2": 1}))
    assert backend.placement(3) == {"n1": 2, "n2": 1}
    assert wait_free(1) == 1                      # old 1-bundle group released, new 3-bundle held
    control = json.loads((job.job_dir / "control.json").read_text())
    assert control["workers"] == 3 and control["generation"] == 2
    wait_state(backend, job, "finished")
    lines = [json.loads(x) for x in (job.job_dir / "progress.jsonl").read_text().splitlines()]
    assert any(x.get("event") == "resized" and x["workers"] == 3 for x in lines)
    assert json.loads((job.job_dir / "status.json").read_text())["pid"] == pid_before  # no restart
    assert sorted(samples_seen(job.job_dir)) == list(range(600))


def test_resize_without_a_node_map_keeps_the_job_where_it_is(backend, tmp_path):
    job = launch(tmp_path, 9, 4, {"n1": 2, "n2": 2}, n_samples=20_000)
    backend.start(job)
    try:
        backend.resize(replace(job, num_gpus=3, generation=2, placement={}))            # shrink: the loop's rule gives back on n2
        assert backend.placement(9) == {"n1": 2, "n2": 1}
        backend.resize(replace(job, num_gpus=1, generation=3, placement={}))
        assert backend.placement(9) == {"n1": 1}
        backend.resize(replace(job, num_gpus=3, generation=4, placement={}))            # grow: n1 kept, Ray picks the other two
        where = backend.placement(9)
        assert where["n1"] >= 1 and sum(where.values()) == 3
    finally:
        backend.stop(9, job.job_dir)
    assert wait_free(4) == 4


def test_pinned_nodes_that_are_busy_fall_back_to_where_ray_has_gpus(backend, tmp_path):
    first = launch(tmp_path, 10, 2, {"n1": 2}, n_samples=20_000)
    backend.start(first)
    second = launch(tmp_path, 11, 2, {"n1": 2}, n_samples=20_000)    # a stale view: n1 is taken
    try:
        backend.start(second)
        assert backend.placement(11) == {"n2": 2}
    finally:
        backend.stop(10, first.job_dir)
        backend.stop(11, second.job_dir)
    assert wait_free(4) == 4


def test_a_placement_on_a_dead_node_with_no_free_slots_left_fails_at_once(backend, tmp_path):
    """A round's view read before Ray declared a node dead places onto it: where the live nodes lack the slots, the
    reservation waited out ``ready_timeout_s`` (60 s in a service) inside the round for slots the view made up."""
    first = launch(tmp_path, 12, 4, {"n1": 2, "n2": 2}, n_samples=20_000)
    backend.start(first)
    assert wait_free(0) == 0      # Ray's resource view has every slot taken (it lags the reservation)
    saved, backend.ready_timeout_s = backend.ready_timeout_s, 600.0
    t0 = time.monotonic()
    try:
        with pytest.raises(TimeoutError, match=r"names dead node\(s\) \['gone'\] and Ray has 0 x gpu_slot free"):
            backend.start(launch(tmp_path, 13, 1, {"gone": 1}))
        assert time.monotonic() - t0 < 60        # not the 600 s wait
        assert not backend.is_running(13)
    finally:
        backend.ready_timeout_s = saved
        backend.stop(12, first.job_dir)
    assert wait_free(4) == 4


def test_impossible_request_times_out_and_holds_nothing(backend, tmp_path):
    saved, backend.ready_timeout_s = backend.ready_timeout_s, 1.0
    try:
        with pytest.raises(TimeoutError, match="could not reserve 5"):
            backend.start(launch(tmp_path, 4, 5))
    finally:
        backend.ready_timeout_s = saved
    assert not backend.is_running(4)
    assert wait_free(4) == 4


def test_attach_after_a_service_restart_finds_the_detached_actor(cluster, backend, tmp_path):
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
    assert wait_free(4) == 4


def test_stop_kills_the_runtime_and_its_workers(backend, tmp_path):
    job = launch(tmp_path, 7, 2, n_samples=10_000)
    backend.start(job)
    wait_progress(job.job_dir, 1)
    status = json.loads((job.job_dir / "status.json").read_text())
    pids = [status["pid"], *status["worker_pids"]]
    assert all(process_alive(p) for p in pids)
    began = time.monotonic()
    backend.stop(7, job.job_dir)
    # done once the runtime has checkpointed and gone; it took the whole grace while the guard's zombie kept its
    # process group alive to killpg
    assert time.monotonic() - began < STOP_GRACE_S
    deadline = time.monotonic() + 10
    while any(process_alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(process_alive(p) for p in pids)
    assert wait_free(4) == 4


def test_a_poll_the_runtimes_actor_is_too_busy_to_answer_leaves_the_job_running(backend, tmp_path):
    """A loaded node can leave the 10 s ``returncode`` call unanswered: the job is running, not dead. Both threads
    of its host actor are held here (two ``wait`` calls, as a busy actor's would be), so the poll's call queues and
    times out for real; before, any exception stopped the job and re-queued it as if its actor had died."""
    job = launch(tmp_path, 12, 1, n_samples=10_000)
    backend.start(job)
    wait_progress(job.job_dir, 1)
    runner = backend._jobs[12].runner
    busy = [runner.wait.remote(), runner.wait.remote()]
    res = backend.poll(12, job.job_dir)
    assert res.state == "running" and backend.is_running(12), res
    pid = json.loads((job.job_dir / "status.json").read_text())["pid"]
    assert process_alive(pid)                                  # the poll stopped nothing
    os.kill(pid, signal.SIGKILL)                       # frees the actor's threads: its process exits
    assert ray.get(busy, timeout=30) == [-signal.SIGKILL] * 2
    assert wait_state(backend, job, "gone").error == f"coordinator killed by signal {signal.SIGKILL}"
    assert wait_free(4) == 4


def test_a_runtime_actor_killed_on_a_live_node_is_gone_at_once_as_the_actors_death(backend, tmp_path):
    """Only a node whose raylet no longer answers holds an actor's death back (for Ray's node-death detection
    time): the actor's own death on a live node re-queues the job on the first poll that sees it."""
    job = launch(tmp_path, 13, 1, n_samples=10_000)
    backend.start(job)
    wait_progress(job.job_dir, 1)
    runner = backend._jobs[13].runner
    ray.kill(runner, no_restart=True)   # asynchronous: a call sent just after may still be answered
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            ray.get(runner.returncode.remote(), timeout=30)
        except ray.exceptions.RayActorError:   # Ray knows it is dead
            break
    else:
        raise AssertionError("the killed actor still answers")
    res = backend.poll(13, job.job_dir)
    assert (res.state, res.error) == ("gone", "Ray actor of the job died"), res
    assert wait_free(4) == 4


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
        svc = Service(spec, tmp_path / "state", port=0, runtime=CONTRACT_RUNTIME, workdir=REPO,
                      backend=backend if request.param == "ray" else None).start()
        made.append(svc)
        return svc, httpx.Client(base_url=svc.url, headers=svc.headers, timeout=10)

    def close(svc):                               # as a killed service would: jobs keep running
        made.remove(svc)
        svc.close()

    make.close = close
    yield make
    for svc in made:
        stop_service_and_jobs(svc)


def submit(client, **spec) -> int:
    """A job of the contract entry, or of ``command`` when given; its id."""
    r = client.post("/jobs", json=spec if "command" in spec else {"entry": "contract.py:make_job", **spec})
    assert r.status_code == 201, r.text
    return r.json()["id"]


def _wait(pred, what, timeout=180.0):
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


def test_service_elastic_job_shrinks_and_grows_exactly_once(make_service):
    svc, c = make_service("test-elastic")
    a = submit(c, name="elastic", gpus=1, min_gpus=1, max_gpus=4, params={"n_samples": 1600, "step_s": 0.1})
    wait_job(c, a, lambda j: j["num_gpus"] == 4 and j["samples"] > 0, what="4 GPUs and progress")
    b = submit(c, name="rigid", gpus=2, params={"n_samples": 80, "step_s": 0.05})
    wait_job(c, b, lambda j: j["state"] == "finished", what="rigid finished")
    wait_job(c, a, lambda j: j["state"] == "finished", what="elastic finished")
    # the GPU counts it held, one entry per change (a re-placement at the same count records the count again)
    held = [k for k, _ in groupby(x["num_gpus"] for x in c.get(f"/jobs/{a}").json()["allocations"])]
    job_dir = svc.state_dir / "jobs" / str(a)
    assert sorted(samples_seen(job_dir)) == list(range(1600))
    resized = [json.loads(x) for x in (job_dir / "progress.jsonl").read_text().splitlines() if '"resized"' in x]
    # shrunk for the rigid job, then grown back; on a busy machine it may finish before the regrow is decided
    # (held 4, 2, 0) or after it is decided but before the runtime applied it (held 4, 2, 4, 0; resized to 2 only)
    workers = [r["workers"] for r in resized]
    assert held in ([4, 2, 0], [4, 2, 4, 0]), held
    assert workers == [2] or (held[2] == 4 and workers == [2, 4]), (held, workers)
    assert wait_free(4) == 4


def moves(client, job_id: int) -> list[tuple]:
    """(kind, gpus, reason) of the job's running and rescaling events, in order."""
    return [(e["kind"], e["detail"].get("gpus"), e["detail"].get("reason", ""))
            for e in client.get(f"/jobs/{job_id}/events").json() if e["kind"] in ("running", "rescaling")]


def held_slots(svc, job_id: int) -> dict[str, int]:
    """node -> GPUs the backend's own books hold for the job (Ray's slots, or the local backend's)."""
    if isinstance(svc.backend, RayBackend):
        return svc.backend.placement(job_id)
    return {n: len(s) for n, s in svc.backend._slots[job_id].items()}


def test_an_abandoned_grow_gives_back_the_gpus_reserved_for_it_and_the_job_trains_on(make_service):
    """A grow whose new worker never joins: the service returns the job to the GPUs it trains on, and the backend
    frees what it reserved for the newcomer (on Ray its slot: a leaked group would hold a GPU nobody uses)."""
    svc, c = make_service("test-elastic")
    short = submit(c, name="short", gpus=3, params={"n_samples": 240, "step_s": 0.05})   # the grower starts at 1
    a = submit(c, name="grower", gpus=1, min_gpus=1, max_gpus=2,
               params={"n_samples": 4000, "step_s": 0.05, "abandon_grows": 1})
    wait_job(c, short, lambda j: j["state"] == "finished", what="short finished")

    _wait(lambda: any("resize abandoned" in r for _, _, r in moves(c, a)), "grow abandoned, job back to running")
    assert [m[:2] for m in moves(c, a)][:3] == [("running", 1), ("rescaling", 2), ("running", 1)], moves(c, a)
    # the retry waits resize_backoff.FIRST_S (15 s): meanwhile the backend holds the one GPU it trains on
    back = c.get(f"/jobs/{a}").json()
    assert back["num_gpus"] == 1 and held_slots(svc, a) == back["placement"], (back, held_slots(svc, a))
    if isinstance(svc.backend, RayBackend):
        _wait(lambda: free_slots() == 3, "the abandoned grow's slot released", timeout=10)
    wait_job(c, a, lambda j: j["state"] == "finished", what="grower finished")
    assert [m[:2] for m in moves(c, a)][3:] == [("rescaling", 2), ("running", None)], moves(c, a)   # the retry joined
    job_dir = svc.state_dir / "jobs" / str(a)
    assert sorted(samples_seen(job_dir)) == list(range(4000))
    assert wait_free(4) == 4


def test_service_restart_reattaches_the_running_job(make_service, tmp_path):
    svc, c = make_service("test-fifo")
    hold = tmp_path / "hold"   # the job's 25 steps take ~1 s: held, it still runs when the new service looks
    a = submit(c, name="long", gpus=2, params={"n_samples": 400, "step_s": 0.05, "hold": str(hold)})
    wait_job(c, a, lambda j: j["state"] == "running" and j["samples"] > 0, what="running with progress")
    hold.touch()
    job_dir = svc.state_dir / "jobs" / str(a)
    pid = json.loads((job_dir / "status.json").read_text())["pid"]
    make_service.close(svc)
    svc2, c2 = make_service("test-fifo")                   # same state dir, fresh service and loop
    _wait(lambda: any(e["kind"] == "reattached" for e in c2.get(f"/jobs/{a}/events").json()), "the job reattached",
          timeout=120)
    hold.unlink()
    wait_job(c2, a, lambda j: j["state"] == "finished", what="finished after restart")
    kinds = [e["kind"] for e in c2.get(f"/jobs/{a}/events").json()]
    assert "reattached" in kinds and kinds.count("running") == 1       # adopted, never restarted
    assert json.loads((job_dir / "status.json").read_text())["pid"] == pid
    assert sorted(samples_seen(job_dir)) == list(range(400))


@pytest.mark.parametrize("outcome", ["finished", "failed"])
def test_a_job_that_ended_while_no_service_ran_is_recorded_once_and_frees_its_slots(make_service, request, tmp_path,
                                                                                    outcome):
    """On Ray its detached placement groups outlived the service: the restarted one read the job finished from its
    folder and never removed them, so its 2 slots stayed reserved for good (the next test found 2 of 4 free); a job
    that had failed read as gone there, and was run again."""
    svc, c = make_service("test-fifo")
    hold = tmp_path / "hold"
    hold.touch()
    a = submit(c, name="short", gpus=2, params={"n_samples": 64, "step_s": 0.05, "hold": str(hold),
                                                 "fail": int(outcome == "failed")})
    wait_job(c, a, lambda j: j["state"] == "running", what="running")
    job_dir = svc.state_dir / "jobs" / str(a)
    make_service.close(svc)
    hold.unlink()
    # status.json may not exist yet: under load the runtime can start after the service saw its runner start
    _wait(lambda: (read_status(job_dir) or {}).get("state") == outcome, f"the job {outcome} with no service")
    pid = json.loads((job_dir / "status.json").read_text())["pid"]
    _wait(lambda: not process_alive(pid), "its coordinator exited")   # else the new service adopts it still running
    if request.node.callspec.params["make_service"] == "ray" and outcome == "failed":   # its runner actor gone too
        ray.kill(ray.get_actor(json.loads((job_dir / "launch.json").read_text())["actor"], namespace=NAMESPACE), no_restart=True)
    svc2, c2 = make_service("test-fifo")
    deadline = time.monotonic() + 120
    while c2.get(f"/jobs/{a}").json()["state"] != outcome:
        assert time.monotonic() < deadline, c2.get(f"/jobs/{a}/events").json()
        time.sleep(0.2)
    kinds = [e["kind"] for e in c2.get(f"/jobs/{a}/events").json()]
    assert kinds.count(outcome) == 1 and kinds.count("running") == 1, kinds   # recorded once, never run again
    assert sorted(samples_seen(job_dir)) == list(range(64))
    if request.node.callspec.params["make_service"] == "ray":
        assert wait_free(4) == 4

def test_a_fenced_runtime_is_gone_not_failed(backend, tmp_path):
    """A coordinator that finds its job folder held (a lost node's coordinator its guard has not ended yet) exits
    75 and touches nothing: the job is to be resumed, not failed."""
    from dlsched.train import fence

    backend.runtime = REAL_RUNTIME
    job = Launch(8, JobSpec(name="mlp", entry=f"{REPO}/examples/mlp.py:make_job", gpus=1,
                            params={"num_samples": 96}), tmp_path / "job8", 1, None, {}, 1)
    held = fence.acquire(job.job_dir)
    try:
        backend.start(job)
        res = wait_state(backend, job, "gone")
        assert "fenced" in res.error and res.fenced and not list(job.job_dir.glob("progress.jsonl"))
        assert f"held by pid {os.getpid()}" in res.error, res.error   # the holder is named: here, this test
    finally:
        os.close(held)
        backend.runtime = CONTRACT_RUNTIME
    assert wait_free(4) == 4



def test_a_fenced_start_is_retried_without_spending_the_jobs_coordinator_losses(backend, tmp_path):
    """A lost node's coordinator may hold the job folder a while after the job was re-queued (its guard ends it
    once Ray tells its actor; slow under load). A fenced start is no coordinator loss: the job waits it out, then
    trains, and its budget of resumes after lost coordinators (MAX_COORDINATOR_LOSSES) is not spent on it."""
    from dlsched.train import fence

    with fifo_service_on_ray(backend, tmp_path) as (svc, c):
        held = fence.acquire(svc.state_dir / "jobs" / "1")        # the first job's folder, held as a lost node's would be
        try:
            job = submit(c, name="mlp", entry="examples/mlp.py:make_job", gpus=1, params={"num_samples": 96})
            assert job == 1
            queued = lambda: [e["detail"] for e in c.get(f"/jobs/{job}/events").json() if e["kind"] == "queued"]  # noqa: E731
            _wait(lambda: [d for d in queued() if "fenced" in d], "a fenced start re-queued", 120)
        finally:
            os.close(held)
        wait_job(c, job, lambda j: j["state"] == "finished", timeout=180, what="trained once the folder was free")
        assert not [d for d in queued() if "coordinator_lost" in d], queued()



def test_a_start_whose_reservation_times_out_is_re_queued_and_starts_once_the_slots_are_free(backend, tmp_path):
    """The round's view had the GPUs and the cluster did not (a node dying as the job was placed; here slots held
    outside dlsched): the start's reservation times out and the job waits in the queue, not failed."""
    from ray.util.placement_group import placement_group, remove_placement_group

    with fifo_service_on_ray(backend, tmp_path) as (svc, c):
        outside = placement_group([{"gpu_slot": 1}] * 3, strategy="SPREAD")
        assert ray.get(outside.ready(), timeout=60)
        saved, backend.ready_timeout_s = backend.ready_timeout_s, 2.0
        try:
            job = submit(c, name="mlp", entry="examples/mlp.py:make_job", gpus=3, params={"num_samples": 96})
            _wait(lambda: "start_unreserved" in [e["kind"] for e in c.get(f"/jobs/{job}/events").json()],
                  "a timed-out start left queued", 120)
            assert c.get(f"/jobs/{job}").json()["state"] == "queued"
        finally:
            backend.ready_timeout_s = saved
            remove_placement_group(outside)
        wait_job(c, job, lambda j: j["state"] == "finished", timeout=180, what="started once the slots were free")


def _audit_resumed(job_dir: Path) -> tuple[Counter, int | None]:
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


def test_service_on_ray_node_loss_resumes_the_real_runtime_elsewhere_exactly_once(cluster, backend, tmp_path):
    from tests.service import policies  # noqa: F401

    c_, nodes = cluster
    backend.runtime = REAL_RUNTIME
    spec = ClusterSpec(nodes=[{"name": n, "gpus": 2} for n in ("n1", "n2")], policy="test-fifo",
                       interval_s=0.3, backend="ray")
    svc = Service(spec, tmp_path / "state", port=0, workdir=REPO, backend=backend).start()
    c = httpx.Client(base_url=svc.url, headers=svc.headers, timeout=10)
    try:
        job = submit(c, name="mlp", entry="examples/mlp.py:make_job", gpus=2,
                     params={"num_samples": 480, "batch_size": 12, "throttle_s": 0.1})
        wait_job(c, job, lambda j: j["samples"] >= 12 * 7, timeout=120, what="7 steps")
        (victim,) = backend.placement(job)                     # PACK: one node holds both workers
        status = json.loads((svc.state_dir / "jobs" / str(job) / "status.json").read_text())
        victim_id = nodes[victim].node_id
        assert backend.ray_nodes.raylet_answers(victim_id)
        c_.remove_node(nodes[victim])                          # the node dies: raylet and its workers go
        # Ray may call the runtime's actor dead before its health checks call the node dead (under load, twice in
        # three stress runs): the raylet's refusal is what holds the actor's death back until the node is named
        assert not backend.ray_nodes.raylet_answers(victim_id)
        _wait(lambda: "queued" in [e["kind"] for e in c.get(f"/jobs/{job}/events").json()], "loss noticed")
        requeued = [e for e in c.get(f"/jobs/{job}/events").json() if e["kind"] == "queued"][-1]
        assert f"node {victim} lost" in json.dumps(requeued["detail"]), requeued   # the loss names its node
        pids = [status["pid"], *status["worker_pids"]]         # no orphan keeps writing the job dir
        deadline = time.monotonic() + 10
        while any(process_alive(p) for p in pids) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not [p for p in pids if process_alive(p)], [psutil.Process(p).cmdline() for p in pids if process_alive(p)]
        wait_job(c, job, lambda j: j["state"] == "finished", timeout=150, what="resumed and finished")
        events = [(e["kind"], e["detail"]) for e in c.get(f"/jobs/{job}/events").json()]
        kinds = [k for k, _ in events]
        story = [(k, str(d)[:240]) for k, d in events if k != "job_checkpoint"]
        assert kinds.count("running") == 2 and "queued" in kinds, story   # gone -> re-queued -> restarted
        kept, restored = _audit_resumed(svc.state_dir / "jobs" / str(job))
        assert restored is None or restored >= 3, restored     # resumed from a checkpoint, not from scratch
        assert kept == Counter(range(480)), (restored, kept - Counter(range(480)), Counter(range(480)) - kept)
    finally:
        stop_service_and_jobs(svc)
        c.close()
        backend.runtime = CONTRACT_RUNTIME
        nodes[victim] = c_.add_node(num_cpus=1, resources={"gpu_slot": 2}, labels={"dlsched.io/node": victim})
        c_.wait_for_nodes()


# ----------------------------------------------------------------------------- workers in their bundles (join mode)

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


def test_strict_spread_job_runs_one_worker_inside_each_nodes_bundle(backend, tmp_path):
    backend.runtime = REAL_RUNTIME
    job = real_launch(tmp_path, 21, 2, spread=True)
    try:
        backend.start(job)
        assert sorted(backend.placement(21).values()) == [1, 1]
        wait_state(backend, job, "finished", timeout=120)
    finally:
        backend.runtime = CONTRACT_RUNTIME
        backend.stop(21, job.job_dir)
    assert sorted(worker_nodes(job.job_dir).values()) == ["n1", "n2"]
    kept, restored = _audit_resumed(job.job_dir)
    assert restored is None and kept == Counter(range(96))
    assert not events(job.job_dir, "worker_lost")
    assert wait_free(4) == 4


def test_resize_joins_a_worker_on_the_other_node_and_lets_it_leave(backend, tmp_path):
    """1 -> 2 -> 1 workers: the joining worker runs on n2, the first one trains on; then a graceful stop.
    The job is long (it must outlast two worker start-ups on a loaded machine); it is stopped, not finished."""
    backend.runtime = REAL_RUNTIME
    job = real_launch(tmp_path, 22, 1, {"n1": 1}, num_samples=12_000, throttle_s=0.05)
    try:
        backend.start(job)
        wait_progress(job.job_dir, 2, timeout=60)
        pid = json.loads((job.job_dir / "status.json").read_text())["pid"]
        backend.resize(replace(job, num_gpus=2, generation=2, placement={"n1": 1, "n2": 1}))
        assert backend.placement(22) == {"n1": 1, "n2": 1}
        _wait(lambda: [e["workers"] for e in events(job.job_dir, "resized")] == [2], "joined", timeout=90)
        backend.resize(replace(job, num_gpus=1, generation=3, placement={}))
        _wait(lambda: [e["workers"] for e in events(job.job_dir, "resized")] == [2, 1], "left", timeout=60)
        _wait(lambda: backend.poll(22, job.job_dir).state == "running" and free_slots() == 3, "slot released")
        assert backend.placement(22) == {"n1": 1}
        seen = (job.job_dir / "progress.jsonl").read_text().count('"step"')
        wait_progress(job.job_dir, seen + 3)                                  # trains on alone
    finally:
        backend.runtime = CONTRACT_RUNTIME
        backend.stop(22, job.job_dir)
    assert worker_nodes(job.job_dir) == {0: "n1", 1: "n2"}
    status = json.loads((job.job_dir / "status.json").read_text())
    assert status["state"] == "stopped" and status["pid"] == pid        # never restarted, stopped gracefully
    assert not events(job.job_dir, "worker_lost")
    (stopped,) = events(job.job_dir, "stopped")
    kept, restored = _audit_resumed(job.job_dir)
    assert restored is None and max(kept.values()) == 1 and sum(kept.values()) == 12 * stopped["step"]
    assert wait_free(4) == 4


def test_the_service_books_a_shrink_after_a_grow_across_nodes_on_the_worker_ray_keeps(backend, tmp_path):
    """A job on the node that sorts last, grown onto the other, then shrunk: Ray keeps the runtime's first worker.
    The round asked for the node that sorts first (the store had sorted the node map by name), booked it, and the
    node the kept worker trains on looked free once the shrink was confirmed."""
    from dlsched.service.loop import LiveLoop
    from dlsched.service.store import RUNNING, Store
    from dlsched.spec import load_cluster_spec
    from tests.service.policies import Sized

    store = Store(tmp_path / "s.db")
    loop = LiveLoop(store, backend, load_cluster_spec("nodes: [{name: n1, gpus: 2}, {name: n2, gpus: 2}]\n"
                                                      "policy: test-sized"), tmp_path)
    ids = [store.submit(JobSpec(name=f"j{i}", entry="contract.py:make_job", gpus=1, max_gpus=2,
                                params={"n_samples": 10**6, "step_s": 0.05})) for i in range(4)]
    Sized.gpus = dict.fromkeys(ids, 1)
    try:
        loop.round()
        at = {j: store.get(j).placement for j in ids}
        first, last = sorted({n for p in at.values() for n in p})
        a = next(j for j in ids if at[j] == {last: 1})
        gone = next(j for j in ids if at[j] == {first: 1})
        Sized.gpus = {**{j: 1 for j in ids if j != gone}, a: 2}
        store.request_cancel(gone)
        def grown():
            loop.round()
            return (store.get(a).state, store.get(a).num_gpus) == (RUNNING, 2)
        _wait(grown, "grow confirmed", timeout=120)
        assert list(store.get(a).placement.items()) == list(backend.placement(a).items()) == [(last, 1), (first, 1)]
        Sized.gpus[a] = 1
        loop.round()
        job = store.get(a)
        assert job.placement == backend.placement(a) == {last: 1}, store.events(a)[-1]
        assert job.releasing == {first: 1}
    finally:
        for j in ids:
            backend.stop(j, loop.job_dir(j))
    assert wait_free(4) == 4


def test_a_move_at_the_same_count_replaces_the_worker_on_the_node_it_leaves(backend, tmp_path):
    """2 workers on n1 -> one on n1, one on n2: a new bundle on n2, the worker in n1's second bundle leaves
    (its bundle is given back once it has), the first trains on; every sample once."""
    backend.runtime = REAL_RUNTIME
    job = real_launch(tmp_path, 23, 2, {"n1": 2}, num_samples=12_000, throttle_s=0.05)
    try:
        backend.start(job)
        wait_progress(job.job_dir, 2, timeout=60)
        backend.resize(replace(job, num_gpus=2, generation=2, placement={"n1": 1, "n2": 1}))
        assert backend.placement(23) == {"n1": 1, "n2": 1}
        _wait(lambda: [(e["workers"], e["replaced"]) for e in events(job.job_dir, "resized")] == [(2, [1])], "moved",
              timeout=90)
        _wait(lambda: backend.poll(23, job.job_dir).state == "running" and free_slots() == 2, "n1's slot released")
        seen = (job.job_dir / "progress.jsonl").read_text().count('"step"')
        wait_progress(job.job_dir, seen + 3)                                  # the moved group trains
    finally:
        backend.runtime = CONTRACT_RUNTIME
        backend.stop(23, job.job_dir)
    assert worker_nodes(job.job_dir) == {0: "n1", 1: "n1", 2: "n2"}
    (stopped,) = events(job.job_dir, "stopped")
    kept, restored = _audit_resumed(job.job_dir)
    assert restored is None and max(kept.values()) == 1 and sum(kept.values()) == 12 * stopped["step"]
    assert wait_free(4) == 4


def test_standby_workers_are_refused_under_ray_with_one_line(backend, tmp_path):
    backend.runtime = [*REAL_RUNTIME, "--standby", "1"]
    job = real_launch(tmp_path, 23, 1)
    try:
        backend.start(job)
        res = wait_state(backend, job, "failed", timeout=60)
    finally:
        backend.runtime = CONTRACT_RUNTIME
        backend.stop(23, job.job_dir)
    assert "ray-slots.json: no free bundle for another worker" in res.error and "--standby" in res.error
    assert wait_free(4) == 4


# ----------------------------------------------------------------------------- parameter server on Ray

def test_service_on_ray_runs_a_parameter_server_job_with_its_servers_in_bundles(backend, tmp_path):
    """A PS job's server holds a slot like its workers: 1 server + 2 workers are 3 slots, more than one node
    has, so its ranks run in bundles on both nodes (children of their actors); every sample is trained once."""
    from dlsched.train.ps_runner import committed_samples

    with fifo_service_on_ray(backend, tmp_path) as (svc, c):
        job = submit(c, name="ps", entry="examples/mlp.py:make_job", gpus=3, strategy="ps", servers=1,
                     sync="ssp:1", batch_size=16, params={"num_samples": 192, "epochs": 2, "throttle_s": 0.02})
        wait_job(c, job, lambda j: j["samples"] > 0, timeout=120, what="a committed round")
        _wait(lambda: free_slots() == 1, "3 of the 4 slots held while it trains", timeout=30)
        assert sum(backend.placement(job).values()) == 3
        wait_job(c, job, lambda j: j["state"] == "finished", timeout=180, what="finished")
        final = c.get(f"/jobs/{job}").json()
    job_dir = svc.state_dir / "jobs" / str(job)
    assert final["samples"] == 384 and [a["num_gpus"] for a in final["allocations"]][0] == 3, final
    nodes = worker_nodes(job_dir)          # keyed by rank: 0 is the server, 1 and 2 the workers
    assert sorted(nodes) == [0, 1, 2] and set(nodes.values()) == {"n1", "n2"}, nodes
    seen = committed_samples(job_dir)
    assert set(seen) == set(range(192)) and set(seen.values()) == {2}
    assert wait_free(4) == 4


# ----------------------------------------------------------------------------- a user's own script under Ray

def test_service_on_ray_runs_a_command_job_and_trains_every_sample_once(backend, tmp_path):
    """A bring-your-own-loop job (``command:``, dlsched.torch): its runtime runs in the Ray actor and its
    2 script workers train every sample once per epoch (the runtime's sample records)."""
    from dlsched.train.data import committed_sample_ids

    with fifo_service_on_ray(backend, tmp_path) as (svc, c):
        job = submit(c, name="script", gpus=2, command=[
            "python", "tests/torch/user_script.py", "--samples", "96", "--batch", "8", "--epochs", "2"])
        wait_job(c, job, lambda j: j["samples"] > 0, timeout=120, what="a committed step")
        assert sum(backend.placement(job).values()) == 2            # its runtime holds both slots in Ray
        final = wait_job(c, job, lambda j: j["state"] == "finished", timeout=180, what="finished")
    job_dir = svc.state_dir / "jobs" / str(job)
    assert committed_sample_ids(job_dir) == Counter({i: 2 for i in range(96)})
    assert final["samples"] == 192 and events(job_dir, "finished")
    assert any(r.get("grad_noise") for r in map(json.loads, (job_dir / "progress.jsonl").read_text().splitlines()))
    assert wait_free(4) == 4


def test_a_command_jobs_workers_run_inside_their_bundles_on_both_nodes(backend, tmp_path):
    """A dlsched.torch script placed on n1 and n2: each worker is started by its bundle's actor on its node
    (not forked beside the runtime), and the two train every sample once per epoch across the nodes."""
    from dlsched.train.data import committed_sample_ids

    backend.runtime = REAL_RUNTIME
    spec = JobSpec(name="script", gpus=2, command=["python", "tests/torch/user_script.py", "--samples", "96",
                                                    "--batch", "8", "--epochs", "2"])
    job = Launch(24, spec, tmp_path / "job24", 2, None, {"n1": 1, "n2": 1}, 1)
    try:
        backend.start(job)
        wait_state(backend, job, "finished", timeout=180)
    finally:
        backend.runtime = CONTRACT_RUNTIME
        backend.stop(24, job.job_dir)
    assert worker_nodes(job.job_dir) == {0: "n1", 1: "n2"}
    assert committed_sample_ids(job.job_dir) == Counter({i: 2 for i in range(96)})
    assert wait_free(4) == 4


def test_service_on_ray_gives_back_the_slot_of_a_grow_whose_new_worker_crashed(backend, tmp_path):
    """The real runtime's path: the newcomer's Ray actor exits 3 in start-up (tests/service/crashing_newcomer.py),
    the runtime abandons the grow, the service returns the job to its one slot and Ray releases the other; the job
    trains on in its old worker and finishes once the retry joins and its gate opens."""
    gate, hog_gate = tmp_path / "gate", tmp_path / "hog"
    gate.mkdir()
    hog_gate.mkdir()
    with fifo_service_on_ray(backend, tmp_path, policy="test-elastic") as (svc, c):
        script = ["python", "tests/service/crashing_newcomer.py", "--gate"]
        hog = submit(c, name="hog", gpus=3, command=[*script, str(hog_gate), "--crash", "0"])
        wait_job(c, hog, lambda j: j["state"] == "running", timeout=120, what="the hog holding 3 slots")
        b = submit(c, name="b", gpus=1, min_gpus=1, max_gpus=2, command=[*script, str(gate)])
        wait_job(c, b, lambda j: j["samples"] > 0, timeout=120, what="b training on 1 slot")
        first = dict(backend.placement(b))
        c.post(f"/jobs/{hog}/cancel")

        _wait(lambda: any("resize abandoned" in r for _, _, r in moves(c, b)), "b back to running after the crash")
        assert (gate / "worker-1.crashed").exists() and "new worker 1 exited with 3" in moves(c, b)[2][2], moves(c, b)
        assert backend.placement(b) == first == c.get(f"/jobs/{b}").json()["placement"]
        _wait(lambda: free_slots() == 3, "the crashed newcomer's slot released", timeout=10)   # before the retry
        samples = c.get(f"/jobs/{b}").json()["samples"]
        wait_job(c, b, lambda j: j["samples"] > samples, timeout=60, what="b training on in its old worker")
        wait_job(c, b, lambda j: j["state"] == "running" and j["num_gpus"] == 2, timeout=120, what="the retry")
        (gate / "end").touch()
        wait_job(c, b, lambda j: j["state"] == "finished", timeout=120, what="b finished")
    assert wait_free(4) == 4


# ----------------------------------------------------------------------------- an ensemble job under Ray

ENSEMBLE = """name: tiny-sweep
dataset: {kind: synthetic, train: 192, val: 32}
batch_size: 32
convergence: {patience: 100, min_delta: 0.0, max_epochs: 2}
models:
  - {name: tiny4, model: "%(m)s:TinyCNN", kwargs: {width: 4}}
  - {name: strided, model: "%(m)s:StridedCNN", kwargs: {width: 4}}
  - {name: mlp, model: "%(m)s:MLPHead", kwargs: {hidden: 16}, max_epochs: 1}
"""


def test_service_on_ray_runs_an_ensemble_job_on_a_ray_node_to_every_members_end(backend, tmp_path):

    (tmp_path / "ens.yaml").write_text(ENSEMBLE % {"m": REPO / "examples" / "ensemble" / "models.py"})
    # the Ray node's runtime gets its own profile cache through its command line (the raylet's env is fixed)
    runtime = ["env", f"DLSCHED_PROFILE_CACHE={tmp_path / 'cache'}", *REAL_RUNTIME]
    # the ensemble YAML is job code: its folder is an allowed job directory here
    with fifo_service_on_ray(backend, tmp_path, runtime, entry_roots=(REPO, tmp_path)) as (svc, c):
        job = submit(c, name="sweep", kind="ensemble", entry="examples/ensemble/ensemble_job.py:from_yaml",
                     params={"path": str(tmp_path / "ens.yaml")}, gpus=2)
        done = wait_job(c, job, lambda j: j["state"] == "finished", timeout=300, what="every member done")
        assert set(done["ensemble"]["members"].values()) == {"stopped at max_epochs"}, done["ensemble"]
        assert set(done["ensemble"]["members"]) == {"tiny4", "strided", "mlp"}
        plans = [e["detail"] for e in c.get(f"/jobs/{job}/events").json() if e["kind"] == "job_flotillas"]
        assert plans and plans[0]["share"] == 2 and len(plans) >= 2      # re-formed when mlp left after 1 epoch
        # the runtime's events feed the forecast's member model: at the first plan, every member with its cap
        from dlsched.service.fleet_status import MEMBER_WORK_EVENTS, members_left
        events = [e for e in c.get(f"/jobs/{job}/events").json() if e["kind"] in MEMBER_WORK_EVENTS]
        first = next(i for i, e in enumerate(events) if e["kind"] == "job_flotillas")
        left = {n: w for n, _, w in members_left(events[: first + 1], now=events[first]["time"])}
        assert left == {"tiny4": 2 * 192, "strided": 2 * 192, "mlp": 192}, left   # 6 steps of 32 an epoch, none done
        placed = [a for a in done["allocations"] if a["num_gpus"]]
        assert placed and set(placed[0]["placement"]) <= {"n1", "n2"}, placed
        assert (svc.state_dir / "jobs" / str(job) / "status.json").exists()


def run_losing_the_lone_workers_node(cluster, backend, tmp_path, **job_spec) -> tuple[Path, list[str]]:
    """A 3-slot job placed 2 + 1 whose lone worker's node (not the runtime's) is removed after 5 steps; waits for
    the finish and puts the node back. Returns the job's folder and the service's event kinds."""
    c_, nodes = cluster
    victim = None
    with fifo_service_on_ray(backend, tmp_path) as (svc, c):
        try:
            job = submit(c, **job_spec)
            wait_job(c, job, lambda j: j["samples"] >= 12 * 5, timeout=120, what="5 steps")
            (victim,) = [n for n, k in backend.placement(job).items() if k == 1]
            c_.remove_node(nodes[victim])
            wait_job(c, job, lambda j: j["state"] == "finished", timeout=240, what="finished")
            kinds = [e["kind"] for e in c.get(f"/jobs/{job}/events").json()]
        finally:
            if victim is not None:
                nodes[victim] = c_.add_node(num_cpus=1, resources={"gpu_slot": 2}, labels={"dlsched.io/node": victim})
                c_.wait_for_nodes()
    return svc.state_dir / "jobs" / str(job), kinds


SCRIPT_3_WORKERS = ["python", "tests/torch/user_script.py", "--samples", "480", "--batch", "12", "--epochs", "2",
                    "--step-s", "0.05"]


def test_service_on_ray_a_script_job_losing_a_workers_node_trains_on_and_finishes_every_sample_once(cluster, backend,
                                                                                                   tmp_path):
    """A dlsched.torch job on 3 slots (2 on one node, 1 on the other): the node with the lone worker (not the
    runtime's) dies; its peers' collective fails, and the runtime restarts the group from the checkpoint in the 2
    bundles left (not 3: the lost one is never reused); the job finishes, every sample once per epoch."""
    from dlsched.train.data import committed_sample_ids

    job_dir, kinds = run_losing_the_lone_workers_node(cluster, backend, tmp_path, name="script", gpus=3,
                                                      command=SCRIPT_3_WORKERS)
    assert "workers_lost" in kinds and kinds.count("running") == 1, kinds   # trained on: never re-queued
    (lost,) = events(job_dir, "worker_lost")   # the script's survivors restart from the last checkpoint, 2 of them
    assert lost["restored_step"] > 0 and lost["workers_lost"] == [2], lost
    assert committed_sample_ids(job_dir) == Counter({i: 2 for i in range(480)})


def test_service_on_ray_a_script_job_whose_workers_actor_dies_on_a_live_node_restarts_every_worker(cluster, backend,
                                                                                                 tmp_path):
    """A worker's actor killed while its node lives (Ray's OOM killer kills the actor's process; a crash): its bundle is
    still the job's, so the restart from the checkpoint starts 3 workers again, the third in that bundle; before, the
    bundle was taken for lost with a node and the job trained on 2 until it ended."""
    from dlsched.train.data import committed_sample_ids

    with fifo_service_on_ray(backend, tmp_path) as (svc, c):
        job = submit(c, name="script", gpus=3, command=SCRIPT_3_WORKERS)
        wait_job(c, job, lambda j: j["samples"] >= 12 * 5, timeout=120, what="5 steps")
        job_dir = svc.state_dir / "jobs" / str(job)
        host = worker_hosts(job_dir)[2]
        orphans = [host["pid"], *(p.pid for p in psutil.Process(host["pid"]).children())]   # with the user's script
        os.kill(host["ppid"], signal.SIGKILL)   # worker 2's actor process, on a live node
        _wait(lambda: not any(process_alive(p) for p in orphans), "worker 2's processes gone with its actor", timeout=30)
        wait_job(c, job, lambda j: j["state"] == "finished", timeout=240, what="finished")
        kinds = [e["kind"] for e in c.get(f"/jobs/{job}/events").json()]
    assert "workers_lost" not in kinds and kinds.count("running") == 1, kinds   # the books never shrank
    (lost,) = events(job_dir, "worker_lost")
    assert lost["workers_lost"] == [2], lost
    steps = [r for r in map(json.loads, (job_dir / "progress.jsonl").read_text().splitlines())
             if "event" not in r and r["generation"] >= lost["new_generation"]]
    assert steps and {r["workers"] for r in steps} == {3}, sorted({r["workers"] for r in steps})
    assert committed_sample_ids(job_dir) == Counter({i: 2 for i in range(480)})


MLP_3_WORKERS = {"name": "mlp", "entry": "examples/mlp.py:make_job", "gpus": 3,
                 "params": {"num_samples": 480, "batch_size": 12, "epochs": 2, "throttle_s": 0.4}}


def steps_since(job_dir: Path, generation: int) -> list[dict]:
    """The step records of ``generation`` and later ones."""
    return [r for r in map(json.loads, (job_dir / "progress.jsonl").read_text().splitlines())
            if "event" not in r and r["generation"] >= generation]


def test_service_on_ray_a_jobs_worker_whose_actor_dies_on_a_live_node_rejoins_its_bundle(backend, tmp_path):
    """A built-in job's worker's actor killed while its node lives (Ray's OOM killer, a crash): the survivors carry
    on from memory (``shrunk``), then the job grows back into the bundle it still holds, stop-free like a resize
    (``rejoined``); before, it trained on 2 workers until it ended. Never re-queued, every sample once per epoch."""
    from dlsched.train.data import committed_sample_ids

    with fifo_service_on_ray(backend, tmp_path) as (svc, c):
        job = submit(c, **MLP_3_WORKERS)
        wait_job(c, job, lambda j: j["samples"] >= 12 * 5, timeout=120, what="5 steps")
        job_dir = svc.state_dir / "jobs" / str(job)
        host = worker_hosts(job_dir)[2]
        os.kill(host["ppid"], signal.SIGKILL)   # worker 2's actor process, on a live node
        shrunk = lambda: events(job_dir, "shrunk")  # noqa: E731
        _wait(lambda: shrunk() and [r for r in steps_since(job_dir, shrunk()[0]["new_generation"] + 1)
                                    if r["workers"] == 3], "back on 3 workers", timeout=120)
        wait_job(c, job, lambda j: j["state"] == "finished", timeout=240, what="finished")
        kinds = [e["kind"] for e in c.get(f"/jobs/{job}/events").json()]
    assert "workers_lost" not in kinds and "job_rejoined" in kinds and kinds.count("running") == 1, kinds
    (lost,) = shrunk()
    assert lost["workers_lost"] == [2] and lost["workers"] == 2, lost
    (rejoined,) = events(job_dir, "rejoined")
    assert (rejoined["from_workers"], rejoined["workers"], rejoined["rejoins"]) == (2, 3, 1), rejoined
    assert {r["workers"] for r in steps_since(job_dir, rejoined["generation"])} == {3}
    assert not events(job_dir, "worker_lost") and not events(job_dir, "resize_abandoned")
    assert committed_sample_ids(job_dir) == Counter({i: 2 for i in range(480)})


def test_service_on_ray_a_jobs_worker_lost_with_its_node_shrinks_the_books_and_never_rejoins(cluster, backend,
                                                                                           tmp_path):
    """The same job's lone worker lost with its node: its bundle went with the node, so the survivors carry on from
    memory, the service's books shrink to 2 (``workers_lost``) and the job never tries to grow back into it."""
    from dlsched.train.data import committed_sample_ids

    job_dir, kinds = run_losing_the_lone_workers_node(cluster, backend, tmp_path, **MLP_3_WORKERS)
    assert "workers_lost" in kinds and kinds.count("running") == 1, kinds   # trained on: never re-queued
    (lost,) = events(job_dir, "shrunk")
    assert lost["workers_lost"] == [2] and lost["workers"] == 2, lost
    assert not events(job_dir, "rejoined") and not events(job_dir, "worker_lost")
    assert {r["workers"] for r in steps_since(job_dir, lost["new_generation"])} == {2}
    assert committed_sample_ids(job_dir) == Counter({i: 2 for i in range(480)})


def test_a_bundle_on_a_lost_node_or_removed_before_the_slot_list_says_so_takes_no_worker(cluster, backend, tmp_path):
    """A slot whose node Ray no longer has is lost (no room, its newcomer revoked) even when no worker's death was
    seen there: the runtime killed it itself once its peers lost it. And the backend removes a lost node's placement
    group before it rewrites ray-slots.json: a worker started in between finds no group by that name. That is no
    free slot (a rejoin gives up, the job trains on), not a crash."""
    from types import SimpleNamespace

    from dlsched.train import launcher as launcher_mod

    live = next(n["NodeID"] for n in ray.nodes() if n["Alive"])
    slots = {"generation": 2, "resources": {"CPU": 1, "gpu_slot": 1},
             "slots": [{"group": "dlsched-removed-group", "bundle": 0, "node": live},
                       {"group": "dlsched-lost-node-group", "bundle": 0, "node": "f" * 56}]}
    (tmp_path / launcher_mod.SLOTS_FILE).write_text(json.dumps(slots))
    try:
        ray_launcher = launcher_mod.RayLauncher(tmp_path, cluster[0].address)
        assert ray_launcher.room(2) == 1
        newcomers = {0: SimpleNamespace(slot="dlsched-removed-group"), 1: SimpleNamespace(slot="dlsched-lost-node-group")}
        assert ray_launcher.revoked(newcomers) == [1]
        with pytest.raises(launcher_mod.NoFreeSlot, match="bundle dlsched-removed-group is gone"):
            ray_launcher.start(["--worker-id", "0"], tmp_path / "worker-0.log", "")
    finally:   # RayLauncher empties the forkserver's preload; this process's later local workers want torch in it
        launcher_mod._FORKSERVER.set_forkserver_preload(["dlsched.train.worker"])
    assert not (tmp_path / launcher_mod.IN_USE_FILE).exists()   # no slot marked in use
