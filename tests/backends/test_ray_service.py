"""The real service (store, loop, API) over the Ray backend of a real local Ray cluster (``conftest.py``), and over
the local backend where both must behave alike: elastic resizes, restarts, fenced and unreserved starts, and the
real runtime's parameter-server, script and ensemble jobs placed in Ray bundles."""
from __future__ import annotations

import json
import os
import time
from collections import Counter
from itertools import groupby

import httpx
import pytest

ray = pytest.importorskip("ray")

from dlsched.backends.base import read_status  # noqa: E402
from dlsched.backends.ray import RayBackend  # noqa: E402
from dlsched.ray.host import NAMESPACE  # noqa: E402
from dlsched.service.server import Service  # noqa: E402
from dlsched.spec import ClusterSpec  # noqa: E402
from tests.backends.ray_cluster import (CONTRACT_RUNTIME, REAL_RUNTIME, REPO, events, fifo_service_on_ray,  # noqa: E402
                                        free_slots, held_slots, moves, ray_node_ids, samples_seen, submit, wait_for,
                                        wait_free, wait_job, worker_nodes)
from tests.service.teardown import stop_service_and_jobs  # noqa: E402
from tests.waiting import process_alive  # noqa: E402

pytestmark = pytest.mark.slow


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


def test_an_abandoned_grow_gives_back_the_gpus_reserved_for_it_and_the_job_trains_on(make_service):
    """A grow whose new worker never joins: the service returns the job to the GPUs it trains on, and the backend
    frees what it reserved for the newcomer (on Ray its slot: a leaked group would hold a GPU nobody uses)."""
    svc, c = make_service("test-elastic")
    short = submit(c, name="short", gpus=3, params={"n_samples": 240, "step_s": 0.05})   # the grower starts at 1
    a = submit(c, name="grower", gpus=1, min_gpus=1, max_gpus=2,
               params={"n_samples": 4000, "step_s": 0.05, "abandon_grows": 1})
    wait_job(c, short, lambda j: j["state"] == "finished", what="short finished")

    wait_for(lambda: any("resize abandoned" in r for _, _, r in moves(c, a)), "grow abandoned, job back to running")
    assert [m[:2] for m in moves(c, a)][:3] == [("running", 1), ("rescaling", 2), ("running", 1)], moves(c, a)
    # the retry waits resize_backoff.FIRST_S (15 s): meanwhile the backend holds the one GPU it trains on
    back = c.get(f"/jobs/{a}").json()
    assert back["num_gpus"] == 1 and held_slots(svc, a) == back["placement"], (back, held_slots(svc, a))
    if isinstance(svc.backend, RayBackend):
        wait_for(lambda: free_slots() == 3, "the abandoned grow's slot released", timeout=10)
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
    wait_for(lambda: any(e["kind"] == "reattached" for e in c2.get(f"/jobs/{a}/events").json()), "the job reattached",
          timeout=120)
    hold.unlink()
    wait_job(c2, a, lambda j: j["state"] == "finished", what="finished after restart")
    kinds = [e["kind"] for e in c2.get(f"/jobs/{a}/events").json()]
    assert "reattached" in kinds and kinds.count("running") == 1       # adopted, never restarted
    assert json.loads((job_dir / "status.json").read_text())["pid"] == pid
    assert sorted(samples_seen(job_dir)) == list(range(400))


