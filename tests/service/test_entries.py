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
