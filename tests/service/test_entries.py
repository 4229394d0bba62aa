"""Entry-point confinement (``service.entries``): what the operator allows runs, nothing else is even stored."""
import pytest

from dlsched.service.entries import EntryRules
from dlsched.spec import SpecError


@pytest.fixture
def rules(tmp_path):
    (tmp_path / "jobs" / "sub").mkdir(parents=True)
    (tmp_path / "shared").mkdir()
    return EntryRules.make(tmp_path / "jobs", roots=(".", "../shared"), modules=("mylab.jobs",),
                           forbidden=(tmp_path / "jobs" / "state",))


@pytest.mark.parametrize("entry", ["a.py:make_job", "sub/b.py:make_job", "mylab.jobs:make", "mylab.jobs.cnn:make",
                                   "{tmp}/jobs/c.py:make_job", "{tmp}/shared/d.py:make_job"])
def test_allowed(rules, tmp_path, entry):
    rules.check(entry.format(tmp=tmp_path))


@pytest.mark.parametrize("entry, why", [
    ("os:system", "imports module 'os', which is not an allowed job module (dlsched.train.fleet_spec, mylab.jobs"),
    ("mylab.jobsx:make", "not an allowed job module"),
    ("mylab:make", "not an allowed job module"),
    ("/etc/evil.py:make_job", "outside the allowed job directories"),
    ("../escape.py:make_job", "contains '..'"),
    ("sub/../../x.py:make_job", "contains '..'"),
    ("state/jobs/1/x.py:make_job", "state directory"),
    ("a.py:_private", "private attribute"),
    ("a.py:__class__", "private attribute"),
])
def test_refused_with_one_line(rules, entry, why):
    with pytest.raises(SpecError) as e:
        rules.check(entry, "job.yaml")
    assert str(e.value).startswith(f"job.yaml: field entry: {entry!r}") and why in str(e.value)


def test_a_symlink_out_of_the_root_is_refused(rules, tmp_path):
    (tmp_path / "evil.py").write_text("")
    (tmp_path / "jobs" / "link.py").symlink_to(tmp_path / "evil.py")
    with pytest.raises(SpecError, match="outside the allowed job directories"):
        rules.check("link.py:make_job")


def test_default_root_is_the_workdir(tmp_path):
    rules = EntryRules.make(tmp_path)
    rules.check("x.py:make_job")
    rules.check("dlsched.train.fleet_spec:from_yaml")       # the ensemble loader, always allowed
    for entry in ("examples.mlp:make_job", "dlsched.train.files:atomic_write_json", "dlsched.cli:main"):
        with pytest.raises(SpecError, match=r"not an allowed job module \(dlsched.train.fleet_spec: see"):
            rules.check(entry)


@pytest.mark.parametrize("command, why", [
    (["bash", "-c", "id > F"], "runs 'bash'"),
    (["/bin/sh", "x.py"], "runs '/bin/sh'"),
    (["python", "-c", "import os; os.system('id')"], "no -c, -m"),
    (["python", "-m", "http.server"], "no -c, -m"),
    (["python"], "no -c, -m"),
    (["python", "/etc/evil.py"], "outside the allowed job directories"),
    (["python3", "../x.py"], "contains '..'"),
])
def test_command_jobs_run_only_allowed_python_scripts(rules, command, why):
    rules.check_command(["python", "sub/train.py", "--epochs", "2"])
    with pytest.raises(SpecError, match="field command: ") as e:
        rules.check_command(command, "job.yaml")
    assert why in str(e.value)


def test_a_command_must_name_the_interpreter_bare(rules, tmp_path):
    """Only bare `python`/`python3` are swapped for the runtime's own interpreter (train/script.py); a path that
    merely ends in python would run as given."""
    with pytest.raises(SpecError, match="runs '/tmp/evil/python'"):
        rules.check_command(["/tmp/evil/python", "train.py"])


def _ensemble(folder, *models, base_dir=None):
    lines = ([f"base_dir: {base_dir}"] if base_dir else []) + ["models:"]
    lines += [f"  - {{name: m{i}, model: '{m}'}}" for i, m in enumerate(models)]
    (folder / "ens.yaml").write_text("\n".join(lines) + "\n")
    return str(folder / "ens.yaml")


