"""One process, no scheduler: an ElasticDataLoader over a dataset of ids whose __getitem__ draws from torch's, numpy's
and Python's streams; prints each epoch's batches as JSON lines ``{"epoch", "ids", "draws"}``, then the script's own
torch draw after the loop (its stream, untouched by the loading in this process)."""
import argparse
import json
import random

import numpy as np
import torch
from torch.utils.data import Dataset, WeightedRandomSampler

import dlsched.torch as dt

ap = argparse.ArgumentParser()
ap.add_argument("--num-workers", type=int, default=0)
ap.add_argument("--sampler", choices=["none", "weighted", "stateful"], default="none")
ap.add_argument("--samples", type=int, default=20)
args = ap.parse_args()


class Ids(Dataset):
    def __len__(self):
        return args.samples

    def __getitem__(self, i):
        return torch.tensor([float(i), torch.rand(()).item() + np.random.random() + random.random()])


class Stateful(torch.utils.data.Sampler):
    """Draws from a numpy Generator of its own: each iteration moves it on."""
    def __init__(self):
        self.rng = np.random.default_rng(0)

    def __len__(self):
        return args.samples

    def __iter__(self):
        return iter(self.rng.permutation(args.samples).tolist())


dt.init()
torch.manual_seed(0)
model = dt.ElasticDataParallel(torch.nn.Linear(1, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=0.0)
sampler = {"none": None, "stateful": Stateful(),
           "weighted": WeightedRandomSampler([1.0 + i % 4 for i in range(args.samples)], args.samples,
                                             generator=torch.Generator().manual_seed(7))}[args.sampler]
loader = dt.ElasticDataLoader(Ids(), batch_size=4, sampler=sampler, num_workers=args.num_workers)
for epoch in dt.remaining_epochs(2):
    rows = []
    for batch in loader:
        optimizer.zero_grad()
        model(batch[:, :1]).sum().backward()
        optimizer.step()
        rows.append(batch)
    rows = torch.cat(rows)
    print(json.dumps({"epoch": epoch, "ids": rows[:, 0].int().tolist(), "draws": rows[:, 1].tolist()}), flush=True)
print(json.dumps({"after": torch.rand(()).item()}), flush=True)
