"""bench/public_curves.py: the public curves are not committed, so a missing folder is one line and exit 0; and a
folder's curves reach ``predict_curve`` exactly as ``dlsched predict curve`` sends them (same reader, schedule,
calibration and prior). The folder here is built from one of our own dev-set runs, not from public data."""
import json
import sys

import numpy as np
import pandas as pd
import pytest

from dlsched.commands.predict_curve import run_curve
from dlsched.paths import REPO_ROOT
from dlsched.perf.calibration import load_calibration
from dlsched.perf.curve_predict import predict_curve

sys.path.insert(0, str(REPO_ROOT / "bench"))

import public_curves  # noqa: E402

RUN = REPO_ROOT / "bench" / "curves" / "charlm-step.csv"
BUDGET = 800.0


def test_a_missing_folder_is_one_line_and_exit_0(tmp_path, capsys):
    assert public_curves.main(["--dir", str(tmp_path / "none")]) == 0
    out = capsys.readouterr().out
    assert out.count("\n") == 1 and "manifest.csv" in out and "public_sources.csv" in out


@pytest.fixture
def folder(tmp_path):
    d = pd.read_csv(RUN)
    d[["step", "loss", "lr"]].set_axis(["x", "y", "lr"], axis=1).to_csv(tmp_path / "logged.csv", index=False)
    d[["step", "loss"]].set_axis(["x", "y"], axis=1).to_csv(tmp_path / "spec.csv", index=False)
    pd.DataFrame({"file": ["logged.csv", "spec.csv"], "repo": "own run", "task": "charlm", "metric": "loss",
                  "schedule": ["lr-column", "step:400,600:0.1"], "budget": BUDGET}).to_csv(tmp_path / "manifest.csv",
                                                                                        index=False)
    return tmp_path


@pytest.mark.parametrize("observed", [80.0, 300.0])
def test_each_curve_reaches_the_predictor_as_the_cli_sends_it(folder, observed, capsys):
    curves = public_curves.load_curves(folder)
    assert [c.name for c in curves] == ["logged", "spec"]
    for c, (spec, lr) in zip(curves, [("lr-column", "lr"), ("step:400,600:0.1", None)]):
        assert run_curve(folder / f"{c.name}.csv", "x", "y", BUDGET, spec, observed, None, 0.95, "loss", lr, None,
                         True, None) == 0
        cli = json.loads(capsys.readouterr().out)
        n = int(np.searchsorted(c.x, observed, side="right"))
        p = predict_curve(c.x[:n], c.y[:n], c.schedule, metric=c.metric, target_fraction=0.95, prior="shipped",
                          calibration=load_calibration())
        assert (p.model, p.final_value, p.steps_to_target) == (cli["model"], cli["final_value"], cli["steps_to_target"])


def test_the_report_gives_the_final_error_in_the_metrics_own_units_and_the_fixed_target_steps(folder, capsys):
    public_curves.report(public_curves.load_curves(folder))
    out = capsys.readouterr().out
    medians = [line for line in out.splitlines() if line.lstrip().startswith("after")]
    assert len(medians) == 3, medians
    chances = [line for line in out.splitlines() if "% observed: Brier" in line]   # p_reach against the outcome
    assert len(chances) == 3, out
    assert all("in the metric's own units" in m and "as a fixed --target" in m for m in medians), medians
