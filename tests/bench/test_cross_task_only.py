"""bench/cross_task_only.py --against: a variant judged row by row against saved rows (a median of 34 curves jumps
when one curve crosses it); a path it cannot read is one error line before the minute of predictions."""
import subprocess
import sys

import pandas as pd
import pytest

from dlsched.paths import REPO_ROOT

sys.path.insert(0, str(REPO_ROOT / "bench"))

import cross_task_only  # noqa: E402


def rows(final, steps):
    return pd.DataFrame({"curve": ["a", "b", "c"], "observed": [0.1, 0.1, 0.25],
                         "final_err": final, "steps_err": steps})


def test_compare_counts_rows_that_moved_more_than_half_a_point_and_their_geometric_means(capsys):
    base = rows([0.10, 0.02, 0.05], [0.40, float("nan"), 0.20])
    cross_task_only.compare(rows([0.05, 0.024, 0.08], [0.20, 0.30, 0.20]), base)
    out = capsys.readouterr().out
    # at 10 %: a 0.10 -> 0.05 better, b 0.02 -> 0.024 within half a point; b's steps have no saved value to compare
    assert "after 10 %: final 1 better / 0 worse of 2, 4.5% -> 3.5%;  steps 1 better / 0 worse of 1, 40.0% -> 20.0%" in out
    assert "after 25 %: final 0 better / 1 worse of 1, 5.0% -> 8.0%;  steps 0 better / 0 worse of 1" in out
    assert "(3 matched)" in out


@pytest.mark.parametrize("args, expected", [
    (("--against", "/nonexistent/rows.csv"), "--against: cannot read '/nonexistent/rows.csv'"),
    (("--against",), "--against needs a value"),
    (("--own", "level"), "--own must be alpha or drop, got 'level'"),
])
def test_bad_option_is_one_error_line_before_any_prediction(args, expected):
    r = subprocess.run([sys.executable, str(REPO_ROOT / "bench" / "cross_task_only.py"), *args], capture_output=True,
                       text=True, cwd=REPO_ROOT, env={"PYTHONPATH": str(REPO_ROOT / "src"), "PATH": "/usr/bin:/bin"},
                       timeout=60)
    err = r.stderr.strip()
    assert r.returncode == 1 and "Traceback" not in err and "\n" not in err and err.startswith(expected), err
