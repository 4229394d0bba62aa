"""A grow given up past ``resize_timeout_s``: its slots go to no other job until the runtime trains at the smaller
size again, and its clock is the store's (a restarted service does not start it over)."""
import json
from pathlib import Path

import pytest

from dlsched.backends.local import LocalBackend
from dlsched.service.loop import LiveLoop
from dlsched.service.store import RESCALING, RUNNING, Store
from dlsched.spec import load_cluster_spec, load_job_spec
from tests.service.conftest import RUNTIME, job_yaml
from tests.service.test_script_job import growing_script_job
from tests.waiting import wait_until


def _job(c, job_id: int) -> dict:
    return c.get(f"/jobs/{job_id}").json()


def _submit_late_first_step(c, tmp_path: Path, name: str, gpus: int) -> int:
    """A job of ``late_first_step.py`` that holds no step (``--late 0``) under its own gate folder; its id."""
    (tmp_path / name).mkdir()
    spec = (f"name: {name}\ncommand: [python, tests/service/late_first_step.py, --gate, '{tmp_path / name}', "
            f"--late, '0']\ngpus: {gpus}\n")
    r = c.post("/jobs", content=spec, headers={"content-type": "application/yaml"})
    assert r.status_code == 201, r.text
    return r.json()["id"]


@pytest.mark.slow
def test_a_grow_given_up_after_its_larger_group_formed_keeps_its_slots_from_other_jobs_until_the_job_shrinks_back(
        tmp_path):
    """The timeout fired after the runtime had formed the larger group but before its first step there: the job's
    books went back to 1 GPU at once, and a job submitted then started on the slot the grown group still trained on."""
    with growing_script_job(tmp_path, "late_first_step.py", "resize_timeout_s: 3600") as (svc, c, b, gate):
        def job(j: int) -> dict:
            return _job(c, j)

        status = svc.jobs_dir / str(b) / "status.json"
        wait_until(lambda: (gate / "worker-1.joined").exists(), 120, "b's grown group formed, its first step held")
        # the coordinator's status.json may trail the newcomer's joining by a moment (seen under load)
        wait_until(lambda: json.loads(status.read_text())["workers"] == 2, 60, "b's status.json at 2 workers")
        assert job(b)["state"] == "rescaling"
        # shortened only now (as in the hanging newcomer's test): under load the group may take long to form
        svc.loop.deadline.timeout_s = 1
        back = wait_until(lambda: [e for e in c.get(f"/jobs/{b}/events").json() if e["kind"] == "running" and
                                   e["detail"].get("from") == "rescaling"], 60, "b given back at the timeout")
        d = back[0]["detail"]
        assert d["gpus"] == 1 and "resize_timeout_s=1 s" in d["reason"] and d["releasing"] == {"n0": 1}, d
        x = _submit_late_first_step(c, tmp_path, "c", 1)
        rounds = svc.thread.rounds
        wait_until(lambda: svc.thread.rounds >= rounds + 5, 60, "five rounds after c's submission")
        assert json.loads(status.read_text())["workers"] == 2, "b's larger group is still the one training"
        assert job(x)["state"] == "queued", f"c was placed on a slot b still trains on: {svc.backend._slots}"
        (gate / "release").touch()   # the first step at 2 ends; the runtime then shrinks back to 1
        wait_until(lambda: job(x)["state"] == "running", 120, "c started once b trains on 1 again")
        events = c.get("/events", params={"limit": 10000}).json()
        shrunk = [e["id"] for e in events if (e["job_id"], e["kind"]) == (b, "job_resized") and
                  e["detail"].get("workers") == 1]
        started = [e["id"] for e in events if (e["job_id"], e["kind"]) == (x, "running")]
        assert shrunk and started and shrunk[0] < started[0], events
        assert svc.backend._slots[b] == {"n0": [1]} and svc.backend._slots[x] == {"n0": [0]}, svc.backend._slots
        assert svc.store.get(b).releasing is None


