"""A script whose first ``--hang`` resize newcomers (worker ids 1..N) hang in start-up, before joining, until killed
(each writes its pid to ``GATE/worker-<id>.hung`` first); the group trains on until ``GATE/end`` exists. So a test
sees a resize that never completes while the job still runs, whatever the load."""
import argparse
import os
from pathlib import Path

from dlsched.train.protocol import WORKER_ENV
from gated_loop import hold, train_until_gate

ap = argparse.ArgumentParser()
ap.add_argument("--gate", required=True)
ap.add_argument("--hang", type=int, default=1)
args = ap.parse_args()
gate = Path(args.gate)

wid = int(os.environ.get(WORKER_ENV["worker_id"], "0"))
if 0 < wid <= args.hang:
    (gate / f"worker-{wid}.hung").write_text(str(os.getpid()))
    hold(lambda: False)

train_until_gate(gate)
