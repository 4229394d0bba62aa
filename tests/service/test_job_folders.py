"""Each job's folder: the one it was started in, whatever --jobs-dir is now (``service/job_folders.py``)."""
import dataclasses

from dlsched.service.job_folders import job_folder
from dlsched.service.store import Store
from dlsched.spec import load_job_spec


def test_a_started_job_keeps_its_folder_and_a_new_one_goes_to_the_current_jobs_dir(tmp_path, monkeypatch):
    store = Store(tmp_path / "db")
    job = store.get(store.submit(load_job_spec("name: j\nentry: x.py:make_job")))
    old, new = tmp_path / "old", tmp_path / "new"
    assert job_folder(job, new) == new / str(job.id)                                  # never started
    started = dataclasses.replace(job, job_dir=str(old / str(job.id)))
    assert job_folder(started, new) == old / str(job.id)                              # even before its folder exists
    (old / str(job.id)).mkdir(parents=True)
    (new / str(job.id)).mkdir(parents=True)
    assert job_folder(started, new) == old / str(job.id)                              # where it runs, not the new one
    (old / str(job.id)).rmdir()
    assert job_folder(started, new) == new / str(job.id)                              # the operator moved it there
    monkeypatch.chdir(tmp_path)                                                       # stored as given by an older one
    legacy = dataclasses.replace(job, job_dir=f"old/{job.id}")
    (old / str(job.id)).mkdir()
    assert job_folder(legacy, new) == old / str(job.id)
    monkeypatch.chdir(new)                                                            # from elsewhere: not there
    assert job_folder(legacy, tmp_path / "old") == old / str(job.id)
