"""The service on a real Ray cluster of a head and 3 GPU nodes (one network namespace, IP and /tmp per node; the job folders on a
bind-mounted shared directory, given as a ``file://`` URI): a job trains across distinct IPs, survives a
node's loss (its raylet killed, then another node's link cut) by shrinking onto the surviving workers, grows
back when the nodes return, and survives losing the node its rank 0 runs on.

Bounds: a lost node is declared dead in ~3 s (tests/multinode/netns.py RAY_ENV); the survivors train again
within ``RESUME_BOUND_S`` of the kill or the cut (a cut link closes no socket: without train/peer_cut.py the
survivors would wait out gloo's 60 s timeout). Waits are generous and on observed state: a busy 2-core box
runs this.
"""
from __future__ import annotations

import json
import os
import re
import secrets
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import httpx
import pytest

from dlsched.train.data import committed_sample_ids
from tests.multinode.netns import NetnsCluster
from tests.waiting import process_alive, wait_until

REPO = Path(__file__).resolve().parents[2]
SERVE = [sys.executable, str(REPO / "tests" / "service" / "serve_for_tests.py")]
RUNTIME = f"{sys.executable} -m dlsched.train.run --threads 1 --record-samples --ckpt-every 5"
PORT = 8642              # inside node 0's own network namespace
RESUME_BOUND_S = 45.0    # node loss -> the survivors' first step (death detection + the survivors' regroup)
EPOCHS, SAMPLES = 4, 2400  # 800 steps of >= 0.1 s: enough to outlast two shrinks and two reboots under load
pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]   # the waits below bound each phase


@pytest.fixture(scope="module")
def cluster():
    # node 0: the Ray head and the service, no GPU; nodes 1-3: one GPU slot each. NetnsUnavailable fails the
    # module with its reason (never a skip)
    with NetnsCluster(num_nodes=4, slots_per_node=1, head_slots=0) as c:
        yield c


def start_service(cluster, policy: str = "test-elastic", runtime: str = RUNTIME):
    """``dlsched serve`` inside node 0, bound on its IP, its state on the shared mount; an API client for it."""
    token = secrets.token_hex(16)
    (cluster.export / "token").write_text(token)
    (cluster.export / "token").chmod(0o600)
    (cluster.export / "cluster.json").write_text(json.dumps({
        "backend": "ray", "policy": policy, "interval_s": 0.5,
        "nodes": [{"name": n.name, "gpus": 1} for n in cluster.nodes[1:]]}))
    proc = cluster.run_on(0, [*SERVE, "serve", "--cluster", str(cluster.shared / "cluster.json"),
                              "--state-dir", str(cluster.shared / "state"), "--host", cluster.head.ip,
                              "--jobs-dir", f"file://{cluster.shared / 'jobs'}",    # docs/storage.md
                              "--port", str(PORT), "--token-file", str(cluster.shared / "token"),
                              "--address", cluster.address, "--gpu-resource", "gpu_slot",
                              "--workdir", str(REPO), "--runtime", runtime], log="service", cwd=REPO)
    client = httpx.Client(base_url=f"http://{cluster.head.ip}:{PORT}", timeout=20,
                          headers={"Authorization": f"Bearer {token}"})

    def up():
        assert proc.poll() is None, f"service exited: {cluster.log_tail('service', 20)}"
        try:
            return client.get("/jobs").status_code == 200
        except httpx.HTTPError:
            return False

    wait_until(up, 120, "the service's API")
    return client


@pytest.fixture(scope="module")
def service(cluster):
    client = start_service(cluster)
    yield client
    client.close()


@pytest.fixture(autouse=True)
def whole_cluster(cluster, service):
    """Each test starts with every GPU node up: one that failed mid-fault (a raylet killed and never rebooted)
    fails there, not in the tests after it too."""
    down = [n.index for n in cluster.nodes[1:] if cluster.raylet_pid(n.index) is None]
    if down:
        reboot(cluster, service, down)
    yield


def job_dir(cluster, job_id: int) -> Path:
    return cluster.export / "jobs" / str(job_id)     # the host's view of the shared mount


def submit(client, **spec) -> int:
    r = client.post("/jobs", json={"entry": "examples/mlp.py:make_job", **spec})
    assert r.status_code == 201, r.text
    return r.json()["id"]


def progress(cluster, job_id: int) -> list[dict]:
    path = job_dir(cluster, job_id) / "progress.jsonl"
    out = []
    for line in (path.read_text().splitlines() if path.exists() else []):
        try:
            out.append(json.loads(line))
        except ValueError:
            pass
    return out


def steps(cluster, job_id: int) -> list[dict]:
    return [r for r in progress(cluster, job_id) if "event" not in r]


