"""``dlsched ensemble``: the YAML spec's one-line errors, a real tiny run end to end, the simulate sub-command."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from dlsched.errors import UserError
from dlsched.train.fleet_spec import load_spec

ROOT = Path(__file__).resolve().parents[2]
MODELS = ROOT / "examples" / "ensemble" / "models.py"


def _cli(*args, cwd=None):
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"), COLUMNS="200")
    return subprocess.run([sys.executable, "-m", "dlsched.cli", "ensemble", *args], capture_output=True, text=True,
                          env=env, cwd=cwd, timeout=120)


def test_example_spec_is_valid():
    spec = load_spec(ROOT / "examples" / "ensemble" / "spec.yaml")
    assert len(spec.models) == 4 and spec.convergence.patience == 2


def test_the_data_sets_augmentation_is_the_specs(tmp_path):
    from dlsched.train.flotilla import Augment

    f = tmp_path / "spec.yaml"
    f.write_text("dataset: {kind: npz, path: d.npz, augment: {crop_padding: 0, flip: false}}\n"
                 "models:\n  - {name: a, model: 'm.py:A'}\n")
    assert load_spec(f).augment() == Augment(crop_padding=0, flip=False)
    f.write_text("models:\n  - {name: a, model: 'm.py:A'}\n")
    assert load_spec(f).augment() == Augment(crop_padding=4, flip=True)    # CIFAR's by default


@pytest.mark.parametrize("body, message", [
    ("models: []\n", "field models: List should have at least 1 item"),
    ("models:\n  - {name: a, model: 'm.py:A', lr: -1}\n", "field models.0.lr: Input should be greater than 0 (got -1)"),
    ("models:\n  - {name: a, model: 'm.py:A'}\nbatch_size: '64'\n", "field batch_size: Input should be a valid integer (got '64')"),
    ("models:\n  - {name: a, model: 'm.py:A'}\n  - {name: a, model: 'm.py:B'}\n", "repeated: a"),
    ("models:\n  - {name: a, model: 'm.py:A', colour: red}\n", "field models.0.colour: Extra inputs are not permitted"),
    ("models: [\n", "line 2: invalid YAML"),
    ("models:\n  - {name: a, model: 'm.py:A'}\nbatch_size: 300\ndataset: {train: 200}\n",
     "field batch_size: 300 is more than the 200 samples of dataset.train: an epoch would have no step"),
])
def test_bad_spec_is_one_line_naming_file_and_field(tmp_path, body, message):
    f = tmp_path / "spec.yaml"
    f.write_text(body)
    with pytest.raises(UserError) as e:
        load_spec(f)
    assert message in str(e.value) and str(f) in str(e.value) and "\n" not in str(e.value)


def test_cli_bad_spec_exits_2_with_one_line(tmp_path):
    f = tmp_path / "spec.yaml"
    f.write_text("models:\n  - {name: a, model: 'nomodule:A'}\n")
    r = _cli("run", str(f), "--no-live", "--output", str(tmp_path / "out"))
    assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr
    assert r.stderr.startswith(f"error: {f}: field models[0].model: 'nomodule:A': cannot import nomodule"), r.stderr
    assert not (tmp_path / "out").exists()


def test_a_model_the_file_lacks_names_the_spec_field_and_file_and_leaves_no_report_folder(tmp_path):
    """`model 'models.py:NoSuch': models.py has no NoSuch` named neither the field nor the file read, and came after
    the report folder (an empty ens-report/) was made."""
    f = tmp_path / "spec.yaml"
    (tmp_path / "models.py").write_text((MODELS).read_text())
    f.write_text("output: ens-report\nmodels:\n  - {name: a, model: 'models.py:TinyCNN'}\n"
                 "  - {name: b, model: 'models.py:NoSuch'}\n")
    run_dir = tmp_path / "cwd"
    run_dir.mkdir()
    r = _cli("run", str(f), "--no-live", cwd=run_dir)
    assert r.returncode == 2 and r.stdout == "", r
    assert r.stderr == f"error: {f}: field models[1].model: 'models.py:NoSuch': {tmp_path / 'models.py'} has no NoSuch\n"
    assert list(run_dir.iterdir()) == []


def test_a_batch_larger_than_the_npz_training_set_is_one_line_not_a_failed_member(tmp_path):
    """An epoch of 0 steps: the members died on it after profiling ("a member process failed"), and a service
    job of it held its slot for the profiling first."""
    import numpy as np

    x = np.zeros((100, 3, 8, 8), dtype=np.uint8)
    np.savez(tmp_path / "d.npz", x_train=x, y_train=np.zeros(100), x_val=x[:20], y_val=np.zeros(20))
    f = tmp_path / "spec.yaml"
    f.write_text(f"dataset: {{kind: npz, path: d.npz}}\nbatch_size: 128\nmodels:\n  - {{name: a, model: '{MODELS}:MLPHead'}}\n")
    r = _cli("run", str(f), "--no-live", "--output", str(tmp_path / "out"))
    assert r.returncode == 2 and r.stderr == (f"error: batch_size 128 is more than the 100 samples of x_train in "
                                              f"{tmp_path / 'd.npz'}: an epoch would have no step\n"), r.stderr


def test_base_dir_is_where_model_files_resolve(tmp_path):
    """`ensemble run` resolved models from the spec's folder whatever its base_dir said. A relative base_dir is from
    the working directory, as the service's runtime (its cwd, --workdir) and its entry check resolve it."""
    (tmp_path / "specs").mkdir()
    (tmp_path / "lib").mkdir()
    (tmp_path / "lib" / "models.py").write_text(MODELS.read_text())
    f = tmp_path / "specs" / "spec.yaml"
    for base_dir in ("lib", str(tmp_path / "lib")):
        f.write_text(f"base_dir: {base_dir}\nmodels:\n  - {{name: a, model: 'models.py:Missing'}}\n")
        r = _cli("run", str(f), "--no-live", cwd=tmp_path)
        assert r.returncode == 2 and f"{tmp_path / 'lib' / 'models.py'} has no Missing" in r.stderr, r.stderr
    f.write_text("models:\n  - {name: a, model: 'models.py:Missing'}\n")   # none: the spec's folder
    assert load_spec(f).base(f) == tmp_path / "specs"
    r = _cli("run", str(f), "--no-live", cwd=tmp_path)
    assert r.returncode == 2 and f"file {tmp_path / 'specs' / 'models.py'} not found" in r.stderr, r.stderr


