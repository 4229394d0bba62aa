"""A submitted job's checkpoint_uri is a location of its own (``service.checkpoint_locations``): never the service's
folders, never where a job not yet ended keeps its checkpoints. Before, any token holder could point a job at
``STATE_DIR/jobs/N/ckpt``: named like job N, it resumed from N's weights, and the two pruned and overwrote each other's
checkpoints there."""
import json

import pytest

from dlsched.service.checkpoint_locations import CheckpointRules
from dlsched.spec import SpecError
from tests.service.conftest import job_yaml
from tests.waiting import wait_until

YAML = {"content-type": "application/yaml"}


def test_a_job_cannot_keep_checkpoints_in_another_jobs_folder_or_where_a_live_job_keeps_its_own(client, service,
                                                                                                 tmp_path):
    own = tmp_path / "ckpts" / "a"
    first = client.post("/jobs", content=job_yaml("a", gpus=4, extra=f"checkpoint_uri: {own}\n"), headers=YAML)
    assert first.status_code == 201
    a = first.json()["id"]

    same = client.post("/jobs", content=job_yaml("a", extra=f"checkpoint_uri: file://{own}/\n"), headers=YAML)
    assert same.status_code == 422
    assert same.json()["error"] == (f"request body: field checkpoint_uri: 'file://{own}/' is where job {a} keeps its "
                                    "checkpoints, and it has not ended: a job resumes from and prunes what it finds "
                                    "there; give each job a location of its own")
    victim = service.jobs_dir / str(a) / "ckpt"
    into = client.post("/jobs", content=job_yaml("b", extra=f"checkpoint_uri: {victim}\n"), headers=YAML)
    assert into.status_code == 422 and into.json()["error"].startswith(f"request body: field checkpoint_uri: "
                                                                        f"'{victim}' lies in the service's folder")
    state = client.post("/jobs", content=job_yaml("b", extra=f"checkpoint_uri: {service.state_dir}\n"), headers=YAML)
    assert state.status_code == 422 and "lies in the service's folder" in state.json()["error"]

    spec = {"name": "c", "entry": "x.py:make_job", "gpus": 1, "checkpoint_uri": str(tmp_path / "ckpts" / "c")}
    batch = client.post("/jobs/batch", content=json.dumps({"jobs": [spec, spec]}),
                        headers={"content-type": "application/json"})
    assert batch.status_code == 422 and batch.json()["index"] == 1
    assert "is where jobs[0] keeps its checkpoints" in batch.json()["error"]
    assert [j["id"] for j in client.get("/jobs").json()] == [a]   # none of the refused was stored

    # queued, it ends at once; started meanwhile (a loaded machine: the loop's round came first), once stopped
    client.post(f"/jobs/{a}/cancel")
    wait_until(lambda: client.get(f"/jobs/{a}").json()["state"] == "cancelled", 60, "job a cancelled")
    again = client.post("/jobs", content=job_yaml("a2", gpus=4, extra=f"checkpoint_uri: {own}\n"), headers=YAML)
    assert again.status_code == 201   # a location is free again once its job has ended


def test_a_link_or_a_relative_path_is_the_location_it_names(tmp_path):
    (tmp_path / "work").mkdir()
    (tmp_path / "state" / "jobs" / "3" / "ckpt").mkdir(parents=True)
    (tmp_path / "work" / "mine").symlink_to(tmp_path / "state" / "jobs" / "3" / "ckpt")
    rules = CheckpointRules.make(tmp_path / "work", forbidden=(tmp_path / "state",))
    with pytest.raises(SpecError, match=r"^j.yaml: field checkpoint_uri: 'mine' lies in the service's folder"):
        rules.check("mine", [], "j.yaml")
    with pytest.raises(SpecError, match="is where job 7 keeps its checkpoints"):
        rules.check("runs/x", [("job 7", str(tmp_path / "work" / "runs" / "x/"))])
    with pytest.raises(SpecError, match="is where job 7 keeps its checkpoints"):
        rules.check("s3://bucket/run-7/", [("job 7", "S3://bucket/run-7")])
    rules.check("runs/x/sub", [("job 7", "runs/x")])         # a save prunes its own folder only
    rules.check("s3://bucket/run-8", [("job 7", "s3://bucket/run-7")])
    rules.check(None, [("job 7", "runs/x")])


def test_a_uri_with_a_password_is_refused_without_echoing_it(tmp_path):
    """ftp://user:secret@host/... went into the stored spec (shown by `dlsched show`, events, the dashboard) and onto
    the runtime's command line (every local user's `ps`)."""
    rules = CheckpointRules.make(tmp_path, forbidden=())
    with pytest.raises(SpecError) as e:
        rules.check("ftp://bob:hunter2@files.lab/ckpts/j", [], "j.yaml")
    assert str(e.value) == ("j.yaml: field checkpoint_uri: 'ftp://bob:***@files.lab/ckpts/j' carries a password, "
                            "which `dlsched show` and `ps` would show to others; give the storage driver's "
                            "credentials in its environment or config file")
    rules.check("ftp://bob@files.lab/ckpts/j", [])   # a user name alone is no secret


