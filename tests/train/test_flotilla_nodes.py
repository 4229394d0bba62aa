"""A spread ensemble's node runners (``train/flotilla_nodes.py``): the coordinator's side against real runner
processes and real flotillas, started here by a launcher that runs each runner as a local process (Ray's bundles are
``tests/backends/test_ray_service.py``'s)."""
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from dlsched.paths import REPO_ROOT
from dlsched.train.flotilla import MemberLost
from dlsched.train.flotilla_nodes import run_on_nodes
from tests.waiting import wait_until

pytestmark = pytest.mark.slow

MODELS = REPO_ROOT / "examples" / "ensemble" / "models.py"
ENSEMBLE = """name: spread
dataset: {kind: synthetic, train: 128, val: 32}
batch_size: 32
convergence: {patience: 1000, min_delta: 0.0, max_epochs: 1000}
models:
  - {name: a, model: "%(m)s:MLPHead", kwargs: {hidden: 8}}
  - {name: b, model: "%(m)s:MLPHead", kwargs: {hidden: 8}, max_epochs: %(b_epochs)d}
  - {name: c, model: "%(m)s:MLPHead", kwargs: {hidden: 16}}
"""


class ProcessLauncher:
    """Each runner a local process, its handle a Popen that also says its node."""

    def __init__(self):
        self.started = []

    def start(self, argv, log_path, visible, module, node):
        with open(log_path, "ab") as log:
            p = subprocess.Popen([sys.executable, "-c", f"import sys; from {module} import main; main(sys.argv[1:])",
                                  *argv], stdout=log, stderr=subprocess.STDOUT)
        p.node = node
        self.started.append(p)
        return p


def _run(tmp_path, b_epochs, on_report, launcher):
    spec = tmp_path / "ens.yaml"
    spec.write_text(ENSEMBLE % {"m": MODELS, "b_epochs": b_epochs})
    ensemble = {"entry": "dlsched.train.fleet_spec:from_yaml", "params": {"path": str(spec)}, "seed": 0,
                "ckpt_dir": str(tmp_path / "ckpt")}
    (tmp_path / "ckpt").mkdir(exist_ok=True)
    return run_on_nodes(launcher, tmp_path, ensemble, [("n1", [("a", "b")]), ("n2", [("c",)])], {}, [[0], [0]],
                        [0, 0], {}, lambda: False, on_report)


def test_each_nodes_runner_trains_its_flotilla_and_a_member_leaving_pauses_every_node(tmp_path):
    got = []
    converged, runs = _run(tmp_path, 1, got.append, launcher := ProcessLauncher())
    assert [p.node for p in launcher.started] == ["n1", "n2"] and all(p.returncode == 0 for p in launcher.started)
    assert converged == {"b"} and sorted(r.members for r in runs) == [("a", "b"), ("c",)]
    final = {m[0]: (m[1], m[2]) for m in got if m[4] is None}
    assert final["b"] == ("max_epochs", 1) and final["a"][0] == final["c"][0] == "paused", final   # c on n2 too
    assert not list(tmp_path.glob(".fleet-*.stop"))


def test_a_runner_killed_by_a_signal_is_a_lost_member_and_the_other_node_pauses(tmp_path):
    launcher = ProcessLauncher()
    got = []

    def kill_n2(msg):
        if msg[0] == "c" and launcher.started[1].poll() is None:   # c trains on n2: kill n2's runner
            launcher.started[1].send_signal(signal.SIGKILL)

    with pytest.raises(MemberLost) as lost:
        _run(tmp_path, 1000, lambda m: (got.append(m), kill_n2(m)), launcher)
    assert lost.value.lost == [("node runner of c", -signal.SIGKILL)], lost.value.lost
    assert {m[0]: m[1] for m in got if m[4] is None} == {"a": "paused", "b": "paused"}   # n1's checkpointed
    wait_until(lambda: all(p.poll() is not None for p in launcher.started), 30, "every runner ended")