def test_a_grow_sent_but_never_recorded_is_booked_by_the_restart_on_either_backend(make_service, tmp_path):
    """The service sent a grow (the backend booked the slots and wrote control.json) and went before its round
    recorded it (``service/lost_resize.py``): the restart re-attached the job at the size the store said while it
    trained on the grown size, and booked the grown slots free. Tested on the local backend alone before
    (tests/service/test_restart.py, a real kill); here the same lost write on the Ray backend too: the restart
    re-reads the job's slots from its folder and Ray, and records the grow."""
    from dlsched.backends.base import Launch

    svc, c = make_service("test-fifo")
    hold = tmp_path / "hold"   # held at its end: still running when the new service looks
    a = submit(c, name="grown", gpus=1, min_gpus=1, max_gpus=2, params={"n_samples": 400, "step_s": 0.05,
                                                                        "hold": str(hold)})
    wait_job(c, a, lambda j: j["state"] == "running" and j["samples"] > 0, what="running with progress")
    hold.touch()
    job = svc.store.get(a)
    svc.backend.resize(Launch(a, job.spec, svc.state_dir / "jobs" / str(a), 2, job.batch_size,
                              {next(iter(job.placement)): 2}, job.generation + 1))   # sent; never recorded
    make_service.close(svc)
    svc2, c2 = make_service("test-fifo")
    # recorded as the lost round would have: rescaling to 2 on the slots booked for it (held runtime: no step yet)
    j = wait_job(c2, a, lambda j: (j["target_gpus"] or j["num_gpus"]) == 2, what="the grow recorded", timeout=60)
    assert sum(j["placement"].values()) == 2, j
    hold.unlink()
    wait_job(c2, a, lambda j: j["state"] == "finished", what="finished")
    assert 2 in [x["num_gpus"] for x in c2.get(f"/jobs/{a}").json()["allocations"]]
    assert sorted(samples_seen(svc2.state_dir / "jobs" / str(a))) == list(range(400))


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
    wait_for(lambda: (read_status(job_dir) or {}).get("state") == outcome, f"the job {outcome} with no service")
    pid = json.loads((job_dir / "status.json").read_text())["pid"]
    wait_for(lambda: not process_alive(pid), "its coordinator exited")   # else the new service adopts it still running
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
            wait_for(lambda: [d for d in queued() if "fenced" in d], "a fenced start re-queued", 120)
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
            wait_for(lambda: "start_unreserved" in [e["kind"] for e in c.get(f"/jobs/{job}/events").json()],
                  "a timed-out start left queued", 120)
            assert c.get(f"/jobs/{job}").json()["state"] == "queued"
        finally:
            backend.ready_timeout_s = saved
            remove_placement_group(outside)
        wait_job(c, job, lambda j: j["state"] == "finished", timeout=180, what="started once the slots were free")


def test_service_on_ray_runs_a_parameter_server_job_with_its_servers_in_bundles(backend, tmp_path):
    """A PS job's server holds a slot like its workers: 1 server + 2 workers are 3 slots, more than one node
    has, so its ranks run in bundles on both nodes (children of their actors); every sample is trained once."""
    from dlsched.train.ps_runner import committed_samples

    with fifo_service_on_ray(backend, tmp_path) as (svc, c):
        job = submit(c, name="ps", entry="examples/mlp.py:make_job", gpus=3, strategy="ps", servers=1,
                     sync="ssp:1", batch_size=16, params={"num_samples": 192, "epochs": 2, "throttle_s": 0.02})
        wait_job(c, job, lambda j: j["samples"] > 0, timeout=120, what="a committed round")
        wait_for(lambda: free_slots() == 1, "3 of the 4 slots held while it trains", timeout=30)
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

        wait_for(lambda: any("resize abandoned" in r for _, _, r in moves(c, b)), "b back to running after the crash")
        assert (gate / "worker-1.crashed").exists() and "new worker 1 exited with 3" in moves(c, b)[2][2], moves(c, b)
        assert backend.placement(b) == first == c.get(f"/jobs/{b}").json()["placement"]
        wait_for(lambda: free_slots() == 3, "the crashed newcomer's slot released", timeout=10)   # before the retry
        samples = c.get(f"/jobs/{b}").json()["samples"]
        wait_job(c, b, lambda j: j["samples"] > samples, timeout=60, what="b training on in its old worker")
        wait_job(c, b, lambda j: j["state"] == "running" and j["num_gpus"] == 2, timeout=120, what="the retry")
        (gate / "end").touch()
        wait_job(c, b, lambda j: j["state"] == "finished", timeout=120, what="b finished")
    assert wait_free(4) == 4