def _slots(jobs_dir: Path, job: int) -> list[int]:
    """The slot numbers the local backend booked for ``job`` on node n0 (its launch.json, the books it keeps)."""
    return json.loads((jobs_dir / str(job) / "launch.json").read_text())["slots"].get("n0", [])


@pytest.mark.slow
def test_a_grow_given_up_keeps_the_very_slot_its_grown_group_trains_on_from_a_job_started_beside_it(tmp_path):
    """The hold was a count per node, and the backend's books went back to the job's old slot at the give-back: on a
    node with free slots beyond the held one, the next job was given the lowest free slots, the one the grown group
    still trained on among them (two jobs on one GPU)."""
    with growing_script_job(tmp_path, "late_first_step.py", "resize_timeout_s: 3600", slots=4) as (svc, c, b, gate):
        def job(j: int) -> dict:
            return _job(c, j)

        def submit(name: str, gpus: int) -> int:
            return _submit_late_first_step(c, tmp_path, name, gpus)

        status = svc.jobs_dir / str(b) / "status.json"
        wait_until(lambda: (gate / "worker-1.joined").exists(), 120, "b's grown group formed, its first step held")
        # the coordinator's status.json may trail the newcomer's joining by a moment (seen under load)
        wait_until(lambda: json.loads(status.read_text())["workers"] == 2, 60, "b's status.json at 2 workers")
        grown = _slots(svc.jobs_dir, b)        # a had slots 0-2, b slot 3: its newcomer took a's first one
        assert len(grown) == 2, grown
        svc.loop.deadline.timeout_s = 1
        wait_until(lambda: job(b)["state"] == "running" and job(b)["num_gpus"] == 1, 60, "b given back at the timeout")
        newcomer = set(grown) - set(_slots(svc.jobs_dir, b))
        assert len(newcomer) == 1 and svc.store.get(b).releasing == {"n0": 1}, (grown, _slots(svc.jobs_dir, b))
        x = submit("c", 2)   # the view has 2 free (4 - b's 1 - the 1 held): c fits beside the hold
        wait_until(lambda: job(x)["state"] == "running", 60, "c started beside b's hold")
        assert json.loads(status.read_text())["workers"] == 2, "b's larger group is still the one training"
        assert not set(_slots(svc.jobs_dir, x)) & newcomer, \
            f"c was given slot {sorted(newcomer)}, which b's grown group trains on: {_slots(svc.jobs_dir, x)}"
        y = submit("d", 1)   # nothing free but the held slot: d waits for it
        (gate / "release").touch()   # the first step at 2 ends; the runtime then shrinks back to 1
        wait_until(lambda: job(y)["state"] == "running", 120, "d started once b trains on 1 again")
        assert svc.store.get(b).releasing is None
        assert _slots(svc.jobs_dir, y) == sorted(newcomer), "the released slot goes to the next job"
        assert "releasing" not in json.loads((svc.jobs_dir / str(b) / "launch.json").read_text())


def _service(tmp_path: Path, spec, t: list[float]):
    """A service's store, local backend and loop on ``tmp_path`` with the clock ``t[0]``; again after a restart."""
    store = Store(tmp_path / "s.db")
    backend = LocalBackend(runtime=RUNTIME, stop_grace_s=1.0)
    return store, backend, LiveLoop(store, backend, spec, tmp_path, clock=lambda: t[0])


def _grown_onto_a_cancelled_job(store: Store, loop: LiveLoop, t: list[float], slots: int) -> int:
    """x on all slots but one, a (1 GPU, up to 2) on the last; x is cancelled and a grows onto x's first slot at
    t = 10. 600 s steps: the contract job never confirms a size by itself. Returns a's id."""
    x = store.submit(load_job_spec(job_yaml("x", gpus=slots - 1, samples=10**6, step_s=600)), now=0.0)
    a = store.submit(load_job_spec(job_yaml("a", gpus=1, max_gpus=2, samples=10**6, step_s=600)), now=0.0)
    loop.round()
    store.request_cancel(x)
    t[0] = 10.0
    loop.round()
    return a


