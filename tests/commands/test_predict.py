"""``dlsched predict``: a few runs of the real CLI in a subprocess (exit codes, output, plot), and the input
checks in-process (each CLI start costs seconds on a loaded 2-core machine)."""
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from dlsched.commands.predict import load_observations, predict
from dlsched.errors import UserError

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples" / "predict"


def run(*args):
    env = dict(os.environ, PYTHONPATH=str(REPO / "src"), COLUMNS="160")
    return subprocess.run([sys.executable, "-m", "dlsched.cli", "predict", *map(str, args)], capture_output=True,
                          text=True, env=env, timeout=120)


@pytest.mark.slow
def test_yaml_allreduce_example_prints_table_and_plot(tmp_path):
    out = tmp_path / "p.png"
    r = run(EXAMPLES / "resnet50_allreduce.yaml", "--gpus", "6", "--plot", out)
    assert r.returncode == 0, r.stderr
    assert "remaining steps" in r.stdout and "best" in r.stdout and "GPUs" in r.stdout
    assert out.stat().st_size > 10_000 and out.read_bytes()[:4] == b"\x89PNG"


def test_bad_csv_via_cli_is_one_line_exit_2(tmp_path):
    p = tmp_path / "obs.csv"
    p.write_text("step,loss\n100,2.0\n-200,1.5\n300,1.2\n")
    r = run(p)
    assert r.returncode == 2, r.stdout + r.stderr
    assert "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert f"{p}: line 3, field 'step': must be >= 0, got '-200'" in r.stderr


def test_csv_example_matches_yaml():
    a = predict(load_observations(EXAMPLES / "resnet50_allreduce.csv"), 3)
    b = predict(load_observations(EXAMPLES / "resnet50_allreduce.yaml"), 3)
    assert a.fit.curve == b.fit.curve
    assert [r.seconds for r in a.rows] == [r.seconds for r in b.rows]  # steps_per_epoch = median spacing = 390


def test_ps_example_recommends_the_argmin_of_the_model():
    rep = predict(load_observations(EXAMPLES / "resnet50_ps_table2.yaml"), 19)
    assert rep.unit == "PS" and [r.ps for r in rep.rows] == list(range(1, 19))
    assert all(r.ps + r.workers <= 19 for r in rep.rows)  # servers count against the budget
    # The samples come from Table 2 (M = 64), so the recommendation is the exact model's argmin over p + w <= 19.
    t = {(p, w): 1.02 * 64 / w + 2.78 + 4.92 * w / p + 0.02 * p for p in range(1, 19) for w in range(1, 20 - p)}
    p_best, w_best = min(t, key=t.get)
    best = min(rep.rows, key=lambda r: r.seconds.value)
    assert (best.ps, best.workers) == (p_best, w_best)
    assert best.seconds.low <= best.seconds.value <= best.seconds.high
    assert rep.speed_error < 1e-3  # exact model samples (rounded to 6 digits): leave-one-out error ~0


def test_ps_example_with_ten_gpus_fits_and_follows_the_seed_curve():
    rep = predict(load_observations(EXAMPLES / "resnet50_ps_table2.yaml"), 10)
    best = min(rep.rows, key=lambda r: r.seconds.value)
    assert best.ps + best.workers <= 10 and (best.ps, best.workers) == (5, 5)
    by_p = {r.ps: r.workers for r in rep.rows}
    assert by_p[2] == 5 and rep.unbounded_workers[2] == 5  # the notebook's curve bottoms at 5 workers with p = 2 ...
    assert rep.unbounded_workers[4] == 7 and by_p[4] == 6  # ... and at 7 with p = 4, which 10 cannot hold


def _csv(tmp_path, text, name="obs.csv"):
    p = tmp_path / name
    p.write_text(text)
    return p