def events(cluster, job_id: int, kind: str) -> list[dict]:
    return [r for r in progress(cluster, job_id) if r.get("event") == kind]


def job_state(client, job_id: int) -> dict:
    j = client.get(f"/jobs/{job_id}").json()
    assert j["state"] not in ("failed", "cancelled"), (j["state"], j.get("error"), [
        (e["kind"], e.get("detail")) for e in client.get(f"/jobs/{job_id}/events").json()][-12:])
    return j


def job_story(cluster, client, job_id: int) -> str:
    """What a timed-out wait shows: the service's last events for the job, the tail of its runtime's output (a
    fenced coordinator names the folder's holder there) and which processes still run the job's coordinator."""
    kinds = [(e["kind"], str(e.get("detail") or "")[:300]) for e in client.get(f"/jobs/{job_id}/events").json()][-8:]
    try:
        out = (job_dir(cluster, job_id) / "output.log").read_text(errors="replace").splitlines()[-15:]
    except OSError:
        out = []
    ps = subprocess.run(["ps", "-eo", "pid,ppid,stat,args"], capture_output=True, text=True).stdout.splitlines()
    mine = re.compile(rf"dlsched\.train\.run .*/jobs/{job_id}( |$)")
    holders = "\n  ".join(line[:240] for line in ps if mine.search(line)) or "none"
    return f"events: {kinds}\noutput.log:\n  " + "\n  ".join(out) + f"\ncoordinator processes now:\n  {holders}"


def wait_job(cluster, client, job_id: int, pred, timeout: float, what: str):
    """``wait_until`` on the job, failing with its story (events, output, live coordinators) instead of a bare timeout."""
    try:
        return wait_until(pred, timeout, what)
    except AssertionError as e:
        raise AssertionError(f"{e}\n{job_story(cluster, client, job_id)}") from None


def worker_ips(cluster, job_id: int) -> dict[int, str]:
    """worker id -> the IP its process runs at (``logs/worker-<id>.host.json``, written by the worker)."""
    return {h["worker_id"]: h["node_ip"] for h in (json.loads(p.read_text()) for p in
                                                   (job_dir(cluster, job_id) / "logs").glob("worker-*.host.json"))}


def node_health(client) -> dict[str, str]:
    return {n["name"]: n["health"] for n in client.get("/nodes").json()["nodes"]}


def reboot(cluster, service, nodes: list[int]) -> None:
    """Power-cycles ``nodes`` (every process killed, Ray started again: each rejoins as a new Ray node), until the
    service's node table has them up."""
    for i in nodes:
        cluster.kill_node(i)
        cluster.start_ray(i)
    names = [cluster.nodes[i].name for i in nodes]
    wait_until(lambda: all(node_health(service).get(n) == "up" for n in names), 120,
               f"{names} back in the service's table")


def dlsched_nodes(cluster, client) -> str:
    """``dlsched nodes`` as an operator runs it, against the service on node 0."""
    env = {**os.environ, "DLSCHED_SERVER": str(client.base_url).rstrip("/"),
           "DLSCHED_TOKEN": client.headers["Authorization"].split()[1], "COLUMNS": "160"}
    p = subprocess.run([sys.executable, "-m", "dlsched.cli", "nodes"], capture_output=True, text=True, env=env,
                       timeout=120)
    assert p.returncode == 0, p.stderr
    return p.stdout


def test_a_users_own_script_trains_across_three_nodes_and_restarts_promptly_when_a_link_is_cut(cluster, service):
    """A ``command:`` job (dlsched.torch): each of its 3 workers runs in its bundle on its own node (its own IP),
    and gloo connects them across the namespaces. A node's cable is cut: its peers cut their sockets to it
    (train/peer_cut.py; gloo alone would wait out its 60 s timeout), their step fails, and the runtime restarts the
    group from the checkpoint on the 2 nodes left; every sample is trained once per epoch."""

    samples = 1200
    r = service.post("/jobs", json={"name": "script", "gpus": 3, "min_gpus": 1, "max_gpus": 3, "command": [
        "python", "tests/torch/user_script.py", "--samples", str(samples), "--batch", "12", "--epochs", "2",
        "--step-s", "0.05", "--ckpt-every", "10"]})
    assert r.status_code == 201, r.text
    job = r.json()["id"]
    wait_job(cluster, service, job, lambda: [r for r in steps(cluster, job) if r["step"] >= 12], 180,
             "12 steps on 3 workers")
    ips = worker_ips(cluster, job)
    assert sorted(ips.values()) == sorted(n.ip for n in cluster.nodes[1:]), ips
    cut = next(n.index for n in cluster.nodes if n.ip == ips[max(ips)])   # not rank 0, not the runtime's node
    cluster.link(cut, up=False)
    cut_at = time.time()
    try:
        lost = wait_job(cluster, service, job, lambda: events(cluster, job, "worker_lost"), 120,
                        "the restart on the nodes left")[0]
        first = wait_until(lambda: next((r for r in steps(cluster, job) if r["workers"] == 2), None),
                           RESUME_BOUND_S + 60, "a step on 2 workers")
        assert first["time"] - cut_at < RESUME_BOUND_S, first["time"] - cut_at
        assert lost["workers_lost"] == [max(ips)], lost
    finally:
        cluster.link(cut, up=True)
    wait_until(lambda: job_state(service, job)["state"] == "finished", 300, "the script job to finish")
    assert committed_sample_ids(job_dir(cluster, job)) == Counter({i: 2 for i in range(samples)})
    reboot(cluster, service, [cut])   # Ray declared it dead: it rejoins as a new node, for the tests that follow


