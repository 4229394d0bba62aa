"""One worker splits every step into halves to measure the gradient noise (noise_every=1). Models a user
writes: one computing its own loss (a dict with a 0-dim tensor: ``loss``), one also returning an RNN's
(layers, batch, ...) state (``state``: not joined, so not split), one fed sequence-first (``seq-first``: not
split). Each step checks the joined output and gradient against the unsplit model's
(tests/torch/test_outputs.py)."""
import copy
import sys

import torch
from torch import nn
from torch.utils.data import TensorDataset

import dlsched.torch as dt


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.rnn = nn.GRU(3, 8)   # sequence-first, the default
        self.head = nn.Linear(8, 1)

    def forward(self, x, y=None, seq_first=False):
        out, h = self.rnn(x if seq_first else x.transpose(0, 1))
        pred = self.head(out[-1]).squeeze(-1)
        out = {"loss": nn.functional.mse_loss(pred, y), "pred": pred}
        return {**out, "state": (h,)} if kind == "state" else out


kind = sys.argv[1]
dt.init(ckpt_every=0)
torch.manual_seed(0)
x, y = torch.randn(40, 5, 3), torch.randn(40)   # 5 time steps, batches of 8: dim 0 is not the batch seq-first
model = dt.ElasticDataParallel(Net(), noise_every=1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
loader = dt.ElasticDataLoader(TensorDataset(x, y), batch_size=8)
for epoch in dt.remaining_epochs(2):
    for xb, yb in loader:
        reference = copy.deepcopy(model.module)
        optimizer.zero_grad()
        seq_first = kind == "seq-first"
        out = model(xb.transpose(0, 1) if seq_first else xb, y=yb, seq_first=seq_first)
        out["loss"].backward()
        want = reference(xb.transpose(0, 1) if seq_first else xb, y=yb, seq_first=seq_first)
        want["loss"].backward()
        assert torch.allclose(out["loss"], want["loss"], atol=1e-6), (out["loss"], want["loss"])
        assert out["pred"].shape == (len(yb),)
        assert kind != "state" or out["state"][0].shape == (1, len(yb), 8), out["state"][0].shape
        for p, q in zip(model.module.parameters(), reference.parameters()):
            assert torch.allclose(p.grad, q.grad, atol=1e-6)
        optimizer.step()
        dt.report(loss=out["loss"])
print("measured", dt.current_session().noise.updates, "steps")
