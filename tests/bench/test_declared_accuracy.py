"""bench/declared_accuracy.py predicts a run's accuracy as `dlsched predict curve --metric accuracy` does."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).parents[2] / "bench"
sys.path.insert(0, str(BENCH))

import declared_accuracy as da  # noqa: E402


def test_the_bench_row_is_what_the_cli_prints_for_the_same_prefix():
    run = next(r for r in da.runs() if r.file == "tinylm-cosine.csv")
    row = next(r for r in da.run_rows(run, without_task=False) if r["observed"] == 0.25)
    cut = 0.25 * run.budget
    out = subprocess.run([sys.executable, "-m", "dlsched.cli", "predict", "curve", str(BENCH / "curves" / run.file),
                          "--x", "step", "--y", "accuracy", "--metric", "accuracy", "--budget", str(run.budget),
                          "--schedule", run.schedule, "--observed-until", str(cut), "--regime", run.regime, "--json"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["final_value"] == pytest.approx(row["accuracy_predicted"], rel=1e-9)
    assert {r.task for r in da.runs()} == {"digits", "charlm", "tinylm", "digitsft", "charft"}   # not the over-fitting runs


def test_the_learnt_prior_never_sees_the_runs_own_fit_and_beats_the_shipped_one_on_a_language_model():
    tiny = [r for r in da.runs() if r.task == "tinylm"]
    run = next(r for r in tiny if r.file == "tinylm-cosine.csv")
    fits = da.accuracy_fits(tiny)
    with_own = da.run_rows(run, fits)
    without = da.run_rows(run, {k: v for k, v in fits.items() if k != run.file})
    assert [r["learnt_accuracy_predicted"] for r in with_own] == [r["learnt_accuracy_predicted"] for r in without]
    at_25 = next(r for r in with_own if r["observed"] == 0.25)
    assert at_25["learnt_accuracy_err"] < at_25["accuracy_err"], at_25