def test_a_job_trains_across_three_nodes_and_shrinks_on_a_killed_raylet_and_a_cut_link_then_grows_back(
        cluster, service):
    job = submit(service, name="mlp3", gpus=3, min_gpus=1, max_gpus=3,
                 params={"num_samples": SAMPLES, "epochs": EPOCHS, "batch_size": 12, "throttle_s": 0.1})
    wait_job(cluster, service, job, lambda: any(r["workers"] == 3 for r in steps(cluster, job)), 180,
             "a step on 3 workers")
    ips = worker_ips(cluster, job)
    assert len(ips) == 3 and len(set(ips.values())) == 3, ips          # three hosts, three addresses
    assert set(ips.values()) == {n.ip for n in cluster.nodes[1:]}
    status = json.loads((job_dir(cluster, job) / "status.json").read_text())

    victim_ip = ips[max(ips)]                                          # not rank 0, not the coordinator's node
    victim = next(n.index for n in cluster.nodes if n.ip == victim_ip)
    before = len(steps(cluster, job))
    cluster.kill_raylet(victim)
    killed_at = time.time()
    shrunk = wait_job(cluster, service, job, lambda: events(cluster, job, "shrunk"), 120,
                      "the shrink onto the survivors")[0]
    first = wait_until(lambda: next((r for r in steps(cluster, job)[before:] if r["workers"] == 2), None),
                       RESUME_BOUND_S + 60, "a step on the 2 survivors")
    assert first["time"] - killed_at < RESUME_BOUND_S, first["time"] - killed_at
    assert shrunk["lost_steps"] == 0 and shrunk["workers"] == 2
    assert not events(cluster, job, "worker_lost")                     # no restart from the checkpoint
    assert json.loads((job_dir(cluster, job) / "status.json").read_text())["pid"] == status["pid"]
    wait_until(lambda: job_state(service, job)["num_gpus"] == 2, 60, "the service's books: 2 GPUs")
    kinds = wait_until(lambda: (k := [e["kind"] for e in service.get(f"/jobs/{job}/events").json()])
                       and "workers_lost" in k and k, 60, "the service's workers_lost event")
    assert "queued" not in kinds, kinds
    name = cluster.nodes[victim].name
    wait_until(lambda: node_health(service).get(name) == "lost", 60, "the service's node table: lost")
    assert {n["name"]: n["lost"] for n in service.get("/dashboard/api/overview").json()["nodes"]}[name]
    sinfo = dlsched_nodes(cluster, service)
    assert next(line for line in sinfo.splitlines() if name in line).split()[4] == "lost", sinfo

    # another node's cable is cut: its processes live on and close no socket
    cut = next(n.index for n in cluster.nodes if n.ip == ips[sorted(ips)[1]])   # neither rank 0 nor the victim
    before = len(steps(cluster, job))
    cluster.link(cut, up=False)
    cut_at = time.time()
    try:
        shrunk = wait_job(cluster, service, job, lambda: events(cluster, job, "shrunk")[1:], 120,
                          "the shrink onto the last survivor")[0]
        first = wait_until(lambda: next((r for r in steps(cluster, job)[before:] if r["workers"] == 1), None),
                           RESUME_BOUND_S + 60, "a step on the survivor")
        assert first["time"] - cut_at < RESUME_BOUND_S, first["time"] - cut_at
        assert shrunk["lost_steps"] == 0 and shrunk["workers"] == 1
        cut_name = cluster.nodes[cut].name
        wait_until(lambda: node_health(service).get(cut_name) == "lost", 60, "the service's node table: cut, lost")
        wait_until(lambda: job_state(service, job)["num_gpus"] == 1, 60, "the service's books: 1 GPU")
    finally:
        cluster.link(cut, up=True)
    assert not events(cluster, job, "worker_lost")
    assert json.loads((job_dir(cluster, job) / "status.json").read_text())["pid"] == status["pid"]

    # the killed node, and the cut one (Ray declared it dead: its raylet exits when it hears so)
    reboot(cluster, service, [victim, cut])
    # the job may end first on a loaded machine (two shrinks and two reboots outlast its steps): say so, not a timeout
    wait_until(lambda: [r for r in events(cluster, job, "resized") if r["workers"] == 3]
               or job_state(service, job)["state"] == "finished", 240, "grown back to 3")
    assert [r for r in events(cluster, job, "resized") if r["workers"] == 3], \
        f"the job ended ({job_state(service, job)['state']}) before it grew back to 3: give it more steps"
    wait_until(lambda: job_state(service, job)["state"] == "finished", 300, "finished")
    assert committed_sample_ids(job_dir(cluster, job)) == Counter({i: EPOCHS for i in range(SAMPLES)})


