"""One parameter-server rank as its own process: what the Ray launcher runs in each of a PS job's bundles.

``python -m dlsched.train.launcher --ray-worker dlsched.train.ps_process --job-dir DIR --worker-id RANK
--generation N`` reads the generation ``ps_runner`` wrote to ``DIR/ps/generation-N.json`` and runs that rank
(a server for RANK < P, else a worker). The forked group of a local run calls ``run_rank`` directly.
"""
from __future__ import annotations

import argparse
from pathlib import Path

from dlsched.train.no_space import exits_no_space
from dlsched.train.ps import run_rank
from dlsched.train.ps_runner import commit_round, read_generation


def main(argv: list[str]) -> None:
    ap = argparse.ArgumentParser(prog="python -m dlsched.train.ps_process")
    ap.add_argument("--job-dir", required=True, type=Path)
    ap.add_argument("--worker-id", required=True, type=int, help="the rank: servers first, then workers")
    ap.add_argument("--generation", required=True, type=int)
    a = ap.parse_args(argv)
    with exits_no_space():   # its runtime stops as out of disk, not as a rank lost
        run_rank(a.worker_id, read_generation(a.job_dir, a.generation), commit_round)
