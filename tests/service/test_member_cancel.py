"""Cancelling one member of an ensemble job (``dlsched cancel JOB --member NAME``): the service's checks and the
request it leaves in the job folder for the FLEET runtime (which ``tests/train/test_fleet_job.py`` runs). Real
SQLite; the member events as the runtime writes them."""
import pytest

from dlsched.service.member_cancel import MemberCancelRefused, cancel_member
from dlsched.service.store import RUNNING, Store
from dlsched.spec import load_job_spec
from dlsched.train.member_cancel import cancelled_members
from tests.waiting import blocked_on_fifo

ENSEMBLE = "name: e\nkind: ensemble\nentry: dlsched.train.fleet_spec:from_yaml\nparams: {path: e.yaml}\ngpus: 1\n"


def refusal(*args) -> tuple[int, str]:
    with pytest.raises(MemberCancelRefused) as e:
        cancel_member(*args)
    return e.value.status, str(e.value)


def test_a_member_is_cancelled_once_known_and_training_and_every_refusal_says_why(tmp_path):
    store = Store(tmp_path / "s.db")
    job = store.submit(load_job_spec(ENSEMBLE), now=0.0)
    assert refusal(store, job, "a", tmp_path) == (409, f"job {job} has not profiled its members yet: cancel 'a' once "
                                                       "`dlsched status` lists them")
    folder = tmp_path / str(job)
    folder.mkdir()                                  # a started job has its folder
    store.transition(job, RUNNING, 1.0, job_dir=str(folder))
    store.event("job_profiled", job, 2.0, profiles=[{"member": "a", "rates": [10.0]}, {"member": "b", "rates": [9.0]}],
                max_samples={"a": 100, "b": 100})
    store.event("job_member_converged", job, 3.0, member="b", epoch=2, best_acc=0.9, reason="converged")
    assert refusal(store, job, "x", tmp_path) == (404, f"member 'x': job {job} has no such member (it has a, b)")
    assert refusal(store, job, "b", tmp_path) == (409, f"member 'b' of job {job} already left (converged)")
    assert cancel_member(store, job, "a", tmp_path)["cancel_requested"] is True
    assert cancelled_members(folder) == {"a"}
    assert [e["detail"] for e in store.events(job) if e["kind"] == "member_cancel_requested"] == [{"member": "a"}]


def test_a_fifo_job_code_put_in_place_of_the_cancel_file_does_not_block_the_cancel(tmp_path):
    """The service reads ``cancel_members.json`` back to add a member to it, in a folder job code writes: a FIFO there
    blocked the API thread of the cancel until a writer came (never), as one named ``status.json`` once blocked the
    scheduling loop. It reads as no file, and the cancel replaces it."""
    import os

    store = Store(tmp_path / "s.db")
    job = store.submit(load_job_spec(ENSEMBLE), now=0.0)
    folder = tmp_path / str(job)
    folder.mkdir()
    store.transition(job, RUNNING, 1.0, job_dir=str(folder))
    store.event("job_profiled", job, 2.0, profiles=[{"member": "a", "rates": [10.0]}], max_samples={"a": 100})
    os.mkfifo(folder / "cancel_members.json")
    blocked, answers = blocked_on_fifo(folder / "cancel_members.json",
                                       lambda: cancel_member(Store(tmp_path / "s.db"), job, "a", tmp_path))
    assert not blocked and answers[0]["cancel_requested"] is True
    assert cancelled_members(folder) == {"a"}
