"""An MLP on scikit-learn's handwritten digits (no download), made class-imbalanced and rebalanced with a
``WeightedRandomSampler``, each sample jittered (noise, a one-pixel shift) as two DataLoader processes load it; plain
PyTorch made elastic with dlsched.torch (the lines marked ``# dlsched``). Held-out balanced accuracy every epoch.
Needs scikit-learn (a dev dependency: ``pip install scikit-learn``).

    python examples/digits_mlp.py --epochs 5
    dlsched train --workers 2 -- python examples/digits_mlp.py --epochs 20
"""
import argparse
import random

import numpy as np
import torch
from sklearn.datasets import load_digits
from torch import nn
from torch.nn import functional as F
from torch.utils.data import Dataset, WeightedRandomSampler

import dlsched.torch as dt  # dlsched


class Jittered(Dataset):
    """An 8x8 digit with Gaussian pixel noise (numpy's stream) and a random shift of up to a pixel (Python's)."""

    def __init__(self, images: np.ndarray, labels: np.ndarray, noise: float):
        self.images, self.labels, self.noise = images, labels, noise

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, i: int):
        image = self.images[i] + self.noise * np.random.standard_normal(self.images[i].shape)
        image = np.roll(image, (random.randint(-1, 1), random.randint(-1, 1)), axis=(0, 1))
        return torch.from_numpy(image.reshape(-1)).float(), int(self.labels[i])


def imbalanced_split(seed: int = 0):
    """Classes 5-9 keep one sample in five; a fifth of every class is held out."""
    digits = load_digits()
    images, labels = digits.images / 16.0, digits.target
    rng = np.random.default_rng(seed)
    keep = (labels < 5) | (rng.random(len(labels)) < 0.2)
    images, labels = images[keep], labels[keep]
    held = rng.random(len(labels)) < 0.2
    return (images[~held], labels[~held]), (images[held], labels[held])


def balanced_accuracy(predicted: torch.Tensor, labels: torch.Tensor) -> float:
    return float(np.mean([(predicted[labels == c] == c).float().mean().item() for c in labels.unique()]))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--epochs", type=int, default=10)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--lr", type=float, default=0.1)
    ap.add_argument("--noise", type=float, default=0.1)
    ap.add_argument("--loader-workers", type=int, default=2)
    args = ap.parse_args()

    dt.init()  # dlsched
    torch.manual_seed(0)
    (train_x, train_y), (test_x, test_y) = imbalanced_split()
    counts = np.bincount(train_y, minlength=10)
    sampler = WeightedRandomSampler(1.0 / counts[train_y], num_samples=len(train_y),   # rebalanced classes
                                    generator=torch.Generator().manual_seed(0))
    device = dt.device()
    model = dt.ElasticDataParallel(nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Dropout(0.1),  # dlsched (was: DDP)
                                                 nn.Linear(128, 10)).to(device))
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    # dlsched (was: DataLoader(..., sampler=sampler), the batch divided by the world size)
    loader = dt.ElasticDataLoader(Jittered(train_x, train_y, args.noise), batch_size=args.batch_size, sampler=sampler,
                                  num_workers=args.loader_workers)
    scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=args.epochs * len(loader))
    test_inputs = torch.from_numpy(test_x.reshape(len(test_x), -1)).float().to(device)
    test_labels = torch.from_numpy(test_y)

    for epoch in dt.remaining_epochs(args.epochs):  # dlsched (was: range(args.epochs) and sampler.set_epoch)
        model.train()
        for x, y in loader:
            x, y = x.to(device), y.to(device)
            optimizer.zero_grad()
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            optimizer.step()
            scheduler.step()
            dt.report(loss=loss.item())  # dlsched
        model.eval()
        with torch.no_grad():
            accuracy = balanced_accuracy(model(test_inputs).argmax(1).cpu(), test_labels)
        dt.report(val_balanced_accuracy=accuracy)  # dlsched
        if dt.rank() == 0:
            print(f"epoch {epoch}: held-out balanced accuracy {accuracy:.3f}", flush=True)


if __name__ == "__main__":
    main()
