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


def test_a_speed_model_is_kept_only_where_it_makes_the_run_time_the_jobs_size(tmp_path):
    """The Gittins ranking asks of each finished job whether its run time is its size (speed linear up to its
    request); asked at every decision of 1 000 jobs with fitted all-reduce models it cost a round a quarter second.
    It is asked once, when the job finishes: the simulator too shows speed models of duration jobs alone."""
    from dlsched.service.refit import LinearSpeed

    store = Store(tmp_path / "s.db")
    job = store.submit(load_job_spec(job_yaml("j", gpus=2)), now=0.0)
    store.transition(job, RUNNING, 1.0)
    store.transition(job, FINISHED, 2.0)
    shown = FinishedJobs(store, job_view)
    linear, fixed_cost = LinearSpeed(0.01, 0.0, 0.0, 32), LinearSpeed(0.01, 0.5, 0.0, 32)
    shown.add(store.get(job), linear)
    shown.add(store.get(job), fixed_cost)
    assert [v.speed for v in shown.views[-2:]] == [linear, None]
