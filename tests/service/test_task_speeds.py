"""service/task_speeds.py: a queued job that never trained is forecast at its task's last finished job's speed."""
import json

from dlsched.backends.base import PollResult
from dlsched.backends.recording import RecordingBackend
from dlsched.service.loop import LiveLoop
from dlsched.service.store import FINISHED, QUEUED, RUNNING, Store
from dlsched.service.task_speeds import task_key
from dlsched.spec import load_job_spec
from tests.service.conftest import cluster, job_yaml


class FinishesWhenTold(RecordingBackend):
    def __init__(self):
        super().__init__()
        self.done = set()

    def poll(self, job_id, job_dir):
        return PollResult("finished" if job_id in self.done else "running")


def steps(loop, job, n, workers, samples_per_s, total):
    loop.job_dir(job).mkdir(parents=True, exist_ok=True)
    with open(loop.job_dir(job) / "progress.jsonl", "a") as f:
        for i in range(1, n + 1):
            f.write(json.dumps({"time": float(i), "step": i, "samples": 32.0 * i, "total_samples": total,
                                "loss": 1.0 / i, "samples_per_s": samples_per_s, "workers": workers,
                                "batch_size": 32, "control_generation": 1}) + "\n")


def test_a_queued_job_of_a_finished_jobs_task_is_forecast_to_finish_and_one_of_another_task_is_not(tmp_path):
    store, backend = Store(tmp_path / "s.db"), FinishesWhenTold()
    loop = LiveLoop(store, backend, cluster("test-fifo", (1, 1)), tmp_path)
    done = store.submit(load_job_spec(job_yaml("a", samples=320)))
    other = store.submit(load_job_spec(job_yaml("d", samples=3200, step_s=0.05)))
    loop.round()
    steps(loop, done, 10, 1, 100.0, 320)
    steps(loop, other, 5, 1, 50.0, 3200)
    loop.round()
    backend.done.add(done)
    loop.round()
    assert store.get(done).state == FINISHED and store.get(other).state == RUNNING
    # both need the two slots, one of which the running job holds: each waits for it
    same = store.submit(load_job_spec(job_yaml("b", gpus=2, samples=640, epochs=2, extra="total_samples: 1280\n")))   # a's task
    new = store.submit(load_job_spec(job_yaml("c", gpus=2, samples=640, step_s=0.01, extra="total_samples: 640\n")))
    loop.round()
    assert store.get(same).state == QUEUED and store.get(new).state == QUEUED
    f = loop.forecaster.refresh(100.0)
    assert f.finish[str(same)] is not None and f.finish[str(same)] > f.start[str(same)]
    assert f.finish.get(str(new)) is None
    assert task_key(store.get(same).spec) == task_key(store.get(done).spec) != task_key(store.get(new).spec)
