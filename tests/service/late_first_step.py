"""A script whose first ``--late`` resize newcomers (worker ids 1..N) join the grown group, then hold its first step
(each writes ``GATE/worker-<id>.joined`` first) until ``GATE/release`` exists; the group trains on until ``GATE/end``
exists. So a test sees a grow whose larger group has formed but recorded no step yet, whatever the load."""
import time

from torch import nn

import dlsched.torch as dt
from gated_loop import faulty_newcomer, hold, linear_job

gate, wid, late = faulty_newcomer("late")
model, optimizer, loader = linear_job(4096)


def epoch() -> bool:
    """One pass, at least 0.02 s a step, cut short once ``gate/end`` exists; True when it does."""
    for xb, yb in loader:
        joined = gate / f"worker-{wid}.joined"
        if late and not joined.exists():   # in the grown group now: its peers wait for this step's gradients
            joined.touch()
            hold(lambda: (gate / "release").exists())
        optimizer.zero_grad()
        loss = nn.functional.mse_loss(model(xb), yb)
        loss.backward()
        optimizer.step()
        dt.report(loss=loss.item())
        time.sleep(0.02)
        if (gate / "end").exists():
            return True
    return (gate / "end").exists()


for _ in dt.remaining_epochs(10**6):
    if epoch():
        break
