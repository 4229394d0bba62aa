"""A group shrunk past a lost worker grows back into the slots the backend still holds for it (``WorkerLoss._rejoin``,
through the stop-free ``Resizer``); the rejoin gives up, and the job trains on smaller, where the backend has no
slot for the newcomer after all. The launcher here stands in for Ray's (``RayLauncher``): the backend's side."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from dlsched.errors import JobFailed
from dlsched.train.coordinator import Coordinator, Options
from dlsched.train.files import Control
from dlsched.train.launcher import LocalLauncher, NoFreeSlot

from .helpers import MLP


class Idle(LocalLauncher):
    """Newcomers that never get ready (a process that sleeps); ``revoke``: the backend took their slots back."""

    shrink_on_loss = True

    def __init__(self, revoke: bool):
        self.revoke = revoke

    def start(self, argv, log_path, visible):
        return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])

    def revoked(self, handles):
        return list(handles) if self.revoke else []


class Full(Idle):
    """Every slot in use (the one counted by room() went back to the backend meanwhile)."""

    def start(self, argv, log_path, visible):
        raise NoFreeSlot("ray-slots.json: no free bundle for another worker")


class Stillborn(Idle):
    """Newcomers whose actor dies before its process starts (a bundle on a node Ray has not yet declared dead):
    gone with an error, no log file written."""

    def start(self, argv, log_path, visible):
        return subprocess.Popen([sys.executable, "-c", "raise SystemExit(1)"])


@pytest.fixture
def coordinator(tmp_path):
    c = Coordinator(Options(job_dir=tmp_path, entry=MLP, workers=1))
    c._publish([], 0, None, 12, None, (0.0, 0))   # the shrunk group (no workers: none is needed here)
    yield c
    c.pool.kill(list(c.pool.procs))
    c.progress.close()


def use(c: Coordinator, launcher) -> None:
    c.launcher = c.pool.launcher = launcher


def abandoned(c: Coordinator) -> list[tuple]:
    lines = (c.dir / "progress.jsonl").read_text().splitlines()
    return [(r["reason"], r["control_generation"]) for r in map(json.loads, lines)
            if r.get("event") == "resize_abandoned"]


def test_a_rejoin_whose_newcomers_slots_the_backend_took_back_is_given_up_not_waited_on(coordinator):
    use(coordinator, Idle(revoke=True))
    coordinator.worker_loss._rejoin([2], 1)
    assert abandoned(coordinator) == [
        ("rejoin: the slots of new worker(s) [0] were taken back or lost with their node", None)]
    assert not coordinator.pool.procs and coordinator.generation == 0   # the newcomer went; the group trains on


def test_a_rejoin_with_no_free_slot_is_given_up_and_a_scheduled_grow_fails_the_job(coordinator):
    use(coordinator, Full(revoke=False))
    coordinator.worker_loss._rejoin([2], 1)
    assert abandoned(coordinator) == [("rejoin: ray-slots.json: no free bundle for another worker", None)]
    with pytest.raises(NoFreeSlot):   # the scheduler granted a slot per worker: its books are wrong
        coordinator.resizer.resize(Control(1, None, 0))


def test_the_job_fails_after_max_restarts_rejoins(coordinator):
    use(coordinator, Idle(revoke=True))
    (coordinator.dir / "logs" / "worker-2.log").write_text("Killed\n")   # the lost worker's last line
    for _ in range(coordinator.o.max_restarts):
        coordinator.worker_loss._rejoin([2], 1)
    with pytest.raises(JobFailed, match=r"^workers \[2\] died; gave up after 3 rejoins: Killed \(worker logs in "):
        coordinator.worker_loss._rejoin([2], 1)


def test_a_rejoin_whose_newcomers_never_get_ready_is_given_up_at_its_deadline(coordinator, monkeypatch):
    """No scheduler's request stands behind a rejoin, so no scheduler's deadline gives it up: its own does."""
    monkeypatch.setattr("dlsched.train.resizer.REJOIN_READY_S", 0.5)
    use(coordinator, Idle(revoke=False))
    coordinator.worker_loss._rejoin([2], 1)
    assert abandoned(coordinator) == [("rejoin: new worker(s) not ready in 0.5 s", None)]
    assert not coordinator.pool.procs and coordinator.generation == 0


def test_a_rejoin_whose_newcomer_dies_before_it_wrote_a_log_is_given_up_and_the_job_trains_on(coordinator):
    """Under the multi-node test's killed raylet, the rejoin's newcomer went to the lost node's bundle; its actor
    died before the worker's log existed, and reading that log for the abandon's reason crashed the coordinator
    (FileNotFoundError: the job failed instead of training on)."""
    use(coordinator, Stillborn(revoke=False))
    coordinator.worker_loss._rejoin([2], 1)
    assert abandoned(coordinator) == [("rejoin: new worker 0 exited with 1: (no log: it never started)", None)]
    assert coordinator.generation == 0
