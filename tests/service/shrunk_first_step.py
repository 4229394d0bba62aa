"""A script whose group, once shrunk, holds its first step at the smaller size (the worker that stays
writes ``GATE/shrunk`` first) until ``GATE/release`` exists; it trains on until ``GATE/end`` exists. So a
test sees a shrink whose smaller group has formed but recorded no step yet, whatever the load."""
import argparse
from pathlib import Path

import dlsched.torch as dt
from gated_loop import epoch_until_gate, hold, linear_job

ap = argparse.ArgumentParser()
ap.add_argument("--gate", required=True)
gate = Path(ap.parse_args().gate)
model, optimizer, loader = linear_job(4096)
largest = [0]   # the largest group this worker has trained in


def hold_first_shrunk_step() -> None:
    if dt.world_size() < largest[0] and not (gate / "shrunk").exists():   # the smaller group's first step
        (gate / "shrunk").touch()
        hold(lambda: (gate / "release").exists())
    largest[0] = max(largest[0], dt.world_size())


for _ in dt.remaining_epochs(10**6):
    if epoch_until_gate(model, optimizer, loader, gate, before_step=hold_first_shrunk_step):
        break
