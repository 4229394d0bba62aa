"""Linear regression with known noise, trained at lr 0 so the gradient statistics stay put; prints the
estimate next to the analytical values. y = x.w* + sigma*eps, x ~ N(0, I_d), loss = mean squared error, at
w = w* + delta: G = 2 delta and tr(Sigma) = 4 (d (|delta|^2 + sigma^2) + |delta|^2)."""
import json
import sys

import torch
from torch import nn
from torch.utils.data import TensorDataset

import dlsched.torch as dt

d, sigma, n, batch, epochs = 8, 0.5, 4096, 64, 4
dt.init()
g = torch.Generator().manual_seed(1)
w_star = torch.randn(d, generator=g)
delta = 0.3 * torch.randn(d, generator=g)
x = torch.randn(n, d, generator=g)
y = x @ w_star + sigma * torch.randn(n, generator=g)
linear = nn.Linear(d, 1, bias=False)
with torch.no_grad():
    linear.weight.copy_((w_star + delta)[None])
model = dt.ElasticDataParallel(linear, noise_every=1, noise_smoothing=0.995)
optimizer = torch.optim.SGD(model.parameters(), lr=0.0)
max_local = int(sys.argv[1]) if len(sys.argv) > 1 else None  # accumulate micro-batches of at most this many
loader = dt.ElasticDataLoader(TensorDataset(x, y), batch_size=batch, max_local_batch=max_local)
for _ in dt.remaining_epochs(epochs):
    for xb, yb in loader:
        optimizer.zero_grad()
        nn.functional.mse_loss(model(xb).squeeze(1), yb).backward()
        optimizer.step()
noise = dt.current_session().noise
dd = float(delta.pow(2).sum())
if dt.rank() == 0:
    json.dump({"sqr": noise.sqr, "trace": noise.trace, "true_sqr": 4 * dd,
               "true_trace": 4 * (d * (dd + sigma ** 2) + dd)}, sys.stdout)
