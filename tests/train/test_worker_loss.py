"""Worker exits a restart cannot help fail the job at once, with one line: bad input (2), a script error before the
job's first step, a rank that left the loop alone. A failure after progress is restarted, its replay recorded once."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

from dlsched.train.progress_log import read_progress

from tests.torch.test_elastic_script import SCRIPT
from tests.train.helpers import REPO, events


def train(tmp_path, command: list[str]) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    return subprocess.run([sys.executable, "-m", "dlsched.train.run", "--job-dir", str(tmp_path / "job"), "--workers",
                           "2", "--threads", "1", "--no-replace-stragglers", "--", *command],
                          env=env, capture_output=True, text=True, timeout=400)


MISPORTED = """
import sys, torch, dlsched.torch as dt
from torch.utils.data import TensorDataset
net = torch.nn.Linear(2, 1)
model = net if sys.argv[1] == "plain-model" else dt.ElasticDataParallel(net)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
loader = dt.ElasticDataLoader(TensorDataset(torch.randn(16, 2), torch.randn(16, 1)), batch_size=4)
for epoch in range(2):
    for x, y in loader:
        optimizer.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        optimizer.step()
"""


@pytest.mark.parametrize("command, line", [
    (["python", SCRIPT, "--bogus"], "user_script.py: error: unrecognized arguments: --bogus"),   # argparse
    (["python", "-c", "import dlsched.torch as dt; dt.init(); dt.report(acc='x')"],                 # a UserError
     "report: acc='x' is not a number (give a float, an int, a numpy scalar or a one-element tensor)"),
    # a model left unwrapped trained each worker's replica apart, unsaved, and the job finished as if nothing was wrong
    pytest.param(["python", "-c", MISPORTED, "plain-model"], "the training loop started with no model wrapped in "
                 "dt.ElasticDataParallel: wrap it, `model = dt.ElasticDataParallel(net.to(dt.device()))`; a plain "
                 "one's gradients are not all-reduced over the workers and its weights are not checkpointed "
                 "(docs/porting.md)", id="plain-model"),
    # range(2) kept from the DDP script trained epoch 0, then iterated a spent loader (no batch) and finished
    pytest.param(["python", "-c", MISPORTED, "range"], "ElasticDataLoader: iterated again after its epoch ended, "
                 "outside dt.remaining_epochs: loop `for epoch in dt.remaining_epochs(N):`, not `range(N)`: it starts "
                 "each epoch and resumes at the right one after a resize or restart (docs/porting.md)", id="range"),
    # a DDP script's dist.get_rank() at the top: torch's line said to call init_process_group, wrong under dlsched
    pytest.param(["python", "-c", "import torch.distributed as d, dlsched.torch as dt; dt.init(); print(d.get_rank())"],
                 "dlsched: torch.distributed was used before the training loop started; the job's process group forms "
                 "when the loop starts (do not call init_process_group): before it use dt.rank() and dt.world_size() "
                 "(docs/porting.md)", id="rank-before-the-loop"),
])
def test_bad_input_fails_at_once_with_one_line(tmp_path, command, line):
    """It was restarted three times (a group start each), then failed with the coordinator's traceback."""
    r = train(tmp_path, command)
    assert r.returncode == 2, r.stdout[-2000:] + r.stderr[-2000:]
    assert re.fullmatch(rf"error: worker \d+ exited 2: {re.escape(line)}", r.stderr.strip()), r.stderr[-2000:]
    assert "lost" not in r.stdout    # no restart
    status = json.loads((tmp_path / "job" / "status.json").read_text())
    assert status["state"] == "failed" and line in status["error"]


TYPO = """
import torch, dlsched.torch as dt
from torch.utils.data import TensorDataset
dt.init()
model = dt.ElasticDataParallel(torch.nn.Linear(2, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
loader = dt.ElasticDataLoader(TensorDataset(torch.randn(16, 2), torch.randn(16, 1)), batch_size=4)
for epoch in dt.remaining_epochs(1):
    for x, y in loader:
        torch.nn.functional.mse_loss(model(x), y).backward()
        optimzer.step()
"""


