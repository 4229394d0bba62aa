"""service/job_models.py: the live loop's per-job models; here, the prior a new job's curve starts from."""
from dlsched.perf.calibration import load_calibration
from dlsched.perf.prior import FinishedFit, fit_record
from dlsched.service.job_models import JobModels, job_meta
from dlsched.service.store import Store
from dlsched.spec import JobSpec


def test_finished_jobs_of_other_tasks_that_agree_do_not_narrow_the_shape_prior_to_their_agreement(tmp_path):
    """Two finished jobs of other scripts that happen to agree on α (0.60, 0.62) say little about how α varies
    across tasks: the shipped development prior's spread counts beside theirs (``perf.prior``). Before, they set
    it alone, at the same-task floor (0.2, a quarter of the shipped one)."""
    store = Store(tmp_path / "s.db")
    for entry, alpha in (("examples/mlp.py:make_job", 0.60), ("examples/demo/convnet.py:make_job", 0.62)):
        done = store.submit(JobSpec(name="done", entry=entry, gpus=1, batch_size=64))
        store.add_finished_fit(done, fit_record(FinishedFit(alpha, 0.05, {"family": entry, "metric": "loss"})))
    job = store.get(store.submit(JobSpec(name="new", entry="examples/resnet20.py:make_job", gpus=1, batch_size=64)))
    shipped = load_calibration().curve_prior("loss", None, "scratch")
    prior = JobModels(("slot",), store).curve_prior(job)
    assert 0.6 <= prior.alpha <= 0.62
    assert prior.alpha_sigma > 0.5 * shipped.alpha_sigma
    store.close()


def test_command_jobs_of_one_script_share_a_family_whatever_their_arguments(tmp_path):
    """A command job names no entry and takes no params: its script is its family, so a finished run of the same
    script leads the new one's prior (before, every command job's family was None, shared with no one)."""
    store = Store(tmp_path / "s.db")
    for command, alpha in ((["python", "train.py", "--epochs", "3"], 2.0), (["python", "-m", "other.train"], 0.5)):
        done = store.submit(JobSpec(name="done", command=command, gpus=1))
        meta = job_meta(store.get(done))
        store.add_finished_fit(done, fit_record(FinishedFit(alpha, 0.05, meta)))
    assert meta["family"] == "other.train"
    job = store.get(store.submit(JobSpec(name="new", command=["python", "train.py", "--epochs", "9"], gpus=1)))
    assert job_meta(job)["family"] == "train.py"
    assert JobModels(("slot",), store).curve_prior(job).alpha > 1.3   # 1.0, the plain geometric mean, before
    store.close()
