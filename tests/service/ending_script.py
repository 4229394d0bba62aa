"""A script that ends on its own (a plain loop, no ``remaining_epochs``: no End) once ``GATE/end`` exists; a
later worker (a resize's newcomer) says it started, then holds before joining until ``GATE/release`` exists.
So a test can have a resize in flight when the job ends, in that order, whatever the machine's load."""
import argparse
import os
import time
from pathlib import Path

import torch
from torch import nn
from torch.utils.data import TensorDataset

import dlsched.torch as dt
from dlsched.train.protocol import WORKER_ENV

ap = argparse.ArgumentParser()
ap.add_argument("--gate", required=True)
gate = Path(ap.parse_args().gate)

wid = int(os.environ.get(WORKER_ENV["worker_id"], "0"))
if wid > 0:
    (gate / f"worker-{wid}.started").touch()
    parent = os.getppid()
    while not (gate / "release").exists() and os.getppid() == parent:   # an orphan ends
        time.sleep(0.05)

dt.init(ckpt_every=0)
x = torch.randn(64, 4, generator=torch.Generator().manual_seed(0))
y = x.sum(1, keepdim=True)
model = dt.ElasticDataParallel(nn.Linear(4, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
loader = dt.ElasticDataLoader(TensorDataset(x, y), batch_size=8)
while True:   # a newcomer enters the loader once even after the end: it joins (is ready) only there
    for xb, yb in loader:
        optimizer.zero_grad()
        loss = nn.functional.mse_loss(model(xb), yb)
        loss.backward()
        optimizer.step()
        dt.report(loss=loss.item())
        time.sleep(0.02)
        if (gate / "end").exists():
            break
    if (gate / "end").exists():
        break