def test_a_location_that_reads_as_an_option_is_refused_at_submission(client):
    """The runtime gets checkpoint_uri as an argument: '--entry=os:system' was stored, then the runtime read it as an
    option and the job failed at its start ('--checkpoint-uri: expected one argument')."""
    answer = client.post("/jobs", content=job_yaml("a", extra="checkpoint_uri: --entry=os:system\n"), headers=YAML)
    assert answer.status_code == 422 and "checkpoint_uri" in answer.json()["error"], answer.text


def test_a_location_other_users_may_write_into_is_refused(client, tmp_path):
    """A job resumes from the newest checkpoint of its name at its location, and a checkpoint's header and SHA-256 take
    no secret to forge: a location in a folder every user may write (``/tmp/shared/ckpt``) let another local user
    train the job from weights of their choosing. Such a folder, or a missing location straight under a sticky one
    (``/tmp``: anyone may make it first), is refused; the job's own folder under a sticky one is not."""
    def submit(where):
        return client.post("/jobs", content=job_yaml("w", extra=f"checkpoint_uri: {where}\n"), headers=YAML)

    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    r = submit(shared / "ckpt")
    assert r.status_code == 422, r.text
    assert r.json()["error"] == (f"request body: field checkpoint_uri: '{shared / 'ckpt'}' is open to other users: "
                                 f"{shared} may be written by every user (mode 0777), and a job resumes from the "
                                 "checkpoint it finds there; give a folder only this user can write (mkdir -m 700)")
    (shared / "deep").mkdir(mode=0o700)   # its own folder, but inside one where others may rename it away
    assert "may be written by every user" in submit(shared / "deep" / "ckpt").json()["error"]
    sticky = tmp_path / "sticky"
    sticky.mkdir()
    sticky.chmod(0o1777)
    assert f"{sticky} may be written by every user (mode 1777)" in submit(sticky / "ckpt").json()["error"]
    (sticky / "mine").mkdir(mode=0o700)
    ok = submit(sticky / "mine" / "ckpt")
    assert ok.status_code == 201, ok.text
    client.post(f"/jobs/{ok.json()['id']}/cancel")


def test_fsspecs_other_names_for_the_local_disk_are_held_to_the_same_rules(client, service, tmp_path):
    """``local:///x`` is ``/x`` to fsspec, ``file://x`` is ``x`` under the runtime's working directory, and a chained
    ``simplecache::file:///x`` or ``dir::file:///x`` writes there too: read as remote URIs they passed every rule, and
    a job given ``local:///STATE/jobs/1/ckpt`` wrote and pruned its checkpoints in job 1's folder."""
    victim = service.jobs_dir / "1" / "ckpt"
    refusals = {f"local://{victim}": "lies in the service's folder",
                "file://dlsched-state/jobs/1/ckpt": "names a host or a relative path after file://",
                f"simplecache::file://{victim}": "chains file systems (::)",
                f"dir::file://{service.state_dir}": "chains file systems (::)"}
    for uri, why in refusals.items():
        answer = client.post("/jobs", content=job_yaml("b", extra=f"checkpoint_uri: '{uri}'\n"), headers=YAML)
        assert answer.status_code == 422 and why in answer.json()["error"], (uri, answer.text)
    assert client.get("/jobs").json() == []
    own = tmp_path / "mine"
    rules = CheckpointRules.make(tmp_path, forbidden=(tmp_path / "state",))
    with pytest.raises(SpecError, match="is where job 7 keeps its checkpoints"):
        rules.check(f"local://{own}", [("job 7", str(own))])


def test_two_submissions_of_one_location_at_once_store_one(tmp_path):
    """Each submission was checked against the stored jobs, then stored: two of one location sent at once were both
    checked before either was stored, and both were accepted (a real serve took 3 such pairs of 6). The check is run
    again in the transaction that stores the job. Here both requests are held after their first check until the
    other has passed its own, the interleaving that let both in."""
    import threading

    import httpx

    from dlsched.service.server import Service
    from tests.service.conftest import RUNTIME, cluster
    from tests.service.teardown import stop_service_and_jobs

    class BothChecked(Service):
        checked = threading.Barrier(2, timeout=60)

        def validate(self, spec, source="job spec", batch=()):
            super().validate(spec, source, batch)
            self.checked.wait()

    svc = BothChecked(cluster(), tmp_path / "state", port=0, runtime=RUNTIME).start()
    try:
        uri = str(tmp_path / "ckpt")
        answers = []

        def submit(name):
            with httpx.Client(base_url=svc.url, headers=svc.headers, timeout=60) as c:
                answers.append(c.post("/jobs", content=job_yaml(name, extra=f"checkpoint_uri: {uri}\n"), headers=YAML))

        threads = [threading.Thread(target=submit, args=(n,)) for n in ("a", "b")]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert sorted(a.status_code for a in answers) == [201, 422], [a.text for a in answers]
        stored = next(a for a in answers if a.status_code == 201).json()["id"]
        refused = next(a for a in answers if a.status_code == 422).json()["error"]
        assert refused.startswith(f"request body: field checkpoint_uri: '{uri}' is where job {stored} keeps its")
        assert svc.store.count() == 1
    finally:
        stop_service_and_jobs(svc)