def test_an_ensembles_yaml_and_models_are_job_code(rules, tmp_path):
    jobs = tmp_path / "jobs"
    rules.check_ensemble({"path": _ensemble(jobs, "models.py:Cnn", "sub/m.py:Mlp", f"{tmp_path}/shared/x.py:C")})
    rules.check_ensemble({"path": "ens.yaml"})                                  # relative to the workdir
    rules.check_ensemble({})                                                    # the entry builds it itself
    for model, why in [("os:system", "not an allowed job module"), ("/etc/evil.py:C", "outside the allowed"),
                       ("../x.py:C", "contains '..'"), ("models.py:_C", "private attribute")]:
        with pytest.raises(SpecError) as e:
            rules.check_ensemble({"path": _ensemble(jobs, "models.py:Cnn", model)}, "request body")
        assert str(e.value).startswith(f"request body: {jobs / 'ens.yaml'}: field models[1].model: {model!r}")
        assert why in str(e.value)
    with pytest.raises(SpecError, match="field models\\[0\\].model: 'models.py:C' is outside"):   # base_dir moves it
        rules.check_ensemble({"path": _ensemble(jobs, "models.py:C", base_dir="/tmp")})


def test_an_ensemble_yaml_outside_the_job_directories_is_not_even_read(rules, tmp_path):
    (tmp_path / "elsewhere").mkdir()
    for path, why in [(_ensemble(tmp_path / "elsewhere", "models.py:C"), "outside the allowed job directories"),
                      ("/etc/shadow", "outside the allowed job directories"), ("../ens.yaml", "contains '..'"),
                      (["a", "list"], "is not a file path")]:
        with pytest.raises(SpecError, match=why) as e:
            rules.check_ensemble({"path": path})
        assert str(e.value).startswith("job spec: field params.path: ")
    with pytest.raises(SpecError, match="params.path: .*missing.yaml: file not found"):
        rules.check_ensemble({"path": "missing.yaml"})


def test_a_link_re_pointed_out_of_the_job_directories_after_submission_fails_the_job_at_its_start(tmp_path):
    """The runtime imports what an entry's path names when the job starts: a link in an allowed directory re-pointed
    after the submission ran code from anywhere (a real serve ran /tmp/.../evil.py that way). The rules are applied
    again before each start; a job refused then fails with one line, and nothing of it runs."""
    import httpx

    from dlsched.service.server import Service
    from tests.service.conftest import RUNTIME, cluster
    from tests.service.teardown import stop_service_and_jobs
    from tests.waiting import wait_until

    work, outside = tmp_path / "work", tmp_path / "outside"
    work.mkdir(), outside.mkdir()
    (work / "real.py").write_text("def make_job(samples=1, epochs=1, step_s=0.0): ...\n")
    (outside / "evil.py").write_text("def make_job(samples=1, epochs=1, step_s=0.0): ...\n")
    (work / "link.py").symlink_to(work / "real.py")
    svc = Service(cluster(slots=(2,)), tmp_path / "state", port=0, runtime=RUNTIME, workdir=work).start()
    try:
        with httpx.Client(base_url=svc.url, headers=svc.headers, timeout=30) as c:
            def submit(name, gpus, step_s):
                spec = {"name": name, "entry": "link.py:make_job", "gpus": gpus, "batch_size": 32,
                        "params": {"samples": 32_000, "epochs": 1, "step_s": step_s}}
                answer = c.post("/jobs", json=spec)
                assert answer.status_code == 201, answer.text
                return answer.json()["id"]

            blocker = submit("blocker", 2, 0.05)
            wait_until(lambda: c.get(f"/jobs/{blocker}").json()["state"] == "running", 60, "the blocker running")
            queued = submit("queued", 1, 0.0)
            (work / "link.py").unlink()
            (work / "link.py").symlink_to(outside / "evil.py")
            c.post(f"/jobs/{blocker}/cancel")
            wait_until(lambda: c.get(f"/jobs/{queued}").json()["state"] != "queued", 60, "the queued job's start")
            job = c.get(f"/jobs/{queued}").json()
            assert job["state"] == "failed" and job["error"] == (
                f"job {queued} (its code checked again at its start): field entry: 'link.py:make_job' is outside the "
                f"allowed job directories ({work.resolve()})")
            assert job["start_time"] is None and not (svc.jobs_dir / str(queued) / "output.log").exists()
    finally:
        stop_service_and_jobs(svc)
