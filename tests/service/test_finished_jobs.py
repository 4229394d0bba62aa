"""The finished jobs the live policy is shown (``ClusterView.finished``): the newest, bounded, read back at a restart."""
from dlsched.service.finished_jobs import FinishedJobs
from dlsched.service.job_models import job_view
from dlsched.service.store import FAILED, FINISHED, RUNNING, Store
from dlsched.spec import load_job_spec
from tests.service.conftest import job_yaml


def test_the_newest_finished_jobs_are_kept_up_to_the_limit(tmp_path):
    store = Store(tmp_path / "s.db")
    ids = [store.submit(load_job_spec(job_yaml(f"j{i}")), now=0.0) for i in range(4)]
    for i, end in zip(ids, (30.0, 10.0, 20.0, 40.0)):
        store.transition(i, RUNNING, 1.0)
        store.transition(i, FAILED if end == 40.0 else FINISHED, end)   # a failed job's run time is no size
    shown = FinishedJobs(store, job_view, limit=2)
    assert [v.id for v in shown.views] == [str(ids[2]), str(ids[0])]   # by when they ended, oldest first
    shown.add(store.get(ids[1]), None)
    assert [v.id for v in shown.views] == [str(ids[0]), str(ids[1])]
