"""ResNet-20 image classification in plain PyTorch, made elastic with dlsched.torch (the lines marked ``# dlsched``).

Data: scikit-learn's handwritten digits (1797 real 8x8 images, shipped with the package), upsampled to 16x16
RGB; without scikit-learn, generated class-prototype images. AdamW or SGD with OneCycle or cosine LR, an
evaluation on a held-out split every epoch.

    python examples/cifar_resnet.py --epochs 3                     # one process, no scheduler
    dlsched train --workers 2 -- python examples/cifar_resnet.py   # elastic on this machine
    dlsched submit --min-gpus 1 --max-gpus 4 -- python examples/cifar_resnet.py --epochs 10
"""
import argparse

import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.data import DataLoader, TensorDataset

import dlsched.torch as dt  # dlsched
from resnet20 import ResNetCifar


def digits(limit: int) -> tuple[torch.Tensor, torch.Tensor]:
    try:
        from sklearn.datasets import load_digits

        d = load_digits()
        x, y = torch.tensor(d.images, dtype=torch.float32) / 16.0, torch.tensor(d.target)
    except ImportError:  # generated stand-in: 10 fixed prototypes plus noise
        g = torch.Generator().manual_seed(0)
        y = torch.randint(0, 10, (1797,), generator=g)
        x = torch.rand(10, 8, 8, generator=g)[y] + 0.3 * torch.randn(1797, 8, 8, generator=g)
    x = F.interpolate(x[:, None], size=16, mode="bilinear", align_corners=False).repeat(1, 3, 1, 1)
    x = (x - x.mean()) / x.std()
    return x[:limit], y[:limit]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--optimizer", choices=["adamw", "sgd"], default="adamw")
    ap.add_argument("--schedule", choices=["onecycle", "cosine"], default="onecycle")
    ap.add_argument("--samples", type=int, default=1797, help="use the first N images (train 80%% / eval 20%%)")
    args = ap.parse_args()

    dt.init()  # dlsched
    torch.manual_seed(0)
    x, y = digits(args.samples)
    split = int(0.8 * len(x))
    train_set, eval_set = TensorDataset(x[:split], y[:split]), TensorDataset(x[split:], y[split:])
    device = dt.device()  # dlsched: this worker's GPU (cuda:0) or the CPU (was: cuda:LOCAL_RANK)
    model = dt.ElasticDataParallel(ResNetCifar(depth=20, classes=10).to(device))  # dlsched (was: DistributedDataParallel)
    if args.optimizer == "adamw":
        optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=5e-4)
    else:
        optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9, weight_decay=5e-4, nesterov=True)
    loader = dt.ElasticDataLoader(train_set, batch_size=args.batch_size, shuffle=True)  # dlsched (was: DataLoader)
    steps = args.epochs * len(loader)
    if args.schedule == "onecycle":
        scheduler = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=args.lr, total_steps=steps)
    else:
        scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=steps)

    for epoch in dt.remaining_epochs(args.epochs):  # dlsched (was: range(args.epochs))
        model.train()
        for images, labels in loader:
            images, labels = images.to(device), labels.to(device)
            optimizer.zero_grad()
            logits = model(images)
            loss = F.cross_entropy(logits, labels)
            loss.backward()
            optimizer.step()
            scheduler.step()
            dt.report(loss=loss.item(), train_accuracy=(logits.argmax(1) == labels).float().mean().item())  # dlsched
        model.eval()
        correct = total = 0
        with torch.no_grad():
            for images, labels in DataLoader(eval_set, batch_size=256):
                images, labels = images.to(device), labels.to(device)
                correct += (model(images).argmax(1) == labels).sum().item()
                total += len(labels)
        dt.report(val_accuracy=correct / total)  # dlsched
        if dt.rank() == 0:
            print(f"epoch {epoch}: val accuracy {correct / total:.3f}", flush=True)


if __name__ == "__main__":
    main()
