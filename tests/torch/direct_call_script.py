"""A training loop that calls ``model.module(x)`` inside an accumulating step (refused), after checking
that copies of the model, evaluation calls and pickling are left alone (tests/torch/test_accumulation.py)."""
import copy
import io
import sys

import torch
from torch import nn
from torch.utils.data import TensorDataset

import dlsched.torch as dt

dt.init(ckpt_every=0)
x, y = torch.randn(32, 4), torch.randn(32)
model = dt.ElasticDataParallel(nn.Linear(4, 1))
target = copy.deepcopy(model.module)   # a target/EMA network: not the wrapped model
saved = io.BytesIO()
torch.save(model.module, saved)
restored = torch.load(io.BytesIO(saved.getvalue()), weights_only=False)   # a pickled model carries no guard
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
loader = dt.ElasticDataLoader(TensorDataset(x, y), batch_size=8, max_local_batch=4)
for epoch in dt.remaining_epochs(1):
    for i, (xb, yb) in enumerate(loader):
        optimizer.zero_grad()
        (target(xb).sum() + restored(xb).sum()).backward()   # copies train freely
        with torch.no_grad():
            model.module(xb)                               # an evaluation call is fine
        out = model(xb) if i == 0 else model.module(xb)    # the second micro-batch bypasses the wrapper
        nn.functional.mse_loss(out.squeeze(1), yb).backward()
        optimizer.step()
print("not refused", file=sys.stderr)
