"""A script's own prints reach the coordinator's stdout (the terminal, the service's output.log), prefixed by
worker; a script that stopped early is a finished job a rerun does not train again."""
from __future__ import annotations

import json
import os
import subprocess
import sys

from dlsched.train.script_output import CHUNK, ScriptOutput
from tests.train.helpers import REPO

EARLY_STOP = """
import torch
from torch import nn
from torch.utils.data import TensorDataset
import dlsched.torch as dt

dt.init()
model = dt.ElasticDataParallel(nn.Linear(4, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
loader = dt.ElasticDataLoader(TensorDataset(torch.randn(64, 4), torch.randn(64, 1)), batch_size=16)
print(f"hello from rank {dt.rank()}", flush=True)
for epoch in dt.remaining_epochs(50):
    for x, y in loader:
        opt.zero_grad()
        nn.functional.mse_loss(model(x), y).backward()
        opt.step()
    if epoch == 1:
        print(f"early stop at epoch {epoch} [rank {dt.rank()}]")   # no flush: the exit flushes it
        break
"""


def test_lines_are_echoed_whole_with_their_worker_and_only_once(tmp_path):
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "worker-0.log").write_text("a line of the last run\n")
    lines: list[str] = []
    out = ScriptOutput(logs, lines.append)
    with open(logs / "worker-0.log", "a") as w0, open(logs / "worker-10.log", "w") as w10:
        w0.write("first\nhalf")
        w0.flush()
        w10.write("[bold]not markup[/bold]\n")
        w10.flush()
        out.echo()
        assert lines == ["[worker 0] first", "[worker 10] [bold]not markup[/bold]"]
        w0.write(" done\n" + "x" * (CHUNK + 10))
        w0.flush()
        out.echo()
        assert lines[2:] == ["[worker 0] half done"]
        out.echo()   # a line longer than a chunk comes out in pieces, not never
        out.echo(final=True)
    assert "".join(line.removeprefix("[worker 0] ") for line in lines[3:]) == "x" * (CHUNK + 10)
    out.echo(final=True)
    assert len(lines) == 5


def test_a_scripts_prints_reach_stdout_and_an_early_stop_is_not_trained_again(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    cmd = [sys.executable, "-m", "dlsched.train.run", "--job-dir", str(tmp_path / "job"), "--workers", "2",
           "--threads", "1", "--", "python", "-c", EARLY_STOP]
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    lines = r.stdout.splitlines()
    finished = next(i for i, line in enumerate(lines) if "finished at step" in line)
    for rank in (0, 1):
        said = [i for i, line in enumerate(lines) if line.startswith("[worker ") and f"rank {rank}" in line]
        assert len(said) == 2 and max(said) < finished, r.stdout   # hello + early stop, each once, before the end
    records = (tmp_path / "job" / "progress.jsonl").read_text().splitlines()
    again = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0 and "already finished (the script ended on its own); nothing to train" in again.stdout, again.stdout
    assert "[worker" not in again.stdout
    assert (tmp_path / "job" / "progress.jsonl").read_text().splitlines() == records
    assert json.loads((tmp_path / "job" / "status.json").read_text())["state"] == "finished"