@pytest.mark.slow
def test_ensemble_run_end_to_end(tmp_path):
    f = tmp_path / "spec.yaml"
    f.write_text(f"""
name: tiny-ensemble
dataset: {{kind: synthetic, train: 256, val: 64}}
batch_size: 32
convergence: {{patience: 5, max_epochs: 2}}
rate_tolerance: 0.99
models:
  - {{name: a, model: "{MODELS}:MLPHead", kwargs: {{hidden: 8}}, max_epochs: 1}}
  - {{name: b, model: "{MODELS}:StridedCNN", kwargs: {{width: 4}}}}
""")
    run_dir = tmp_path / "cwd"
    run_dir.mkdir()
    r = _cli("run", str(f), "--no-live", "--json", cwd=run_dir)   # the report goes to the working directory, not beside the spec
    assert r.returncode == 0, r.stderr
    assert not (f.parent / "ensemble-report").exists()
    (tmp_path / "out").symlink_to(run_dir / "ensemble-report")
    rep = json.loads((tmp_path / "out" / "report.json").read_text())
    assert rep["epochs"] == {"a": 1, "b": 2}
    assert rep["outcome"] == {"a": "stopped at max_epochs", "b": "stopped at max_epochs"}   # patience 5 never ran out
    assert [sorted(f["members"]) for f in rep["plans"][0]["flotillas"]] == [["a", "b"]]
    assert {p["member"] for p in rep["profiles"]} == {"a", "b"}
    assert all(Path(rep["best_checkpoint"][m]).is_file() for m in ("a", "b"))   # each model's best weights, by path
    # re-formed after a converged: 8 steps an epoch > the ring's 4 slots + 1, so b cannot also finish its 2nd
    # epoch before a's convergence pauses it, however the processes are scheduled
    assert [f["members"] for f in rep["flotillas"]][1] == ["b"]
    assert (tmp_path / "out" / "flotillas.png").stat().st_size > 1000
    assert (tmp_path / "out" / "checkpoints" / "a.best.pt").exists()
    assert json.loads(r.stdout) == rep    # --json prints the report itself
    # run again into the same folder: every member left in the first run (its checkpoints say so). This crashed
    # with KeyError 'a' after training, and no report.json was written.
    again = _cli("run", str(f), "--no-live", cwd=run_dir)
    assert again.returncode == 0, again.stderr
    assert "earlier run" in again.stdout
    rep2 = json.loads((tmp_path / "out" / "report.json").read_text())
    assert rep2["outcome"] == rep["outcome"] and rep2["epochs"] == rep["epochs"] and rep2["best_acc"] == rep["best_acc"]
    assert rep2["finish_s"] == {"a": None, "b": None} and rep2["flotillas"] == []


