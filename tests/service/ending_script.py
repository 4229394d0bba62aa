"""A script that ends on its own (a plain loop, no ``remaining_epochs``: no End) once ``GATE/end`` exists; a
later worker (a resize's newcomer) says it started, then holds before joining until ``GATE/release`` exists.
So a test can have a resize in flight when the job ends, in that order, whatever the machine's load."""
import argparse
import os
from pathlib import Path

from dlsched.train.protocol import WORKER_ENV
from gated_loop import epoch_until_gate, hold, linear_job

ap = argparse.ArgumentParser()
ap.add_argument("--gate", required=True)
gate = Path(ap.parse_args().gate)

wid = int(os.environ.get(WORKER_ENV["worker_id"], "0"))
if wid > 0:
    (gate / f"worker-{wid}.started").touch()
    hold(lambda: (gate / "release").exists())

# one pass (a loader iterated again outside remaining_epochs is refused), >= 250 s of steps: it outlasts the test. A
# newcomer enters the loader once even after the end: it joins (is ready) only there
model, optimizer, loader = linear_job(100_000)
epoch_until_gate(model, optimizer, loader, gate)
