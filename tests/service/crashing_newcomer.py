"""A script whose first ``--crash`` resize newcomers (worker ids 1..N) exit 3 during start-up, before joining; the
group trains on until ``GATE/end`` exists. So a test sees a failed resize while the job still runs, whatever the load."""
import argparse
import os
import sys
from pathlib import Path

from dlsched.train.protocol import WORKER_ENV
from gated_loop import train_until_gate

ap = argparse.ArgumentParser()
ap.add_argument("--gate", required=True)
ap.add_argument("--crash", type=int, default=1)
args = ap.parse_args()
gate = Path(args.gate)

wid = int(os.environ.get(WORKER_ENV["worker_id"], "0"))
if 0 < wid <= args.crash:
    (gate / f"worker-{wid}.crashed").touch()
    sys.exit(3)

train_until_gate(gate)
