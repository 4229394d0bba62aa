"""A script whose first ``--crash`` resize newcomers (worker ids 1..N) exit 3 during start-up, before joining; the
group trains on until ``GATE/end`` exists. So a test sees a failed resize while the job still runs, whatever the load."""
import argparse
import os
import sys
import time
from pathlib import Path

import torch
from torch import nn
from torch.utils.data import TensorDataset

import dlsched.torch as dt
from dlsched.train.protocol import WORKER_ENV

ap = argparse.ArgumentParser()
ap.add_argument("--gate", required=True)
ap.add_argument("--crash", type=int, default=1)
args = ap.parse_args()
gate = Path(args.gate)

wid = int(os.environ.get(WORKER_ENV["worker_id"], "0"))
if 0 < wid <= args.crash:
    (gate / f"worker-{wid}.crashed").touch()
    sys.exit(3)

dt.init(ckpt_every=0)
x = torch.randn(4096, 4, generator=torch.Generator().manual_seed(0))
y = x.sum(1, keepdim=True)
model = dt.ElasticDataParallel(nn.Linear(4, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
loader = dt.ElasticDataLoader(TensorDataset(x, y), batch_size=8)
for _ in dt.remaining_epochs(10**6):   # epochs enough to outlast any test: the gate ends it (no End)
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
