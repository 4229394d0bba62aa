"""The Ray backend alone against a real local Ray cluster (``conftest.py``): placement, resize, stop, poll and
attach with the contract runtime (``contract_runtime.py``: real processes, real files), then the real runtime's
workers started inside their bundles (join mode)."""
from __future__ import annotations

import json
import os
import signal
import sys
import time
from collections import Counter
from dataclasses import replace

import pytest

ray = pytest.importorskip("ray")

from dlsched.backends.base import Launch  # noqa: E402
from dlsched.backends.ray import STOP_GRACE_S  # noqa: E402
from dlsched.errors import UserError  # noqa: E402
from dlsched.spec import ClusterSpec, JobSpec  # noqa: E402
from tests.backends.ray_cluster import (CONTRACT_RUNTIME, REAL_RUNTIME, REPO, audit_resumed, events,  # noqa: E402
                                        free_slots, launch, ray_node_ids, real_launch, samples_seen, wait_for,
                                        wait_free, wait_progress, wait_state, worker_nodes)
from tests.waiting import process_alive  # noqa: E402

pytestmark = pytest.mark.slow


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


def test_a_runtime_stopped_from_outside_is_gone_not_failed(backend, tmp_path):
    """The coordinator's exit reads as the local backend's (``backends/coordinator_exit.py``): one stopped (SIGTERM
    from outside: it checkpointed, status ``stopped``, exit 143) is resumed. The Ray backend had its own reading,
    and failed the job ('exit code 143')."""
    job = launch(tmp_path, 14, 1, n_samples=20, step_s=0.01, extra={"stop": 1})
    backend.start(job)
    assert wait_state(backend, job, "gone").error == "coordinator ended (stopped)"
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


def test_a_nodes_hosted_workers_are_forked_from_its_server_with_torch_loaded(backend, tmp_path):
    """A worker's actor forks it from its node's server (``dlsched.ray.node_forkserver``) once that has loaded: it
    starts with torch imported (a spawned one paid ~2.5 CPU-s for it at every start), gets its exit code through its
    actor and, not its actor's child, still ends with it. The node's first starts are spawned while the server loads."""
    import psutil
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    from dlsched.paths import pythonpath_with_src
    from dlsched.ray.host import host_actor

    host_cls = host_actor(ray, num_cpus=0)
    n1 = ray_node_ids()["n1"]
    (tmp_path / "logs").mkdir()   # where a hosted worker records its host
    # a worker's environment as the Ray launcher gives it: the server loaded for it serves the file's later workers
    env = {"PYTHONPATH": pythonpath_with_src(os.environ.get("PYTHONPATH")),
           "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}

    def hosted(name, *args):
        host = host_cls.options(scheduling_strategy=NodeAffinitySchedulingStrategy(n1, soft=False)).remote()
        out = tmp_path / f"{name}.json"
        cmd = [sys.executable, "-m", "dlsched.train.launcher", "--ray-worker", "tests.backends.hosted_probe",
               "--job-dir", str(tmp_path), "--worker-id", "0", "--out", str(out), *args]
        ray.get(host.launch.remote(cmd, env, str(REPO), str(tmp_path / f"{name}.log")), timeout=120)
        return host, out

    deadline, i = time.monotonic() + 300, 0
    while True:
        host, out = hosted(f"exits{i}", "--exit", "7")
        assert ray.get(host.wait.remote(), timeout=120) == 7   # its exit code, spawned or forked
        probe = json.loads(out.read_text())
        ray.kill(host, no_restart=True)
        if probe["torch_at_start"]:
            break
        assert time.monotonic() < deadline, "no hosted start was forked within 300 s"
        i += 1
    host, out = hosted("sleeps")
    wait_for(out.exists, "the forked probe's start", timeout=120)
    probe = json.loads(out.read_text())
    assert probe["torch_at_start"] and "dlsched.backends.runtime_forkserver" in psutil.Process(probe["ppid"]).cmdline()
    assert ray.get(host.returncode.remote(), timeout=30) is None
    ray.kill(host, no_restart=True)                     # its actor gone (a lost bundle): it ends too
    wait_for(lambda: not process_alive(probe["pid"]), "the forked probe to end with its actor", timeout=60)


# ----------------------------------------------------------------------------- workers in their bundles (join mode)

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
    kept, restored = audit_resumed(job.job_dir)
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
        wait_for(lambda: [e["workers"] for e in events(job.job_dir, "resized")] == [2], "joined", timeout=90)
        backend.resize(replace(job, num_gpus=1, generation=3, placement={}))
        wait_for(lambda: [e["workers"] for e in events(job.job_dir, "resized")] == [2, 1], "left", timeout=60)
        wait_for(lambda: backend.poll(22, job.job_dir).state == "running" and free_slots() == 3, "slot released")
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
    kept, restored = audit_resumed(job.job_dir)
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
        wait_for(grown, "grow confirmed", timeout=120)
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
        wait_for(lambda: [(e["workers"], e["replaced"]) for e in events(job.job_dir, "resized")] == [(2, [1])], "moved",
              timeout=90)
        wait_for(lambda: backend.poll(23, job.job_dir).state == "running" and free_slots() == 2, "n1's slot released")
        seen = (job.job_dir / "progress.jsonl").read_text().count('"step"')
        wait_progress(job.job_dir, seen + 3)                                  # the moved group trains
    finally:
        backend.runtime = CONTRACT_RUNTIME
        backend.stop(23, job.job_dir)
    assert worker_nodes(job.job_dir) == {0: "n1", 1: "n1", 2: "n2"}
    (stopped,) = events(job.job_dir, "stopped")
    kept, restored = audit_resumed(job.job_dir)
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
