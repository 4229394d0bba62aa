"""A worker that exits with bad input (2) fails the job at once, with its line: a restart would do the same."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

from tests.torch.test_elastic_script import SCRIPT
from tests.train.helpers import REPO


@pytest.mark.parametrize("command, line", [
    (["python", SCRIPT, "--bogus"], "user_script.py: error: unrecognized arguments: --bogus"),   # argparse
    (["python", "-c", "import dlsched.torch as dt; dt.init(); dt.report(acc='x')"],                 # a UserError
     "report: acc='x' is not a number (give a float, an int, a numpy scalar or a one-element tensor)"),
])
def test_bad_input_fails_at_once_with_one_line(tmp_path, command, line):
    """It was restarted three times (a group start each), then failed with the coordinator's traceback."""
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    r = subprocess.run([sys.executable, "-m", "dlsched.train.run", "--job-dir", str(tmp_path / "job"), "--workers", "2",
                        "--threads", "1", "--", *command], env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 2, r.stdout[-2000:] + r.stderr[-2000:]
    assert re.fullmatch(rf"error: worker \d+ exited 2: {re.escape(line)}", r.stderr.strip()), r.stderr[-2000:]
    assert "lost" not in r.stdout    # no restart
    status = json.loads((tmp_path / "job" / "status.json").read_text())
    assert status["state"] == "failed" and line in status["error"]