def test_ensemble_simulate_prints_the_three_methods():
    r = _cli("simulate", "--models", "12", "--nodes", "2")
    assert r.returncode == 0, r.stderr
    assert "FLEET" in r.stdout and "separately" in r.stdout and "homogeneous sharing" in r.stdout


def test_ensemble_simulate_json_parses_and_its_table_fits_80_columns():
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"), COLUMNS="80")
    args = [sys.executable, "-m", "dlsched.cli", "ensemble", "simulate", "--models", "12", "--nodes", "2"]
    table = subprocess.run(args, capture_output=True, text=True, env=env, timeout=120)
    assert table.returncode == 0 and "…" not in table.stdout and "FLEET speed-up" in table.stdout, table.stderr
    rows = json.loads(subprocess.run(args + ["--json"], capture_output=True, text=True, env=env, timeout=120).stdout)
    assert [r["method"] for r in rows] == ["FLEET", "separately", "homogeneous sharing"] and rows[0]["fleet_speedup"] == 1


def test_ctrl_c_stops_every_member_at_a_checkpoint(tmp_path):
    """Ctrl-C killed every member process (a KeyboardInterrupt traceback each) and lost what they had trained since
    the last re-formation: a member's checkpoint is written only when it pauses or leaves."""
    import signal
    import time

    import torch

    slow = ROOT / "tests" / "train" / "slow_models.py"
    f = tmp_path / "spec.yaml"
    f.write_text(f"""name: stop
dataset: {{kind: synthetic, train: 256, val: 32}}
batch_size: 32
convergence: {{patience: 100, min_delta: 0.0, max_epochs: 200}}
slots: 1
output: {tmp_path / "out"}
models:
  - {{name: a, model: "{slow}:SlowWideCNN", kwargs: {{width: 4, step_s: 0.05}}}}
""")
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"), COLUMNS="200", DLSCHED_PROFILE_CACHE=str(tmp_path / "cache"))
    cmd = [sys.executable, "-m", "dlsched.cli", "ensemble", "run", str(f), "--no-live"]
    proc = subprocess.Popen(cmd, env=env, start_new_session=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    try:
        best = tmp_path / "out" / "checkpoints" / "a.best.pt"   # written at its first epoch's end: it trains
        deadline = time.monotonic() + 120
        while not best.exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        assert best.exists(), proc.communicate(timeout=30)
        os.killpg(proc.pid, signal.SIGINT)                         # Ctrl-C in its terminal: its whole group
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == 143, err[-2000:]
    assert "Traceback" not in err and "the same command resumes" in err
    state = torch.load(tmp_path / "out" / "checkpoints" / "a.pt", weights_only=False)["state"]
    assert state["epoch"] >= 1 and state["step"] >= 8           # what it trained is kept


def test_the_live_tables_best_val_acc_is_the_kept_checkpoints_as_the_closing_tables():
    """A member whose next epoch gained less than min_delta (0.9922 -> 0.9961, min_delta 0.005) showed 0.996 live and
    0.992 in the closing table and report.json: the live table took the highest seen, the member keeps (and reports)
    the epoch it checkpointed as its best."""
    from dlsched.commands.ensemble import _LiveTable

    view = _LiveTable(["tiny"], min_delta=0.005)
    for epoch, acc in ((1, 0.9), (2, 0.9921875), (3, 0.99609375)):   # (name, status, epoch, step, loss, acc, rate)
        view.update(("tiny", "training", epoch, 32 * epoch, 0.1, acc, 1000.0))
        view.update(("tiny", "training", epoch, 32 * epoch + 10, 0.1, None, 1000.0))   # a step's: no acc
    assert view.rows["tiny"]["acc"] == 0.9921875
    view.update(("tiny", "converged", 3, 96, None, 0.9921875, None))   # its last report: its best, as it kept it
    assert view.rows["tiny"]["acc"] == 0.9921875 and view.rows["tiny"]["status"] == "converged"


def test_kwargs_a_model_class_does_not_take_are_one_line_before_anything_is_built(tmp_path):
    """`kwargs: {widthx: 4}` passed the checks: the first member's build raised a TypeError traceback (exit 1) after the
    report folder was made."""
    f = tmp_path / "spec.yaml"
    (tmp_path / "models.py").write_text((MODELS).read_text())
    f.write_text("models:\n  - {name: a, model: 'models.py:TinyCNN', kwargs: {width: 4}}\n"
                 "  - {name: b, model: 'models.py:TinyCNN', kwargs: {widthx: 4}}\n")
    spec = load_spec(f)
    with pytest.raises(UserError) as e:
        spec.check_models(tmp_path, str(f))
    assert str(e.value) == (f"{f}: field models[1].kwargs: models.py:TinyCNN: got an unexpected keyword argument "
                            "'widthx' (got {'widthx': 4})")
