"""A script whose first ``--crash`` resize newcomers (worker ids 1..N) exit 3 during start-up, before joining; the
group trains on until ``GATE/end`` exists. So a test sees a failed resize while the job still runs, whatever the load."""
import argparse
import os
import sys
import time
from pathlib import Path

import dlsched.torch as dt
from dlsched.train.protocol import WORKER_ENV
from gated_loop import epoch_until_gate, linear_job

ap = argparse.ArgumentParser()
ap.add_argument("--gate", required=True)
ap.add_argument("--crash", type=int, default=1)
args = ap.parse_args()
gate = Path(args.gate)

wid = int(os.environ.get(WORKER_ENV["worker_id"], "0"))
if 0 < wid <= args.crash:
    (gate / f"worker-{wid}.crashed").touch()
    sys.exit(3)

model, optimizer, loader = linear_job(4096)
for _ in dt.remaining_epochs(10**6):   # epochs enough to outlast any test: the gate ends it (no End)
    if epoch_until_gate(model, optimizer, loader, gate):
        break