@pytest.mark.parametrize("confirmed", [False, True], ids=["held", "confirmed-before-the-restart"])
def test_the_slots_a_given_up_grow_asks_back_stay_booked_across_a_service_restart(tmp_path, confirmed):
    """The backend's books are rebuilt from the job folders after a restart: the held slot numbers must come back
    with them, as the store's count does, or the first job started after the restart lands on the held slot. The
    store has the last word: a service that went after it recorded the confirming step, before the backend released
    the slot, left it booked in the job folder only (``confirmed``)."""
    t = [0.0]
    spec = load_cluster_spec("nodes: [{name: n0, gpus: 4}]\npolicy: test-elastic\nresize_timeout_s: 100")
    store, backend, loop = _service(tmp_path, spec, t)
    try:
        a = _grown_onto_a_cancelled_job(store, loop, t, slots=4)   # x on slots 0-2, a on 3, then on 0 and 3
        assert _slots(loop.jobs_dir, a) == [0, 3]
        t[0] = 111.0
        loop.round()                                       # given up: back on 3, slot 0 held
        assert (store.get(a).num_gpus, store.get(a).releasing) == (1, {"n0": 1})
        assert _slots(loop.jobs_dir, a) == [3]
        if confirmed:
            store.update(a, releasing=None)
        backend.shutdown()                                 # the service goes; the coordinator stays
        store.close()
        store, backend, loop = _service(tmp_path, spec, t)
        loop.recover()
        c = store.submit(load_job_spec(job_yaml("c", gpus=2, samples=10**6, step_s=600)), now=112.0)
        t[0] = 112.0
        loop.round()
        assert store.get(c).state == RUNNING and store.get(a).releasing == (None if confirmed else {"n0": 1})
        if confirmed:   # the view has all 4 again: a grows back onto slot 0 (a restarted service does not back off)
            assert (_slots(loop.jobs_dir, a), _slots(loop.jobs_dir, c)) == ([0, 3], [1, 2]), "slot 0 stayed held"
            assert "releasing" not in json.loads((loop.jobs_dir / str(a) / "launch.json").read_text())
        else:
            assert _slots(loop.jobs_dir, c) == [1, 2], "c was given the slot a's grown group may still train on"
    finally:
        backend.stop_all()


def test_a_grows_deadline_counts_from_its_request_across_a_service_restart(tmp_path):
    """The deadline's clock lived in the loop's memory: a service restarted during a grow waited a whole
    resize_timeout_s again (one restarted more often than that never gave a hanging grow up)."""
    t = [0.0]
    spec = load_cluster_spec("nodes: [{name: n0, gpus: 2}]\npolicy: test-elastic\nresize_timeout_s: 100")
    store, backend, loop = _service(tmp_path, spec, t)
    try:
        a = _grown_onto_a_cancelled_job(store, loop, t, slots=2)   # x's slot goes to a: 1 -> 2
        assert (store.get(a).state, store.get(a).num_gpus) == (RESCALING, 2)
        backend.shutdown()                                 # the service goes; the coordinator stays
        store.close()
        t[0] = 105.0
        store, backend, loop = _service(tmp_path, spec, t)
        loop.recover()
        loop.round()                                       # 95 s after the grow's request: not yet
        assert store.get(a).state == RESCALING
        t[0] = 111.0
        loop.round()                                       # 101 s after it, 6 s after the restart: given up
        job = store.get(a)
        assert (job.state, job.num_gpus, job.releasing) == (RUNNING, 1, {"n0": 1}), job
        assert "resize_timeout_s=100 s" in store.events(a, kinds=[RUNNING])[-1]["detail"]["reason"]
        # the books go back to the slot a trained on before the grow (1), not the lowest one (the newcomer's 0, held)
        info = json.loads((loop.jobs_dir / str(a) / "launch.json").read_text())
        assert (info["slots"], info["releasing"]) == ({"n0": [1]}, {"n0": [0]}), info
    finally:
        backend.stop_all()
