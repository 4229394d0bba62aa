"""Small MLP classifier on generated data (no downloads): a fast job for tests, demos and the service.

Data: ``num_samples`` points in ``dim`` dimensions from a fixed random teacher network, labels = its
argmax; sample i is generated from seed (seed, i), so any worker can materialise any id on demand.
"""
from __future__ import annotations

import torch
from torch import nn

from dlsched.train.job import TrainJob


def make_job(num_samples: int = 512, dim: int = 16, classes: int = 4, hidden: int = 32, batch_size: int = 16,
             lr: float = 0.05, epochs: int = 1, seed: int = 0, throttle_s: float = 0.0,
             max_local_batch: int = 0, target_loss: float | None = None, poison_sample: int = -1) -> TrainJob:
    """``poison_sample``: reading this id raises (a deterministic failure, for failure-handling demos/tests)."""
    g = torch.Generator().manual_seed(seed)
    inputs = torch.randn(num_samples, dim, generator=g)
    teacher = torch.randn(dim, classes, generator=g)
    labels = (inputs @ teacher + 0.5 * torch.randn(num_samples, classes, generator=g)).argmax(dim=1)

    def make_model() -> nn.Module:
        return nn.Sequential(nn.Linear(dim, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU(),
                             nn.Linear(hidden, classes))

    def get_batch(ids: torch.Tensor):
        if poison_sample >= 0 and bool((ids == poison_sample).any()):
            raise ValueError(f"sample {poison_sample} is poisoned")
        return inputs[ids], labels[ids]

    return TrainJob(name="mlp", make_model=make_model, num_samples=num_samples, get_batch=get_batch,
                    loss_fn=nn.functional.cross_entropy, batch_size=batch_size, lr=lr, momentum=0.9,
                    epochs=epochs, seed=seed, throttle_s=throttle_s, max_local_batch=max_local_batch or None,
                    target_loss=target_loss, params={"dim": dim, "classes": classes, "hidden": hidden})