ENSEMBLE = """name: tiny-sweep
dataset: {kind: synthetic, train: 192, val: 32}
batch_size: 32
convergence: {patience: 100, min_delta: 0.0, max_epochs: 2}
models:
  - {name: tiny4, model: "%(m)s:TinyCNN", kwargs: {width: 4}}
  - {name: strided, model: "%(m)s:StridedCNN", kwargs: {width: 4}}
  - {name: mlp, model: "%(m)s:MLPHead", kwargs: {hidden: 16}, max_epochs: 1}
  - {name: tiny2, model: "%(m)s:TinyCNN", kwargs: {width: 2}}
"""


def test_service_on_ray_runs_an_ensemble_job_over_both_nodes_to_every_members_end(backend, tmp_path):
    """4 slots, 2 on each node: a flotilla on each node, run there in the job's bundles (not every member forked beside
    the coordinator, the other node's slots idle)."""

    (tmp_path / "ens.yaml").write_text(ENSEMBLE % {"m": REPO / "examples" / "ensemble" / "models.py"})
    # the Ray node's runtime gets its own profile cache through its command line (the raylet's env is fixed)
    runtime = ["env", f"DLSCHED_PROFILE_CACHE={tmp_path / 'cache'}", *REAL_RUNTIME]
    # the ensemble YAML is job code: its folder is an allowed job directory here
    with fifo_service_on_ray(backend, tmp_path, runtime, entry_roots=(REPO, tmp_path)) as (svc, c):
        job = submit(c, name="sweep", kind="ensemble", entry="examples/ensemble/ensemble_job.py:from_yaml",
                     params={"path": str(tmp_path / "ens.yaml")}, gpus=4)
        done = wait_job(c, job, lambda j: j["state"] == "finished", timeout=300, what="every member done")
        assert set(done["ensemble"]["members"].values()) == {"stopped at max_epochs"}, done["ensemble"]
        assert set(done["ensemble"]["members"]) == {"tiny4", "strided", "mlp", "tiny2"}
        plans = [e["detail"] for e in c.get(f"/jobs/{job}/events").json() if e["kind"] == "job_flotillas"]
        assert plans and plans[0]["share"] == 4 and len(plans) >= 2      # re-formed when mlp left after 1 epoch
        ids = ray_node_ids()
        first = plans[0]["flotillas"]
        assert {f["node"] for f in first} == {ids["n1"], ids["n2"]}, first     # node-local flotillas on both nodes
        assert sum(len(f["members"]) for f in first) == 4 and not plans[0]["waiting"], plans[0]
        # each node's runner ran on its node, in a bundle's actor (not forked beside the coordinator)
        ran = worker_nodes(svc.state_dir / "jobs" / str(job))
        assert set(ran.values()) == {"n1", "n2"}, ran
        # the runtime's events feed the forecast's member model: at the first plan, every member with its cap
        from dlsched.service.fleet_status import MEMBER_WORK_EVENTS, members_left
        events = [e for e in c.get(f"/jobs/{job}/events").json() if e["kind"] in MEMBER_WORK_EVENTS]
        first = next(i for i, e in enumerate(events) if e["kind"] == "job_flotillas")
        left = {n: w for n, _, w in members_left(events[: first + 1], now=events[first]["time"])}
        assert left == {"tiny4": 2 * 192, "strided": 2 * 192, "mlp": 192, "tiny2": 2 * 192}, left   # 6 steps of 32 an epoch, none done
        placed = [a for a in done["allocations"] if a["num_gpus"]]
        assert placed and set(placed[0]["placement"]) <= {"n1", "n2"}, placed
        assert (svc.state_dir / "jobs" / str(job) / "status.json").exists()
