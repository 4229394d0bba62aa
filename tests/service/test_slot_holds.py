"""A shrink the policy decides: the slots it takes from a job go to no other job until a step under the shrink's
control request proves the smaller group runs (``slot_holds``), across a service restart too."""
import json
from pathlib import Path

import httpx
import pytest

from dlsched.backends.local import LocalBackend
from dlsched.backends.recording import RecordingBackend
from dlsched.paths import REPO_ROOT
from dlsched.service.loop import LiveLoop
from dlsched.service.server import Service
from dlsched.policy.base import Allocation, JobAllocation
from dlsched.service.store import QUEUED, RESCALING, RUNNING, Store
from dlsched.spec import load_cluster_spec, load_job_spec
from tests.service.conftest import RUNTIME, cluster, job_yaml
from tests.service.teardown import stop_service_and_jobs
from tests.service.test_resize_deadline import _job, _service, _slots, _submit_late_first_step
from tests.waiting import wait_until


def _launch(jobs_dir: Path, job: int) -> dict:
    return json.loads((jobs_dir / str(job) / "launch.json").read_text())


@pytest.mark.slow
def test_a_shrinks_slot_waits_for_the_smaller_groups_first_step_across_a_service_restart(tmp_path):
    """The policy shrank b (2 -> 1 GPU) to make room for c, and c started on b's second slot in the same round, while
    b's 2-worker group still trained there: its leaving worker goes only once the smaller group has formed."""
    gate = tmp_path / "b"
    gate.mkdir()
    cluster = load_cluster_spec("nodes: [{name: n0, gpus: 2}]\npolicy: test-elastic\ninterval_s: 0.3")

    def serve() -> tuple[Service, httpx.Client]:
        svc = Service(cluster, tmp_path / "state", port=0, workdir=REPO_ROOT).start()
        return svc, httpx.Client(base_url=svc.url, headers=svc.headers, timeout=30)

    svc, c = serve()
    try:
        spec = (f"name: b\ncommand: [python, tests/service/shrunk_first_step.py, --gate, '{gate}']\n"
                f"gpus: 1\nmin_gpus: 1\nmax_gpus: 2\n")
        b = c.post("/jobs", content=spec, headers={"content-type": "application/yaml"}).json()["id"]
        status = svc.jobs_dir / str(b) / "status.json"
        wait_until(lambda: _job(c, b)["samples"] > 0 and json.loads(status.read_text())["workers"] == 2, 120,
                   "b training on 2 workers")
        x = _submit_late_first_step(c, tmp_path, "c", 1)   # the policy gives b 1, c 1: b shrinks
        wait_until(lambda: (gate / "shrunk").exists(), 120, "b's smaller group formed, its first step held")
        assert _job(c, x)["state"] == "queued", f"c was placed on the slot b's larger group trained on: " \
                                                f"b {_slots(svc.jobs_dir, b)}, c {_slots(svc.jobs_dir, x)}"
        wait_until(lambda: svc.store.get(b).releasing == {"n0": 1}, 30, "the shrink's hold stored")  # its round's write
        assert _launch(svc.jobs_dir, b)["releasing"] == {"n0": [1]}
        rounds = svc.thread.rounds
        wait_until(lambda: svc.thread.rounds >= rounds + 3, 60, "three rounds with b's first step at 1 held")
        assert _job(c, x)["state"] == "queued"

        c.close()
        svc.close()                                        # the service goes; b's coordinator stays, its step held
        svc, c = serve()
        wait_until(lambda: svc.thread.rounds >= 3, 60, "three rounds after the restart")
        assert _job(c, x)["state"] == "queued", f"c on b's held slot after the restart: {_slots(svc.jobs_dir, x)}"
        assert svc.store.get(b).releasing == {"n0": 1} and svc.backend._releasing == {b: {"n0": [1]}}

        (gate / "release").touch()                         # the smaller group's first step ends
        wait_until(lambda: _job(c, x)["state"] == "running", 120, "c started once b trains on 1")
        events = c.get("/events", params={"limit": 10000}).json()
        shrunk = [e["id"] for e in events if (e["job_id"], e["kind"]) == (b, "job_resized") and
                  e["detail"].get("workers") == 1]
        started = [e["id"] for e in events if (e["job_id"], e["kind"]) == (x, "running")]
        assert shrunk and started and shrunk[0] < started[0], events
        assert (_slots(svc.jobs_dir, b), _slots(svc.jobs_dir, x)) == ([0], [1])
        assert svc.store.get(b).releasing is None and "releasing" not in _launch(svc.jobs_dir, b)
    finally:
        c.close()
        stop_service_and_jobs(svc)


