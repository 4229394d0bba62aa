"""Lost nodes and killed actors under the service on a real local Ray cluster (``conftest.py``; a node's removal is
``Cluster.remove_node``, put back after): the real runtime resumes or trains on, every sample once per epoch."""
from __future__ import annotations

import json
import os
import signal
import time
from collections import Counter
from pathlib import Path

import httpx
import psutil
import pytest

ray = pytest.importorskip("ray")

from dlsched.service.server import Service  # noqa: E402
from dlsched.spec import ClusterSpec  # noqa: E402
from tests.backends.ray_cluster import (CONTRACT_RUNTIME, REAL_RUNTIME, REPO, audit_resumed, events,  # noqa: E402
                                        fifo_service_on_ray, steps_since, submit, wait_for, wait_job, worker_hosts)
from tests.service.teardown import stop_service_and_jobs  # noqa: E402
from tests.waiting import process_alive  # noqa: E402

pytestmark = pytest.mark.slow


def test_service_on_ray_node_loss_resumes_the_real_runtime_elsewhere_exactly_once(cluster, backend, tmp_path):
    from tests.service import policies  # noqa: F401

    c_, nodes = cluster
    backend.runtime = REAL_RUNTIME
    spec = ClusterSpec(nodes=[{"name": n, "gpus": 2} for n in ("n1", "n2")], policy="test-fifo",
                       interval_s=0.3, backend="ray")
    svc = Service(spec, tmp_path / "state", port=0, workdir=REPO, backend=backend).start()
    c = httpx.Client(base_url=svc.url, headers=svc.headers, timeout=10)
    removed = None   # a timeout before the node goes must show as itself, not as an unbound name in `finally`
    try:
        job = submit(c, name="mlp", entry="examples/mlp.py:make_job", gpus=2,
                     params={"num_samples": 480, "batch_size": 12, "throttle_s": 0.1})
        wait_job(c, job, lambda j: j["samples"] >= 12 * 7, timeout=120, what="7 steps")
        (victim,) = backend.placement(job)                     # PACK: one node holds both workers
        status = json.loads((svc.state_dir / "jobs" / str(job) / "status.json").read_text())
        victim_id = nodes[victim].node_id
        assert backend.ray_nodes.raylet_answers(victim_id)
        c_.remove_node(nodes[victim])                          # the node dies: raylet and its workers go
        removed = victim
        # Ray may call the runtime's actor dead before its health checks call the node dead (under load, twice in
        # three stress runs): the raylet's refusal is what holds the actor's death back until the node is named
        assert not backend.ray_nodes.raylet_answers(victim_id)
        wait_for(lambda: "queued" in [e["kind"] for e in c.get(f"/jobs/{job}/events").json()], "loss noticed")
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
        kept, restored = audit_resumed(svc.state_dir / "jobs" / str(job))
        assert restored is None or restored >= 3, restored     # resumed from a checkpoint, not from scratch
        assert kept == Counter(range(480)), (restored, kept - Counter(range(480)), Counter(range(480)) - kept)
    finally:
        stop_service_and_jobs(svc)
        c.close()
        backend.runtime = CONTRACT_RUNTIME
        if removed is not None:
            nodes[removed] = c_.add_node(num_cpus=1, resources={"gpu_slot": 2}, labels={"dlsched.io/node": removed})
            c_.wait_for_nodes()


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
        wait_for(lambda: not any(process_alive(p) for p in orphans), "worker 2's processes gone with its actor", timeout=30)
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


def test_service_on_ray_a_jobs_worker_whose_actor_dies_on_a_live_node_rejoins_its_bundle(backend, tmp_path):
    """A built-in job's worker's actor killed while its node lives (Ray's OOM killer, a crash): the survivors carry
    on from memory (``shrunk``), then the job grows back into the bundle it still holds, stop-free like a resize
    (``rejoined``); before, it trained on 2 workers until it ended. Never re-queued, every sample once per epoch."""
    from dlsched.train.data import committed_sample_ids

    # 4 epochs, not 2: a new actor's start under load (~30 s and more) outlasted 2 epochs' last 30 s of steps, and
    # the job rightly ended on 2 workers ("back on 3 workers: not within 120 s", twice at load 13-36); the throttle
    # sleeps, so the longer run costs the loaded suite no CPU
    with fifo_service_on_ray(backend, tmp_path) as (svc, c):
        job = submit(c, **{**MLP_3_WORKERS, "params": {**MLP_3_WORKERS["params"], "epochs": 4}})
        wait_job(c, job, lambda j: j["samples"] >= 12 * 5, timeout=120, what="5 steps")
        job_dir = svc.state_dir / "jobs" / str(job)
        host = worker_hosts(job_dir)[2]
        os.kill(host["ppid"], signal.SIGKILL)   # worker 2's actor process, on a live node
        shrunk = lambda: events(job_dir, "shrunk")  # noqa: E731
        wait_for(lambda: shrunk() and [r for r in steps_since(job_dir, shrunk()[0]["new_generation"] + 1)
                                    if r["workers"] == 3], "back on 3 workers", timeout=240)
        wait_job(c, job, lambda j: j["state"] == "finished", timeout=300, what="finished")
        kinds = [e["kind"] for e in c.get(f"/jobs/{job}/events").json()]
    assert "workers_lost" not in kinds and "job_rejoined" in kinds and kinds.count("running") == 1, kinds
    (lost,) = shrunk()
    assert lost["workers_lost"] == [2] and lost["workers"] == 2, lost
    (rejoined,) = events(job_dir, "rejoined")
    assert (rejoined["from_workers"], rejoined["workers"], rejoined["rejoins"]) == (2, 3, 1), rejoined
    assert {r["workers"] for r in steps_since(job_dir, rejoined["generation"])} == {3}
    assert not events(job_dir, "worker_lost") and not events(job_dir, "resize_abandoned")
    assert committed_sample_ids(job_dir) == Counter({i: 4 for i in range(480)})


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
