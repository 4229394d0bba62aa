"""An ensemble's LOSS is its best member's newest loss (``service.member_losses``), not whichever member reported
last: its members are different models trained by turns, and the newest row's loss jumped between them. The live
loop over real SQLite with the recording backend (which starts nothing: the test writes the runtime's step rows),
then a restarted loop on the same store, and `dlsched status`'s cell."""
import json

from dlsched.backends.recording import RecordingBackend
from dlsched.commands.service import job_rows
from dlsched.service.dashboard_routes import overview
from dlsched.service.loop import LiveLoop
from dlsched.service.store import RUNNING, Store
from dlsched.spec import load_job_spec
from tests.service.conftest import cluster, job_yaml
from tests.service.test_loop import run_until

ENSEMBLE = "name: e\nkind: ensemble\nentry: dlsched.train.fleet_spec:from_yaml\nparams: {path: e.yaml}\ngpus: 1\n"


def steps(loop, job, *rows) -> None:
    with open(loop.job_dir(job) / "progress.jsonl", "a") as f:
        for t, member, loss in rows:
            f.write(json.dumps({"time": t, "step": int(t), "samples": 32 * int(t), "loss": loss, "workers": 1,
                                "batch_size": 32, "member": member, "member_step": int(t)}) + "\n")


def test_an_ensembles_loss_is_its_best_members_newest_across_a_restart(tmp_path):
    store = Store(tmp_path / "s.db")
    loop = LiveLoop(store, RecordingBackend(), cluster("test-fifo", (1,)), tmp_path)
    ens = store.submit(load_job_spec(ENSEMBLE))
    plain = store.submit(load_job_spec(job_yaml("p", samples=10**6)))
    run_until(loop, store, lambda: store.get(ens).state == RUNNING)
    loop.job_dir(ens).mkdir(parents=True, exist_ok=True)
    steps(loop, ens, (1.0, "a", 0.9), (2.0, "a", 0.2), (3.0, "b", 2.3))   # b starts after a trained well
    run_until(loop, store, lambda: store.get(ens).samples == 96)
    assert store.get(ens).last_loss == 0.2            # was 2.3: b's, the last row's
    steps(loop, ens, (4.0, "a", 0.4))                 # a's newest is worse now: its newest counts, not its best ever
    run_until(loop, store, lambda: store.get(ens).samples == 128)
    assert store.get(ens).last_loss == 0.4
    # a restarted service reads the members' newest from the store once
    again = LiveLoop(store, RecordingBackend(), cluster("test-fifo", (1,)), tmp_path)
    steps(again, ens, (5.0, "b", 1.7))
    run_until(again, store, lambda: store.get(ens).samples == 160)
    assert store.get(ens).last_loss == 0.4
    # `dlsched status` says whose loss it is, as the dashboard does (`best`); a plain job's is its own
    row = {"name": "e", "state": "running", "num_gpus": 1, "last_loss": 0.4}
    queue = {j["id"]: j for j in overview(store, [])["queue"]}   # the dashboard's row: its loss, and that it is best-of
    assert (queue[ens]["loss"], queue[ens]["ensemble"], queue[plain]["ensemble"]) == (0.4, True, False)
    assert [r[6] for r in job_rows([row | {"id": ens, "ensemble": {"members": {}, "flotillas": []}},
                                    row | {"id": plain, "last_loss": 1.5}])] == ["best 0.4", "1.5"]
    store.close()