def test_a_start_beside_a_shrinks_hold_goes_ahead_and_one_onto_it_waits(tmp_path):
    """Only the starts and grows onto a node its round's shrinks leave short wait: c fits on n1, free all along."""
    store = Store(tmp_path / "s.db")
    backend = RecordingBackend()
    loop = LiveLoop(store, backend, cluster("test-elastic", (2, 2)), tmp_path)
    a = store.submit(load_job_spec(job_yaml("a", gpus=1, max_gpus=2)))
    loop.round()
    assert store.get(a).placement == {"n0": 2}
    b = store.submit(load_job_spec(job_yaml("b", gpus=2)))
    x = store.submit(load_job_spec(job_yaml("c", gpus=1)))
    backend.calls.clear()
    loop.round()         # a 2 -> 1 on n0; b placed on n0 (the slot a gives back) and n1, c on n1
    assert backend.calls == [("resize", a), ("start", x, 1)], backend.calls
    assert (store.get(x).state, store.get(x).placement, store.get(b).state) == (RUNNING, {"n1": 1}, QUEUED)
    assert store.get(a).releasing == {"n0": 1}


def test_a_shrink_the_runtime_gives_up_takes_its_held_slot_back(tmp_path):
    """The runtime gave the shrink up (``resize_abandoned``): its larger group trains on, the held slot among them.
    It is the job's again: not held beside its books (counted twice), nor booked around (a slot the node lacks)."""
    t = [0.0]
    spec = load_cluster_spec("nodes: [{name: n0, gpus: 2}]\npolicy: test-elastic")
    store, backend, loop = _service(tmp_path, spec, t)
    try:
        a = store.submit(load_job_spec(job_yaml("a", gpus=1, max_gpus=2, samples=10**6, step_s=600)), now=0.0)
        loop.round()
        x = store.submit(load_job_spec(job_yaml("c", gpus=1, samples=10**6, step_s=600)), now=0.0)
        t[0] = 10.0
        loop.round()                                       # a: 2 -> 1 for c, slot 1 held
        job = store.get(a)
        assert (job.num_gpus, job.releasing, store.get(x).state) == (1, {"n0": 1}, QUEUED)
        assert _launch(loop.jobs_dir, a)["releasing"] == {"n0": [1]}
        with open(loop.job_dir(a) / "progress.jsonl", "a") as f:   # what the torch runtime writes then
            f.write(json.dumps({"event": "resize_abandoned", "time": 11.0, "reason": "a worker of the training group "
                                "died", "control_generation": job.generation}) + "\n")
        loop.observe(20.0)
        job = store.get(a)
        assert (job.state, job.num_gpus, job.placement, job.releasing) == (RUNNING, 2, {"n0": 2}, None)
        info = _launch(loop.jobs_dir, a)
        assert info["slots"] == {"n0": [0, 1]} and "releasing" not in info, info
    finally:
        backend.stop_all()


MLP_JOB = "entry: examples/mlp.py:make_job\nbatch_size: 12\nparams: {num_samples: 24000, throttle_s: 0.05}\n"


