"""CIFAR-style ResNet-20 (He et al. 2016, 3 stages x 3 basic blocks, 16/32/64 channels) on generated images.

No download: ``num_samples`` 3x32x32 images are drawn from ``classes`` fixed random prototypes plus
noise (sample i from seed (seed, i)), augmented with the CIFAR recipe (random crop with 4-pixel
padding + horizontal flip) written with torch ops — torchvision is not usable with this torch.
"""
from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

from dlsched.errors import UserError
from dlsched.train.job import TrainJob


class BasicBlock(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.shortcut = nn.Sequential()
        if stride != 1 or cin != cout:
            self.shortcut = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        return F.relu(self.bn2(self.conv2(out)) + self.shortcut(x))


class ResNetCifar(nn.Module):
    def __init__(self, depth: int = 20, classes: int = 10):
        super().__init__()
        n = (depth - 2) // 6
        self.conv = nn.Conv2d(3, 16, 3, 1, 1, bias=False)
        self.bn = nn.BatchNorm2d(16)
        layers, cin = [], 16
        for cout, stride in ((16, 1), (32, 2), (64, 2)):
            for i in range(n):
                layers.append(BasicBlock(cin, cout, stride if i == 0 else 1))
                cin = cout
        self.layers = nn.Sequential(*layers)
        self.fc = nn.Linear(64, classes)

    def forward(self, x):
        x = self.layers(F.relu(self.bn(self.conv(x))))
        return self.fc(F.adaptive_avg_pool2d(x, 1).flatten(1))


class ResNet18Cifar(nn.Module):
    """The CIFAR variant of ResNet-18 (3x3 stem, no max-pool; 2-2-2-2 basic blocks, 64..512 channels)."""

    def __init__(self, classes: int = 10):
        super().__init__()
        self.conv = nn.Conv2d(3, 64, 3, 1, 1, bias=False)
        self.bn = nn.BatchNorm2d(64)
        layers, cin = [], 64
        for cout, stride in ((64, 1), (128, 2), (256, 2), (512, 2)):
            layers += [BasicBlock(cin, cout, stride), BasicBlock(cout, cout, 1)]
            cin = cout
        self.layers = nn.Sequential(*layers)
        self.fc = nn.Linear(512, classes)

    def forward(self, x):
        x = self.layers(F.relu(self.bn(self.conv(x))))
        return self.fc(F.adaptive_avg_pool2d(x, 1).flatten(1))


def augment(images: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """CIFAR augmentation: pad 4, random 32x32 crop, random horizontal flip (runs where the images are)."""
    n, dev = images.shape[0], images.device
    padded = F.pad(images, (4, 4, 4, 4), mode="reflect")
    dx = torch.randint(0, 9, (n,), generator=generator).to(dev)
    dy = torch.randint(0, 9, (n,), generator=generator).to(dev)
    crops = _crop(padded, dx, dy)
    flip = (torch.rand(n, generator=generator) < 0.5).to(dev)
    crops[flip] = crops[flip].flip(-1)
    return crops


def _crop(padded: torch.Tensor, dx: torch.Tensor, dy: torch.Tensor) -> torch.Tensor:
    n = padded.shape[0]
    idx = torch.arange(32, device=padded.device)
    rows = (dy[:, None] + idx).view(n, 1, 32, 1).expand(n, 3, 32, padded.shape[-1])
    out = padded.gather(2, rows)
    cols = (dx[:, None] + idx).view(n, 1, 1, 32).expand(n, 3, 32, 32)
    return out.gather(3, cols)


def make_job(num_samples: int = 2048, classes: int = 10, batch_size: int = 64, lr: float = 0.1, epochs: int = 1,
             seed: int = 0, depth: int = 20, noise: float = 0.5, augment_data: bool = True,
             throttle_s: float = 0.0, max_local_batch: int = 0, target_loss: float | None = None,
             arch: str = "resnet20", data_device: str = "cpu") -> TrainJob:
    """``arch``: resnet20 (default; ``depth`` picks 32/44/56 too) or resnet18. ``data_device="cuda"`` keeps
    the generated set on the GPU, like the synthetic-input H100 table (shared/data/h100/throughput.csv)."""
    g = torch.Generator().manual_seed(seed)
    prototypes = torch.randn(classes, 3, 32, 32, generator=g)
    labels = torch.randint(0, classes, (num_samples,), generator=g)
    images = prototypes[labels] + noise * torch.randn(num_samples, 3, 32, 32, generator=g)
    images, labels = images.to(data_device), labels.to(data_device)
    aug = torch.Generator().manual_seed(seed + 1)

    def get_batch(ids: torch.Tensor):
        ids = ids.to(images.device)
        x = images[ids]
        return (augment(x, aug) if augment_data else x), labels[ids]

    if arch not in ("resnet20", "resnet18"):
        raise UserError(f"--param arch={arch!r}: expected resnet20 or resnet18")
    name = "resnet18" if arch == "resnet18" else f"resnet{depth}"
    factory = (lambda: ResNet18Cifar(classes)) if arch == "resnet18" else (lambda: ResNetCifar(depth, classes))
    return TrainJob(name=name, make_model=factory, num_samples=num_samples,
                    get_batch=get_batch, loss_fn=F.cross_entropy, batch_size=batch_size, lr=lr, momentum=0.9,
                    weight_decay=1e-4, epochs=epochs, seed=seed, throttle_s=throttle_s,
                    max_local_batch=max_local_batch or None, target_loss=target_loss,
                    params={"depth": depth, "classes": classes, "arch": arch})
