"""Small heterogeneous CNNs for ensemble examples and the FLEET benchmark (CIFAR-shaped 3x32x32 input).

Each starts with an average-pool stem (``pool``) so that on a 2-core CPU the models train faster than the
per-image preprocessing runs: the regime where FLEET's shared pipeline pays (preprocessing is the bottleneck)."""
import torch
from torch import nn


def _block(cin: int, cout: int) -> nn.Sequential:
    return nn.Sequential(nn.Conv2d(cin, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(inplace=True))


class TinyCNN(nn.Module):
    """Two conv blocks: the fastest member."""

    def __init__(self, width: int = 8, classes: int = 10, pool: int = 4) -> None:
        super().__init__()
        self.stem = nn.AvgPool2d(pool) if pool > 1 else nn.Identity()
        self.features = nn.Sequential(_block(3, width), nn.MaxPool2d(2), _block(width, 2 * width), nn.AdaptiveAvgPool2d(1))
        self.head = nn.Linear(2 * width, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(self.stem(x)).flatten(1))


class WideCNN(nn.Module):
    """Three wider conv blocks: the slowest member."""

    def __init__(self, width: int = 16, classes: int = 10, pool: int = 4) -> None:
        super().__init__()
        self.stem = nn.AvgPool2d(pool) if pool > 1 else nn.Identity()
        self.features = nn.Sequential(_block(3, width), _block(width, 2 * width), nn.MaxPool2d(2),
                                      _block(2 * width, 4 * width), nn.AdaptiveAvgPool2d(1))
        self.head = nn.Linear(4 * width, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(self.stem(x)).flatten(1))


class StridedCNN(nn.Module):
    """Strided convolutions instead of pooling."""

    def __init__(self, width: int = 12, classes: int = 10, pool: int = 4) -> None:
        super().__init__()
        self.stem = nn.AvgPool2d(pool) if pool > 1 else nn.Identity()
        self.net = nn.Sequential(
            nn.Conv2d(3, width, 3, stride=2, padding=1), nn.ReLU(inplace=True),
            nn.Conv2d(width, 2 * width, 3, stride=2, padding=1), nn.ReLU(inplace=True),
            nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(2 * width, classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(self.stem(x))


class MLPHead(nn.Module):
    """Pool to 8x8, then an MLP: different shape of compute."""

    def __init__(self, hidden: int = 64, classes: int = 10) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.AvgPool2d(4), nn.Flatten(), nn.Linear(3 * 8 * 8, hidden), nn.ReLU(inplace=True),
                                 nn.Linear(hidden, classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)
