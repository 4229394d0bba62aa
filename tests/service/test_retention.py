"""An ended job's step rows, events and predictions go after the cluster's retain_ended_days; its history stays."""
from dlsched.backends.recording import RecordingBackend
from dlsched.service.loop import LiveLoop
from dlsched.service.store import FINISHED, RUNNING, Store
from dlsched.spec import load_job_spec
from tests.service.conftest import cluster, job_yaml

DAY = 86_400.0


def _ran(store: Store, name: str, start: float, end: float | None) -> int:
    job = store.submit(load_job_spec(job_yaml(name)), now=start)
    store.transition(job, RUNNING, start)
    store.add_progress(job, [{"time": start + i, "step": i, "loss": 1.0 / i} for i in range(1, 51)], 50)
    store.add_prediction(job, start + 50, 0.5, 1000.0, 60.0, start + 110, None)
    if end is not None:
        store.transition(job, FINISHED, end)
    return job


def test_a_job_ended_past_the_retention_loses_its_step_rows_events_and_predictions_and_keeps_its_history(tmp_path):
    store = Store(tmp_path / "s.db")
    spec = cluster("test-fifo", (2,)).model_copy(update={"retain_ended_days": 30})
    now = [100 * DAY]
    loop = LiveLoop(store, RecordingBackend(), spec, tmp_path, clock=lambda: now[0])
    old = _ran(store, "old", now[0] - 40 * DAY, now[0] - 40 * DAY + 60)
    recent = _ran(store, "recent", now[0] - 2 * DAY, now[0] - 2 * DAY + 60)
    running = _ran(store, "running", now[0] - 50 * DAY, None)   # for 50 days: still running, so kept
    loop.round()
    assert store.progress(old) == [] and store.events(old) == [] and store.predictions(old) == []
    assert store.get(old).state == FINISHED and store.get(old).end_time == now[0] - 40 * DAY + 60
    assert all(len(store.progress(j)) == 50 and store.events(j) and store.predictions(j) for j in (recent, running))
    purged = [e for e in store.events() if e["kind"] == "purged"]
    assert len(purged) == 1 and purged[0]["detail"]["progress"] == 50, purged
    now[0] += 29 * DAY - 60   # "recent" ended 31 days ago: purged at the next hourly pass, not before
    loop.round()
    assert store.progress(recent) == []
    later = _ran(store, "later", now[0] - 31 * DAY, now[0] - 31 * DAY + 60)
    now[0] += 600
    loop.round()
    assert len(store.progress(later)) == 50, "purged once an hour, not every round"
    now[0] += 3600
    loop.round()
    assert store.progress(later) == [] and len(store.progress(running)) == 50


def test_without_a_retention_nothing_is_purged(tmp_path):
    store = Store(tmp_path / "s.db")
    loop = LiveLoop(store, RecordingBackend(), cluster("test-fifo", (2,)), tmp_path, clock=lambda: 1000 * DAY)
    old = _ran(store, "old", 10 * DAY, 10 * DAY + 60)
    loop.round()
    assert len(store.progress(old)) == 50 and not [e for e in store.events() if e["kind"] == "purged"]
