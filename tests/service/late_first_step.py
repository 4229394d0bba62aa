"""A script whose first ``--late`` resize newcomers (worker ids 1..N) join the grown group, then hold its first step
(each writes ``GATE/worker-<id>.joined`` first) until ``GATE/release`` exists; the group trains on until ``GATE/end``
exists. So a test sees a grow whose larger group has formed but recorded no step yet, whatever the load."""
import dlsched.torch as dt
from gated_loop import epoch_until_gate, faulty_newcomer, hold, linear_job

gate, wid, late = faulty_newcomer("late")
model, optimizer, loader = linear_job(4096)


def hold_first_step() -> None:
    joined = gate / f"worker-{wid}.joined"
    if late and not joined.exists():   # in the grown group now: its peers wait for this step's gradients
        joined.touch()
        hold(lambda: (gate / "release").exists())


for _ in dt.remaining_epochs(10**6):
    if epoch_until_gate(model, optimizer, loader, gate, before_step=hold_first_step):
        break
