"""service/target_events.py: a job's target_reached event, once, also across a restart."""
from __future__ import annotations

from dlsched.service.store import Store
from dlsched.service.target_events import TARGET_REACHED, TargetReached
from dlsched.spec import JobSpec

AHEAD = {"target_loss": 1.8, "target_step": 900.0, "target_time": 5000.0, "target_chance": 0.7,
         "target_reached": False}
REACHED = AHEAD | {"target_step": 412.0, "target_time": 1412.0, "target_chance": 1.0, "target_reached": True}


def test_the_first_refit_that_finds_the_target_reached_records_it_once(tmp_path):
    store = Store(tmp_path / "s.db")
    job = store.submit(JobSpec(name="lm", command=["python", "t.py"], gpus=1))
    reached = TargetReached(store)
    reached.check(job, 1000.0, AHEAD)
    reached.check(job, 1001.0, None)
    assert not store.events(job, kinds=[TARGET_REACHED])
    for t in (1500.0, 1600.0):
        reached.check(job, t, REACHED)
    TargetReached(store).check(job, 1700.0, REACHED)   # after a restart: told already
    (event,) = store.events(job, kinds=[TARGET_REACHED])
    assert event["time"] == 1500.0 and event["detail"] == {"metric": "loss", "value": 1.8, "step": 412.0,
                                                           "time": 1412.0}
    # a metric target's, where the job states one
    other = store.submit(JobSpec(name="cnn", command=["python", "t.py"], gpus=1))
    aim = {"metric": "val_accuracy", "target": 0.93, "target_step": 40.0, "target_time": 1200.0,
           "target_chance": 1.0, "target_reached": True}
    reached.check(other, 1300.0, {"model": "annealing", "metric_target": aim})
    assert [e["detail"]["metric"] for e in store.events(other, kinds=[TARGET_REACHED])] == ["val_accuracy"]
    store.close()
