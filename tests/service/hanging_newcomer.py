"""A script whose first ``--hang`` resize newcomers (worker ids 1..N) hang in start-up, before joining, until killed
(each writes its pid to ``GATE/worker-<id>.hung`` first); the group trains on until ``GATE/end`` exists. So a test
sees a resize that never completes while the job still runs, whatever the load."""
import os

from gated_loop import faulty_newcomer, hold, train_until_gate

gate, wid, hang = faulty_newcomer("hang")
if hang:
    (gate / f"worker-{wid}.hung").write_text(str(os.getpid()))
    hold(lambda: False)

train_until_gate(gate)
