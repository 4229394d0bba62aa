"""The gradient noise estimate against the analytical value of a linear regression with known noise."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.train.helpers import REPO

SCRIPT = str(Path(__file__).with_name("noise_script.py"))


@pytest.mark.parametrize("max_local_batch", [[], ["16"]], ids=["split", "accumulated"])
def test_single_worker_micro_batch_split_estimates_the_gradient_noise_within_10_percent(max_local_batch):
    """``accumulated``: 4 micro-batches of 16 per step; their own |g|² are the small batch, the accumulated
    gradient the large one (no split forward)."""
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    out = subprocess.run([sys.executable, SCRIPT, *max_local_batch], env=env, capture_output=True, text=True,
                         timeout=600, check=True)
    r = json.loads(out.stdout.strip().splitlines()[-1])
    assert r["sqr"] == pytest.approx(r["true_sqr"], rel=0.10)
    assert r["trace"] == pytest.approx(r["true_trace"], rel=0.10)
    assert r["trace"] / r["sqr"] == pytest.approx(r["true_trace"] / r["true_sqr"], rel=0.10)


@pytest.mark.slow
@pytest.mark.parametrize("max_local_batch", [[], ["8"]], ids=["plain", "accumulated"])
def test_two_workers_estimate_it_from_the_all_reduce_within_10_percent(tmp_path, max_local_batch):
    """``accumulated``: each rank's 32 as 4 micro-batches under no_sync, all-reduced on the last."""
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    subprocess.run([sys.executable, "-m", "dlsched.train.run", "--job-dir", str(tmp_path), "--workers", "2",
                    "--threads", "1", "--no-replace-stragglers", "--", "python", SCRIPT, *max_local_batch],
                   env=env, capture_output=True, text=True, timeout=600, check=True)
    r = json.loads((tmp_path / "logs" / "worker-0.log").read_text().strip().splitlines()[-1])
    assert r["sqr"] == pytest.approx(r["true_sqr"], rel=0.10)
    assert r["trace"] == pytest.approx(r["true_trace"], rel=0.10)
    last = [json.loads(line) for line in (tmp_path / "progress.jsonl").read_text().splitlines()
            if '"grad_noise"' in line][-1]["grad_noise"]
    assert last["var"] * last["reference_batch"] == pytest.approx(r["trace"], rel=1e-6)  # what the service reads
