"""Small convolutional classifier on generated 12x12 images (no downloads), a second model family for the demo.

Data: each class is a fixed random 12x12 template; a sample is its class template, shifted by up to 2 pixels
and blurred with noise, so the task needs translation-tolerant features (what convolutions are for).
Sample i is derived from (seed, i) and materialised up front, so any worker can serve any id.
"""
from __future__ import annotations

import torch
from torch import nn

from dlsched.train.job import TrainJob


def make_job(num_samples: int = 4096, classes: int = 6, channels: int = 8, batch_size: int = 32, lr: float = 0.05,
             epochs: int = 1, seed: int = 0, throttle_s: float = 0.0) -> TrainJob:
    g = torch.Generator().manual_seed(seed)
    templates = torch.randn(classes, 1, 12, 12, generator=g)
    labels = torch.randint(0, classes, (num_samples,), generator=g)
    shifts = torch.randint(-2, 3, (num_samples, 2), generator=g)
    images = templates[labels].clone()
    for i in range(num_samples):      # per-sample translation with torch.roll (no torchvision)
        images[i] = torch.roll(images[i], shifts=(int(shifts[i, 0]), int(shifts[i, 1])), dims=(1, 2))
    images += 0.8 * torch.randn(images.shape, generator=g)

    def make_model() -> nn.Module:
        return nn.Sequential(nn.Conv2d(1, channels, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                             nn.Conv2d(channels, 2 * channels, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1),
                             nn.Flatten(), nn.Linear(2 * channels, classes))

    def get_batch(ids: torch.Tensor):
        return images[ids], labels[ids]

    return TrainJob(name="convnet", make_model=make_model, num_samples=num_samples, get_batch=get_batch,
                    loss_fn=nn.functional.cross_entropy, batch_size=batch_size, lr=lr, momentum=0.9, epochs=epochs,
                    seed=seed, throttle_s=throttle_s, params={"classes": classes, "channels": channels})