@pytest.mark.parametrize("text, expect", [
    ("step,lossx\n100,2.0\n200,1.5\n300,1.2\n", "missing column 'loss'"),
    ("step,loss\n100,2.0\n200,abc\n300,1.2\n", "line 3, field 'loss': expected a number, got 'abc'"),
    ("step,loss\n100,2.0\n200,-0.5\n300,1.2\n", "line 3, field 'loss': must be >= 0, got '-0.5'"),
    ("step,loss\n100,0\n200,0\n300,0\n", "field 'loss': every loss is 0, no loss to model"),
    ("step,loss\n100,2.0\n200,1.5\n", "too few loss points to fit (2; need at least 3), field 'loss'"),
    ("step,loss\n100,2.0\n300,1.5\n200,1.2\n", "line 4, field 'step': steps must increase"),
    ("step,loss,num_gpus,num_nodes,local_batch,step_time\n100,2,,,,\n200,1.5,,,,\n300,1.2,,,,\n,,2,1,32,0.1\n,,4,1,32,fast\n",
     "line 6, field 'step_time': expected a number, got 'fast'"),
    ("step,loss,num_gpus,num_nodes,local_batch,step_time\n100,2,,,,\n200,1.5,,,,\n300,1.2,,,,\n,,2,4,32,0.1\n",
     "line 5, field 'num_nodes': more nodes than GPUs"),
    ("step,loss\n100,2.0\n200,\n300,1.2\n", "too few loss points to fit (2; need at least 3)"),  # 200's is missing
])
def test_bad_csv_names_file_line_and_field(tmp_path, text, expect):
    p = _csv(tmp_path, text)
    with pytest.raises(UserError) as e:
        load_observations(p)
    msg = str(e.value)
    assert msg.startswith(f"{p}: ") and expect in msg and "\n" not in msg


@pytest.mark.parametrize("text, expect", [
    ("losses:\n  - {step: 1, loss: 2}\n  - {step: 2, loss: oops}\n  - {step: 3, loss: 1}\n",
     "losses entry 2, field 'loss': expected a number, got 'oops'"),
    ("steps: []\n", "missing field 'losses'"),
    ("losses: [\n", "line 2: invalid YAML"),
    ("losses:\n  - {step: 1, loss: 2}\n  - {step: 2, Loss: 1.5}\n  - {step: 3, loss: 1}\n  - {step: 4, loss: 1}\n",
     "losses entry 2: missing field 'loss' (have: step, Loss)"),   # a typo, not a missing point: named
    ("losses:\n  - {step: 1, loss: 2}\n  - {step: 2, loss: 1.5}\n  - {step: 3, loss: 1}\n"
     "speed: {samples: [{ps: 1, workers: 0, steps_per_s: 1}]}\n", "speed.samples entry 1, field 'workers': must be > 0"),
    ("losses:\n  - {step: 1, loss: 2}\n  - {step: 2, loss: 1.5}\n  - {step: 3, loss: 1}\ntarget: {delta: -1}\n",
     "target, field 'delta': must be > 0"),
])
def test_bad_yaml_names_entry_and_field(tmp_path, text, expect):
    p = tmp_path / "obs.yaml"
    p.write_text(text)
    with pytest.raises(UserError) as e:
        load_observations(p)
    assert str(e.value).startswith(f"{p}: ") and expect in str(e.value)


