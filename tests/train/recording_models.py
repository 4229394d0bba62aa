"""An ensemble member that writes down which samples it trained on, one line per step (the ids of
``id_images``), so a test can check what each member saw in each of its epochs."""
import torch
from torch import nn

from dlsched.train.flotilla import CIFAR_MEAN, CIFAR_STD


def id_images(n: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Sample i is an 8 x 8 image of constant value i + 1: after any crop and flip its largest pixel still says i
    (the crop's zero padding is smaller)."""
    assert n < 255
    x = (torch.arange(n, dtype=torch.uint8) + 1).view(n, 1, 1, 1).expand(n, 3, 8, 8).contiguous()
    return x, torch.arange(n) % 10


class RecordingMLP(nn.Module):
    def __init__(self, log: str) -> None:
        super().__init__()
        self.log = log
        self.net = nn.Sequential(nn.Flatten(), nn.Linear(3 * 8 * 8, 10))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.training:
            raw = (x[:, 0] * CIFAR_STD[0] + CIFAR_MEAN[0]) * 255   # undo Normalize and ToFloat (channel 0)
            ids = (raw.flatten(1).max(1).values.round().long() - 1).tolist()
            with open(self.log, "a") as f:
                f.write(" ".join(map(str, ids)) + "\n")
        return self.net(x)


class FreedMLP(nn.Module):
    """Writes ``marker``.<pid> when freed: tells whether a member's process freed its model on the way out."""

    def __init__(self, marker: str, hidden: int = 8) -> None:
        super().__init__()
        self.marker = marker
        self.net = nn.Sequential(nn.AvgPool2d(4), nn.Flatten(), nn.Linear(3 * 8 * 8, hidden), nn.ReLU(),
                                 nn.Linear(hidden, 10))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)

    def __del__(self) -> None:
        import os

        open(f"{self.marker}.{os.getpid()}", "w").close()