@pytest.mark.parametrize("command, line", [
    (["python", "-c", "open('/nonexistent-dlsched/extra.csv')"],       # a missing file, before dt.init()
     re.escape("FileNotFoundError: [Errno 2] No such file or directory: '/nonexistent-dlsched/extra.csv'")),
    (["python", "-c", TYPO], "NameError: name 'optimzer' is not defined.*"),   # in the first step, the group formed
])
def test_a_script_error_before_the_first_step_fails_at_once_naming_every_worker(tmp_path, command, line):
    """It was restarted three times (the traceback printed each time), 30-50 s, its first `lost` line naming only
    the worker seen dead first, before `gave up after 3 restarts`: a restart runs the same code on the same input."""
    r = train(tmp_path, command)
    assert r.returncode == 1, r.stdout[-2000:] + r.stderr[-2000:]
    logs = re.escape(str(tmp_path / "job" / "logs"))
    assert re.fullmatch(r"error: workers \{0: 1, 1: 1\} died before the job's first step, not restarted \(a restart "
                        rf"would fail the same way\): {line} \(worker logs in {logs}\)", r.stderr.strip()), r.stderr
    assert "lost" not in r.stdout and not events(tmp_path / "job", "worker_lost"), r.stdout[-2000:]
    status = json.loads((tmp_path / "job" / "status.json").read_text())
    assert status["state"] == "failed" and "before the job's first step" in status["error"]


def test_a_rank_that_leaves_the_loop_alone_fails_the_job_at_once_naming_it(tmp_path):
    """Rank 1 broke out of remaining_epochs, rank 0 died at its next all-reduce: `worker(s) [0] lost` named the
    survivor, three restarts replayed the same, and the job failed with gloo's `Connection closed by peer`."""
    r = train(tmp_path, ["python", SCRIPT, "--samples", "48", "--batch", "8", "--epochs", "3",
                         "--rank1-breaks-at-epoch", "0"])
    assert r.returncode == 1, r.stdout[-2000:] + r.stderr[-2000:]
    assert re.fullmatch(r"error: worker 1 \(rank 1\) ended its loop \(exit 0\) after step 6 while the other ranks "
                        r"still trained; worker 0 \(rank 0, exit 1\) then failed at the next all-reduce without it\. "
                        r"Every rank must leave dt\.remaining_epochs at the same point: .* Not restarted "
                        r"\(worker logs in .*\)", r.stderr.strip()), r.stderr[-2000:]
    assert "lost" not in r.stdout and not events(tmp_path / "job", "worker_lost"), r.stdout[-2000:]


def test_a_failure_after_progress_is_restarted_and_its_replayed_evaluation_and_epoch_end_recorded_once(tmp_path):
    """A restart replays the steps after its checkpoint: the evaluation and the epoch end among them were recorded
    again (four identical job_metrics after three restarts; `epoch 1 done` four times in the logs). The replay draws
    what the first run drew (dropout, numpy's and Python's jitter, on both ranks, an evaluation in train mode between):
    the random streams were not checkpointed, and each replayed step's loss differed from the one it replays."""
    once = tmp_path / "failed-once"
    r = train(tmp_path, ["python", SCRIPT, "--samples", "48", "--batch", "8", "--epochs", "2", "--ckpt-every", "4",
                         "--fail-at-step", "8", "--fail-once-file", str(once), "--dropout", "0.3", "--augment"])
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    job = tmp_path / "job"
    [lost] = events(job, "worker_lost")
    assert lost["restored_step"] == 4 and 0 in lost["workers_lost"], lost   # rank 0 raised: steps 5 to 7 replayed
    assert [e["step"] for e in events(job, "metrics")] == [6, 12]            # the evaluation at step 6 once
    assert [e["epoch"] for e in events(job, "epoch_end")] == [0, 1]
    assert r.stdout.count("epoch 0 done") == 1, r.stdout
    assert {r["step"] for r in read_progress(job) if "event" not in r} == set(range(1, 13))   # every step trained
    losses: dict[int, list[float]] = {}
    for rec in read_progress(job):
        if "event" not in rec:
            losses.setdefault(rec["step"], []).append(rec["loss"])
    replayed = {step: runs for step, runs in losses.items() if len(runs) > 1}
    assert sorted(replayed) == [5, 6, 7] and all(a == b for a, b in replayed.values()), replayed   # bit for bit
