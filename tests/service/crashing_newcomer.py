"""A script whose first ``--crash`` resize newcomers (worker ids 1..N) exit 3 during start-up, before joining; the
group trains on until ``GATE/end`` exists. So a test sees a failed resize while the job still runs, whatever the load."""
import sys

from gated_loop import faulty_newcomer, train_until_gate

gate, wid, crash = faulty_newcomer("crash")
if crash:
    (gate / f"worker-{wid}.crashed").touch()
    sys.exit(3)

train_until_gate(gate)