@pytest.mark.slow
def test_a_grow_that_moves_the_job_keeps_the_slot_its_old_group_trains_on_until_the_moved_group_steps(tmp_path):
    """b (1 GPU on n0, up to 2) grows onto n1 once x leaves it: the placement moves the whole job (one node rather
    than two), so its worker on n0 leaves once the newcomers on n1 are ready. The slot it leaves went to d in the same
    round, while b's old worker still trained there (its newcomers held in preparation): two jobs on one GPU. The
    local backend maps the slots to devices (``cuda_count``): the runtime moves its workers only when they change."""
    cluster = load_cluster_spec("nodes: [{name: n0, gpus: 2, gpu_type: h100}, {name: n1, gpus: 2, gpu_type: h100}]\n"
                                "policy: test-elastic\ninterval_s: 0.3\nresize_timeout_s: 3600")
    backend = LocalBackend(cwd=REPO_ROOT, nodes=cluster.nodes, cuda_count=lambda: 4)   # n0: devices 0-1, n1: 2-3
    svc = Service(cluster, tmp_path / "state", port=0, workdir=REPO_ROOT, backend=backend).start()
    c = httpx.Client(base_url=svc.url, headers=svc.headers, timeout=30)
    gate = tmp_path / "gate"

    def submit(spec: str) -> int:
        r = c.post("/jobs", content=spec, headers={"content-type": "application/yaml"})
        assert r.status_code == 201, r.text
        job = r.json()["id"]
        wait_until(lambda: _job(c, job)["state"] == "running", 120, f"job {job} running")
        return job

    try:
        submit(f"name: a\ngpus: 1\n{MLP_JOB}")                        # n0
        x = submit(f"name: x\ngpus: 2\n{MLP_JOB}")                    # n1
        b = submit(f"name: b\ngpus: 1\nmin_gpus: 1\nmax_gpus: 2\nentry: tests/train/gated_job.py:make_job\n"
                   f"batch_size: 12\nparams: {{gate_dir: '{gate}', free: 1, hold: prepare, num_samples: 24000, "
                   f"throttle_s: 0.05}}\n")                            # n0; its resize newcomers wait at the gate
        assert svc.store.get(b).placement == {"n0": 1} and svc.store.get(x).placement == {"n1": 2}
        old = _slots(svc.jobs_dir, b)
        wait_until(lambda: _job(c, b)["samples"] > 0, 120, "b training on n0")
        c.post(f"/jobs/{x}/cancel")
        wait_until(lambda: (gate / "waiting-1").exists() and (gate / "waiting-2").exists(), 120,
                   "b's newcomers on n1 preparing, held")
        # the round's store write may trail the runtime's reading control.json (seen for shrinks under load)
        wait_until(lambda: (svc.store.get(b).placement, svc.store.get(b).releasing) == ({"n1": 2}, {"n0": 1}), 30,
                   "b's move and its hold stored")
        assert svc.backend._releasing == {b: {"n0": old}}, svc.backend._releasing
        d = c.post("/jobs", content=f"name: d\ngpus: 1\n{MLP_JOB}",
                   headers={"content-type": "application/yaml"}).json()["id"]
        rounds = svc.thread.rounds
        wait_until(lambda: svc.thread.rounds >= rounds + 5, 60, "five rounds after d's submission")
        status = json.loads((svc.jobs_dir / str(b) / "status.json").read_text())
        assert (status["workers"], status["generation"]) == (1, 0), "b's old group is still the one training"
        assert _job(c, d)["state"] == "queued", f"d was placed on b's old slot: {svc.backend._slots}"

        # test-elastic shares: it shrank b (to 1 on n1) for d meanwhile, which holds b's newcomer slot on n1 too; the
        # runtime gives the move up for it, and the shrink's newcomer on n1 waits at the gate as well
        (gate / "open").touch()                   # the newcomer gets ready: the old group stops, the new one steps
        wait_until(lambda: _job(c, d)["state"] == "running", 120, "d started once b's group left n0")
        events = c.get("/events", params={"limit": 10000}).json()
        left = [e["id"] for e in events if (e["job_id"], e["kind"]) == (b, "job_resized")]
        started = [e["id"] for e in events if (e["job_id"], e["kind"]) == (d, "running")]
        assert left and started and left[0] < started[0], events
    finally:
        c.close()
        stop_service_and_jobs(svc)


class Pinned:
    """Each job, in order, the GPUs ``where`` names for it (node -> count), where they are free in the view (else it
    waits): a policy that moves (or resizes) a job the moment its pin changes."""

    name = "pinned"
    rigid = event_driven = places_own = False
    resize_in_place, placement = True, None

    def __init__(self) -> None:
        self.where: dict[str, dict[str, int]] = {}

    def decide(self, jobs, cluster) -> Allocation:
        free = {n.name: n.num_gpus for n in cluster.nodes}
        out = {}
        for j in jobs:
            nodes = self.where.get(j.id, {})
            if nodes and all(free.get(n, 0) >= k for n, k in nodes.items()):
                out[j.id] = JobAllocation(sum(nodes.values()), nodes=nodes)
                for n, k in nodes.items():
                    free[n] -= k
        return Allocation(out)

    def validate(self, job, cluster) -> None:
        return None


def _step(loop: LiveLoop, job: int, workers: int, tag: int) -> None:
    """A step record as the torch runtime writes it: ``tag`` names the request its group was formed for."""
    with open(loop.job_dir(job) / "progress.jsonl", "a") as f:
        f.write(json.dumps({"time": 0.0, "step": 1, "epoch": 0, "samples": 32, "loss": 1.0, "samples_per_s": 1.0,
                            "workers": workers, "batch_size": 32, "generation": 0, "control_generation": tag}) + "\n")


