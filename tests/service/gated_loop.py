"""The training the gated test scripts run (``ending_script.py``, ``crashing_newcomer.py``, ``hanging_newcomer.py``):
a linear model over ``samples`` points, one epoch per call, until ``GATE/end`` exists."""
import argparse
import os
import time
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn
from torch.utils.data import TensorDataset

import dlsched.torch as dt
from dlsched.train.protocol import WORKER_ENV


def linear_job(samples: int):
    """(model, optimizer, loader) after ``dt.init``: x in R^4, y = sum(x), batch 8."""
    dt.init(ckpt_every=0)
    x = torch.randn(samples, 4, generator=torch.Generator().manual_seed(0))
    model = dt.ElasticDataParallel(nn.Linear(4, 1))
    loader = dt.ElasticDataLoader(TensorDataset(x, x.sum(1, keepdim=True)), batch_size=8)
    return model, torch.optim.SGD(model.parameters(), lr=0.01), loader


def epoch_until_gate(model, optimizer, loader, gate: Path, before_step=lambda: None) -> bool:
    """One pass over the loader, at least 0.02 s a step, cut short once ``gate/end`` exists; True when it does.
    The ranks agree on it (an all-reduce): one rank seeing the file a step before another would end its loop while
    the other trains on, a job failure. A pass that trained no step (a newcomer entering a loader with nothing
    left: it joins only there) looks at the file alone. ``before_step`` runs at the top of each step, its batch
    fetched."""
    stepped = False
    for xb, yb in loader:
        before_step()
        optimizer.zero_grad()
        loss = nn.functional.mse_loss(model(xb), yb)
        loss.backward()
        optimizer.step()
        dt.report(loss=loss.item())
        time.sleep(0.02)
        if gate_agreed(gate):
            return True
        stepped = True
    return not stepped and (gate / "end").exists()


def gate_agreed(gate: Path) -> bool:
    """Whether any rank of the group sees ``gate/end``."""
    seen = torch.tensor([float((gate / "end").exists())])
    if dist.is_initialized() and dist.get_world_size() > 1:
        dist.all_reduce(seen, op=dist.ReduceOp.MAX)
    return bool(seen.item())


def train_until_gate(gate: Path) -> None:
    """Epochs enough to outlast any test: the gate ends it (no End)."""
    model, optimizer, loader = linear_job(4096)
    for _ in dt.remaining_epochs(10**6):
        if epoch_until_gate(model, optimizer, loader, gate):
            break


def hold(until) -> None:
    """Sleep until ``until()``, or until this process is orphaned (its coordinator gone: none outlives a test)."""
    parent = os.getppid()
    while not until() and os.getppid() == parent:
        time.sleep(0.05)


def faulty_newcomer(flag: str) -> tuple[Path, int, bool]:
    """A newcomer script's ``--gate`` and ``--FLAG N`` arguments: (gate, this worker's id, whether it is one of the
    first N resize newcomers, ids 1..N, the ones to misbehave)."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--gate", required=True)
    ap.add_argument(f"--{flag}", type=int, default=1)
    args = ap.parse_args()
    wid = int(os.environ.get(WORKER_ENV["worker_id"], "0"))
    return Path(args.gate), wid, 0 < wid <= getattr(args, flag)
