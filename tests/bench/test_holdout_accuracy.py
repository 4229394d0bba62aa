"""bench/holdout_accuracy.py on a one-run folder: it runs, prints the figures for both metrics at every fraction,
and the CLI agrees with predict_curve; the committed hold-out index names a file, schedule and licence per run."""
import shutil
import sys

import pandas as pd

from dlsched.paths import REPO_ROOT
from dlsched.perf.schedule import parse_schedule

sys.path.insert(0, str(REPO_ROOT / "bench"))

import holdout_accuracy  # noqa: E402

HOLDOUT = REPO_ROOT / "bench" / "curves" / "holdout"


def test_the_committed_index_is_complete():
    index = pd.read_csv(HOLDOUT / "index.csv")
    assert len(index) == 21 and index.licence.str.len().gt(0).all()
    for row in index.itertuples():
        d = pd.read_csv(HOLDOUT / row.file)
        assert {"step", "train_loss", "loss", "accuracy", "lr"} <= set(d.columns)
        assert d.step.iloc[-1] == row.budget
        parse_schedule(row.schedule, row.budget)   # a SPEC the CLI accepts


def test_one_run_is_scored_and_the_cli_agrees(tmp_path, capsys):
    index = pd.read_csv(HOLDOUT / "index.csv")
    row = index[index.file == "cancerlin-cosine.csv"]
    shutil.copy(HOLDOUT / "cancerlin-cosine.csv", tmp_path)
    row.to_csv(tmp_path / "index.csv", index=False)
    assert holdout_accuracy.main(["--dir", str(tmp_path), "--cli", "2"]) == 0
    out = capsys.readouterr().out
    for metric in ("accuracy", "loss"):
        assert f"== {metric}: 1 hold-out runs" in out
    assert sum(line.lstrip().startswith(("10%", "25%", "50%")) for line in out.splitlines()) == 6
    assert "agrees with predict_curve: 2/2" in out, out
