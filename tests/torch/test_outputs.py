"""One worker measures the gradient noise by running a step as two halves and joining their outputs: models
whose outputs are not one batched tensor (tests/torch/outputs_script.py, a real standalone process each)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.train.helpers import REPO

SCRIPT = str(Path(__file__).with_name("outputs_script.py"))


@pytest.mark.parametrize("kind, measured", [
    ("loss", True),        # a dict with the model's own mean loss (0-dim): it raised "cannot be concatenated"
    ("state", False),      # plus a (layers, batch, hidden) state: it was joined to (2, batch/2, hidden)
    ("seq-first", False),  # (time, batch, ...) input: it was split along time
])
def test_split_steps_join_outputs_as_the_whole_batch_or_do_not_split(tmp_path, kind, measured):
    env = {k: v for k, v in os.environ.items() if not k.startswith("DLSCHED")}
    env["PYTHONPATH"] = str(REPO / "src")
    r = subprocess.run([sys.executable, SCRIPT, kind], cwd=tmp_path, env=env, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    updates = int(r.stdout.split("measured ")[1].split()[0])
    assert (updates > 0) == measured, r.stdout[-500:]