def test_losing_the_node_of_rank_0_and_the_coordinator_resumes_from_the_shared_checkpoint_exactly_once(cluster, service):
    """Rank 0 and the job's coordinator share a node (the backend pins the runtime where most slots are, the
    first one on a tie): that node's loss leaves no survivor that could regroup the others, so the service
    re-queues the job and it resumes on the other nodes from the checkpoint rank 0 wrote to the shared mount."""
    samples = 960
    job = submit(service, name="rank0", gpus=3, min_gpus=1, max_gpus=3,
                 params={"num_samples": samples, "batch_size": 12, "throttle_s": 0.1})
    wait_job(cluster, service, job, lambda: [r for r in steps(cluster, job) if r["workers"] == 3 and r["step"] >= 7],
             180, "7 steps on 3 workers (a checkpoint every 5)")
    ips = worker_ips(cluster, job)
    victim = next(n.index for n in cluster.nodes if n.ip == ips[min(ips)])
    assert victim != 0
    coordinator = json.loads((job_dir(cluster, job) / "status.json").read_text())["pid"]
    cluster.kill_raylet(victim)
    # Ray SIGKILLs the dead raylet's workers' children (the runtime's guard): the coordinator dies with its guard
    wait_job(cluster, service, job, lambda: not process_alive(coordinator), 60, "the lost node's coordinator to end")
    wait_job(cluster, service, job, lambda: "queued" in [e["kind"] for e in service.get(f"/jobs/{job}/events").json()],
             120, "the loss noticed: the job re-queued")
    wait_job(cluster, service, job, lambda: job_state(service, job)["state"] == "finished", 300, "resumed and finished")
    runs = [r["run"] for r in steps(cluster, job)]
    resumed = next(r for r in steps(cluster, job) if r["run"] != runs[0])
    assert resumed["step"] > 5, resumed                                # from the checkpoint, not from scratch
    # the product's audit, as every other exactly-once test: the resumed run's `resumed` event rolls back what the
    # lost run recorded after the checkpoint it restored. Rank 0's progress lines were no record of what committed:
    # its node took the coordinator too, and a step rank 0 checkpointed could die queued (12 samples, one step,
    # went missing from such an audit once in a full suite)
    kept = committed_sample_ids(job_dir(cluster, job))
    assert kept == Counter(range(samples)), (kept - Counter(range(samples)), Counter(range(samples)) - kept)
    assert cluster.nodes[victim].ip not in worker_ips(cluster, job).values()   # the resumed run's workers moved


def test_an_ensemble_runs_a_flotilla_on_each_of_its_nodes(cluster, service):
    """An ensemble given a slot on each of the 3 GPU nodes: its flotillas are planned node by node and each node's run
    there, in the job's bundle (train/flotilla_nodes.py), at that node's own IP: not every member forked beside the
    coordinator with the other nodes' slots idle. Every member reaches its epoch cap."""
    r = service.post("/jobs", json={"name": "sweep", "kind": "ensemble", "gpus": 3, "min_gpus": 3, "max_gpus": 3,
                                    "entry": "examples/ensemble/ensemble_job.py:from_yaml",
                                    "params": {"path": "examples/ensemble/sweep.yaml"}})
    assert r.status_code == 201, r.text
    job = r.json()["id"]
    wait_job(cluster, service, job, lambda: job_state(service, job)["state"] == "finished", 600,
             "every member of the ensemble done")
    members = job_state(service, job)["ensemble"]["members"]
    assert len(members) == 6 and set(members.values()) <= {"converged", "stopped at max_epochs"}, members
    plans = events(cluster, job, "flotillas")
    assert len({f["node"] for f in plans[0]["flotillas"]}) == 3, plans[0]     # one flotilla on each node
    # each runner's host file: runner i runs on the i-th node of the slot list in every run (plans keep its order)
    assert sorted(set(worker_ips(cluster, job).values())) == sorted(n.ip for n in cluster.nodes[1:])