def test_missing_cells_are_skipped_and_a_loss_of_0_is_fitted_at_a_stand_in_as_predict_curve_reads_them(tmp_path):
    """`predict curve` reads empty, nan and ±inf cells as missing points and a loss of 0 (float32 underflow) at half
    the smallest positive loss; `predict FILE.csv` refused the same file ('expected a number, got 'nan'',
    'must be > 0, got '0'')."""
    clean = "step,loss\n100,2.0\n200,1.5\n400,1.0\n500,0.8\n600,{}\n"
    holes = "step,loss\n100,2.0\n200,1.5\n300,nan\n350,\n380,inf\n390,-inf\nnan,1.1\n400,1.0\n500,0.8\n600,{}\n"
    a = load_observations(_csv(tmp_path, holes.format(0)))
    assert list(a.steps) == [100, 200, 400, 500, 600] and a.losses[-1] == 0
    b = load_observations(_csv(tmp_path, clean.format(0.4), "standin.csv"))   # half the smallest positive loss
    assert predict(a, 4).fit.curve == predict(b, 4).fit.curve
    y = tmp_path / "obs.yaml"
    y.write_text("losses:\n" + "".join(f"  - {{step: {k}, loss: {v}}}\n" for k, v in
                                       ((100, 2.0), (200, 1.5), (300, ".nan"), (350, "null"), (400, 1.0), (500, 0.8),
                                        (600, 0))))
    assert predict(load_observations(y), 4).fit.curve == predict(b, 4).fit.curve
    r = run(_csv(tmp_path, holes.format(0)), "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["points"] == 5
    assert r.stderr == ("note: 1 point of loss at 0 leaves no loss to model: fitted as half the smallest loss logged "
                        "(or half the target's, if lower)\n")


def test_missing_file_and_unknown_type(tmp_path):
    with pytest.raises(UserError, match="file not found"):
        load_observations(tmp_path / "nope.yaml")
    with pytest.raises(UserError, match="unknown input type"):
        load_observations(tmp_path / "x.txt")


def test_loss_only_input_predicts_steps_without_table(tmp_path):
    rep = predict(load_observations(_csv(tmp_path, "step,loss\n100,2.0\n200,1.5\n300,1.2\n400,1.1\n")), 4)
    assert rep.rows == [] and rep.steps.value >= 0


def test_yaml_predict_json_parses_and_the_table_cuts_nothing_at_80_columns():
    import json
    import os
    import subprocess
    import sys

    from dlsched.paths import REPO_ROOT

    for example in ("resnet50_allreduce.yaml", "resnet50_ps_table2.yaml"):
        args = [sys.executable, "-m", "dlsched.cli", "predict", f"examples/predict/{example}", "--gpus", "10"]
        env = dict(os.environ, COLUMNS="80")
        table = subprocess.run(args, capture_output=True, text=True, cwd=REPO_ROOT, env=env, timeout=120)
        assert table.returncode == 0 and "…" not in table.stdout, table.stderr
        assert all(len(line) <= 80 for line in table.stdout.splitlines())
        out = json.loads(subprocess.run(args + ["--json"], capture_output=True, text=True, cwd=REPO_ROOT, env=env,
                                        timeout=120).stdout)
        assert out["model"] == "optimus" and sum(c["best"] for c in out["configurations"]) == 1


@pytest.mark.parametrize("plot, expect", [
    ("missing/p.png", "missing' does not exist"),
    ("a-file/p.png", "a-file' is a file, not a folder"),
    (".", "is a folder; give a file name"),
])
def test_an_unwritable_plot_path_is_one_line_exit_2_before_anything_prints(tmp_path, plot, expect):
    (tmp_path / "a-file").write_text("")
    r = run(EXAMPLES / "resnet50_allreduce.yaml", "--plot", tmp_path / plot)
    assert r.returncode == 2, r.stdout + r.stderr   # was a FileNotFoundError traceback, exit 1, after the table
    assert r.stdout == "" and r.stderr.count("\n") == 1 and expect in r.stderr and "--plot" in r.stderr


def test_json_with_a_plot_prints_only_the_json_object(tmp_path):
    r = run(EXAMPLES / "resnet50_allreduce.yaml", "--json", "--plot", tmp_path / "p.png")
    assert r.returncode == 0, r.stderr
    assert "configurations" in json.loads(r.stdout)   # "plot written to" was a line after the object
    assert (tmp_path / "p.png").stat().st_size > 0


def test_a_bad_batch_names_the_batch_option():
    r = run(EXAMPLES / "resnet50_allreduce.yaml", "--batch", "0")
    assert r.returncode == 2 and r.stderr == "error: --batch: must be > 0, got 0\n"   # named --global-batch


def test_the_command_lines_target_replaces_the_files():
    """`--target-loss 0.01` on a file with `target: {delta: ...}` was "give either a target loss or a delta, not
    both", exit 2: the flag, which the help says predicts the time to this loss "instead", overrides the file."""
    by = {}
    for target in ("0.3", "0.2", "0.17"):   # the last point is 0.2361: 0.3 is behind it
        r = run(EXAMPLES / "resnet50_allreduce.yaml", "--target-loss", target, "--json")
        assert r.returncode == 0, r.stderr
        by[target] = json.loads(r.stdout)["remaining_steps"]
    assert by["0.3"] == 0 < by["0.2"] < by["0.17"] < math.inf
    r = run(EXAMPLES / "resnet50_allreduce.yaml", "--target-loss", "0.01")   # below the fitted floor
    assert r.returncode == 0 and "remaining steps: never (the fitted loss levels off at 0.14" in r.stdout, r
    assert "above the target 0.01)" in r.stdout and "inf" not in r.stdout
    r = run(EXAMPLES / "resnet50_allreduce.yaml", "--delta", "0.001", "--target-loss", "0.2")
    assert r.returncode == 2 and r.stderr == "error: --delta and --target-loss: give one, not both\n", r


def test_a_target_loss_and_delta_in_the_file_is_one_line_naming_its_field(tmp_path):
    p = tmp_path / "obs.yaml"
    p.write_text("losses:\n  - {step: 1, loss: 2}\n  - {step: 2, loss: 1.5}\n  - {step: 3, loss: 1.2}\n"
                 "target: {delta: 0.001, loss: 0.5}\n")
    r = run(p)
    assert r.returncode == 2 and r.stderr == f"error: {p}: field 'target': give either a loss or a delta, not both\n"
    assert run(p, "--target-loss", "1.0").returncode == 0    # the command line's target settles it


def test_a_rising_loss_is_said_not_converged_on_stderr(tmp_path):
    """A loss going 1, 2, 3, 4 was `remaining steps: 0 (80 % interval 0 - 11,431)`: converged, without a word."""
    p = tmp_path / "up.yaml"
    p.write_text("losses:\n" + "".join(f"  - {{step: {k}, loss: {k}}}\n" for k in (1, 2, 3, 4)))
    for args in ((), ("--json",)):
        r = run(p, *args)
        assert r.returncode == 0, r.stderr
        assert r.stderr == (f"warning: {p}: the loss rises over the points (1 at step 1 to 4 at step 4): not "
                            "converged; the fitted curve only falls, so its remaining steps are no prediction\n"), r
    assert "warning" not in run(EXAMPLES / "resnet50_allreduce.yaml", "--json").stderr


@pytest.mark.parametrize("body, expect", [
    ("losses:\n  - {step: 1, loss: 2}\n  - {step: 2, loss: -1.0}\n  - {step: 3, loss: 1}\n",
     "losses entry 2, field 'loss': must be >= 0, got -1.0"),
    ("losses:\n  - {step: 1, loss: 2}\n  - {step: 2, loss: -1}\n  - {step: 3, loss: 1}\n",
     "losses entry 2, field 'loss': must be >= 0, got -1"),
    ("losses:\n  - {step: 1, loss: 2}\n  - {step: -2, loss: 1.5}\n  - {step: 3, loss: 1}\n",
     "losses entry 2, field 'step': must be >= 0, got -2"),
    ("losses:\n  - {step: 1, loss: 2}\n  - {step: 2, loss: 1.5}\n  - {step: 3, loss: 1}\n"
     "speed: {samples: [{num_gpus: 1, num_nodes: 1, local_batch: -3, step_time: 0.1}]}\n",
     "speed.samples entry 1, field 'local_batch': must be > 0, got -3"),
])
def test_a_yaml_number_is_printed_as_written_not_as_a_numpy_repr(tmp_path, body, expect):
    """`must be > 0, got np.float64(-1.0)`: the value came out of a pandas frame as a numpy scalar."""
    p = tmp_path / "obs.yaml"
    p.write_text(body)
    with pytest.raises(UserError) as e:
        load_observations(p)
    assert str(e.value) == f"{p}: {expect}"


def test_option_values_are_printed_as_numbers():
    r = run(EXAMPLES / "resnet50_allreduce.yaml", "--target-loss", "-1")
    assert r.returncode == 2 and r.stderr == "error: --target-loss: must be > 0, got -1\n", r


def test_a_speed_row_whose_step_and_loss_are_nan_is_still_a_speed_sample(tmp_path):
    """A speed row written `nan,nan,...` (a frame's NaN, not an empty cell) was read as a missing loss point and
    skipped: its speed sample was lost without a word."""
    lines = (EXAMPLES / "resnet50_allreduce.csv").read_text().splitlines()
    i = next(i for i, ln in enumerate(lines) if ln.startswith(",,"))
    lines[i] = "nan,nan," + lines[i][2:]
    obs = load_observations(_csv(tmp_path, "\n".join(lines) + "\n"))
    want = load_observations(EXAMPLES / "resnet50_allreduce.csv")
    assert len(obs.speed) == len(want.speed) and len(obs.steps) == len(want.steps)