def _pinned_service(tmp_path: Path, t: list[float]):
    """n0 of one GPU (device 0), n1 of two (1, 2), the ``Pinned`` policy, the contract runtime (no step by itself)."""
    spec = load_cluster_spec("nodes: [{name: n0, gpus: 1, gpu_type: h100}, {name: n1, gpus: 2, gpu_type: h100}]\n"
                             "policy: test-fifo\nresize_timeout_s: 100")
    store = Store(tmp_path / "s.db")
    backend = LocalBackend(runtime=RUNTIME, stop_grace_s=1.0, nodes=spec.nodes, cuda_count=lambda: 3)
    policy = Pinned()
    return store, backend, LiveLoop(store, backend, spec, tmp_path, policy=policy, clock=lambda: t[0]), policy


MOVES = {"move": 1, "moving-grow": 2}   # a's GPUs on n1 after it leaves n0: a Move, a Resize that moves it


def _moved(store: Store, loop: LiveLoop, policy: Pinned, t: list[float], gpus: int) -> tuple[int, int]:
    """a on n0, then pinned to ``gpus`` on n1 as c is pinned to n0 (one round: a move and a start onto the slot it
    leaves)."""
    a = store.submit(load_job_spec(job_yaml("a", gpus=1, max_gpus=2, samples=10**6, step_s=600)), now=0.0)
    policy.where[str(a)] = {"n0": 1}
    loop.round()
    x = store.submit(load_job_spec(job_yaml("c", gpus=1, samples=10**6, step_s=600)), now=0.0)
    policy.where.update({str(a): {"n1": gpus}, str(x): {"n0": 1}})
    t[0] = 10.0
    loop.round()
    return a, x


@pytest.mark.parametrize("gpus", MOVES.values(), ids=MOVES.keys())
def test_a_move_moves_the_processes_and_holds_the_slot_it_leaves_until_a_step_under_its_request(tmp_path, gpus):
    """The loop only rewrote a moved job's record: its processes stayed on n0 (the backend's books with them) while
    the rounds gave n0 to c. A Move is a resize now: the runtime is told its new devices, and the slot it leaves is held
    until a step of the group formed for the move: a step of the old group (at the same size, or at a smaller one than
    a grow's) is not one, though the runtime had read the move's request when it recorded it."""
    t = [0.0]
    store, backend, loop, policy = _pinned_service(tmp_path, t)
    try:
        a, x = _moved(store, loop, policy, t, gpus)
        job = store.get(a)
        assert (job.state, job.placement, job.releasing) == (RESCALING, {"n1": gpus}, {"n0": 1}), job
        assert store.get(x).state == QUEUED, "c started on the slot a's old group trains on, in the move's round"
        control = json.loads((loop.job_dir(a) / "control.json").read_text())
        assert (control["generation"], control["devices"]) == (job.generation, ["1", "2"][:gpus]), control
        assert _launch(loop.jobs_dir, a)["slots"] == {"n1": [0, 1][:gpus]} and backend._releasing == {a: {"n0": [0]}}
        _step(loop, a, 1, job.generation - 1)          # the old group's step, drained while the moved one forms
        t[0] = 11.0
        loop.round()
        assert (store.get(a).releasing, store.get(a).state, store.get(x).state) == ({"n0": 1}, RESCALING, QUEUED)
        _step(loop, a, gpus, job.generation)           # the moved group's first step
        t[0] = 12.0
        loop.round()
        assert (store.get(a).releasing, store.get(a).state, store.get(x).state) == (None, RUNNING, RUNNING)
        assert _launch(loop.jobs_dir, x)["slots"] == {"n0": [0]} and backend._releasing == {}
    finally:
        backend.stop_all()


@pytest.mark.parametrize("gpus", MOVES.values(), ids=MOVES.keys())
def test_a_move_given_up_past_its_deadline_returns_to_its_slot_and_holds_the_ones_it_moved_to(tmp_path, gpus):
    """A move's newcomer that hangs: past resize_timeout_s the job goes back to the slot its old group trains on (no
    longer held: counted once, as its own) and the target's slot is held until the runtime confirms the way back."""
    t = [0.0]
    store, backend, loop, policy = _pinned_service(tmp_path, t)
    try:
        a, x = _moved(store, loop, policy, t, gpus)
        policy.where[str(a)] = {"n0": 1}                 # the policy asks no further move of it
        t[0] = 111.0
        loop.round()
        job = store.get(a)
        assert (job.state, job.placement, job.releasing) == (RUNNING, {"n0": 1}, {"n1": gpus}), job
        info = _launch(loop.jobs_dir, a)
        assert (info["slots"], info["releasing"]) == ({"n0": [0]}, {"n1": [0, 1][:gpus]}), info
        assert store.get(x).state == QUEUED
    finally:
        backend.stop_all()
