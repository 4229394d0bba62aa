"""A small causal transformer language model on the Python standard library's own source text, in plain
PyTorch made elastic with dlsched.torch (the lines marked ``# dlsched``). Character level, AdamW with linear
warm-up then cosine decay, held-out perplexity every epoch.

    python examples/stdlib_lm.py --epochs 2
    dlsched submit --min-gpus 1 --max-gpus 4 -- python examples/stdlib_lm.py --epochs 5
"""
import argparse
import math
import sysconfig
from pathlib import Path

import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.data import DataLoader, Dataset

import dlsched.torch as dt  # dlsched

STDLIB_FILES = ("textwrap.py", "heapq.py", "bisect.py", "colorsys.py", "fnmatch.py", "shlex.py", "string.py")


def corpus(chars: int) -> str:
    root = Path(sysconfig.get_paths()["stdlib"])
    text = "\n".join((root / f).read_text(encoding="utf-8") for f in STDLIB_FILES if (root / f).exists())
    return text[:chars]


class Windows(Dataset):
    """Sample i: ``context`` characters from position i*stride, and the same window shifted by one."""

    def __init__(self, ids: torch.Tensor, context: int):
        self.ids, self.context = ids, context

    def __len__(self) -> int:
        return (len(self.ids) - 1) // self.context

    def __getitem__(self, i: int):
        chunk = self.ids[i * self.context : (i + 1) * self.context + 1]
        return chunk[:-1], chunk[1:]


class TinyGPT(nn.Module):
    def __init__(self, vocab: int, context: int, width: int = 64, layers: int = 2, heads: int = 4):
        super().__init__()
        self.embed, self.pos = nn.Embedding(vocab, width), nn.Parameter(torch.zeros(context, width))
        block = nn.TransformerEncoderLayer(width, heads, 4 * width, dropout=0.0, batch_first=True, norm_first=True)
        self.blocks = nn.TransformerEncoder(block, layers, enable_nested_tensor=False)
        self.head = nn.Linear(width, vocab)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        mask = nn.Transformer.generate_square_subsequent_mask(x.shape[1])
        return self.head(self.blocks(self.embed(x) + self.pos[: x.shape[1]], mask=mask, is_causal=True))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--context", type=int, default=64)
    ap.add_argument("--chars", type=int, default=120_000)
    ap.add_argument("--warmup", type=int, default=20, help="warm-up steps")
    ap.add_argument("--max-local-batch", type=int, default=None, help="accumulate a larger share in micro-batches")
    args = ap.parse_args()

    dt.init()  # dlsched
    torch.manual_seed(0)
    text = corpus(args.chars)
    vocab = sorted(set(text))
    ids = torch.tensor([vocab.index(c) for c in text])
    split = int(0.9 * len(ids))
    train_set, eval_set = Windows(ids[:split], args.context), Windows(ids[split:], args.context)
    device = dt.device()  # dlsched: this worker's GPU (cuda:0) or the CPU (was: cuda:LOCAL_RANK)
    model = dt.ElasticDataParallel(TinyGPT(len(vocab), args.context).to(device))  # dlsched (was: DistributedDataParallel)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.01)
    loader = dt.ElasticDataLoader(train_set, batch_size=args.batch_size,  # dlsched (was: DataLoader)
                                  max_local_batch=args.max_local_batch)
    total = args.epochs * len(loader)
    schedule = lambda s: min(1.0, (s + 1) / args.warmup) * 0.5 * (1 + math.cos(math.pi * min(s / total, 1.0)))
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, schedule)

    for epoch in dt.remaining_epochs(args.epochs):  # dlsched (was: range(args.epochs))
        model.train()
        for x, y in loader:
            x, y = x.to(device), y.to(device)
            optimizer.zero_grad()
            loss = F.cross_entropy(model(x).flatten(0, 1), y.flatten())
            loss.backward()
            if not loader.accumulating:  # dlsched: clip the whole step's gradient, not a micro-batch's part
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            scheduler.step()
            dt.report(loss=loss.item())  # dlsched
        model.eval()
        with torch.no_grad():
            losses = [F.cross_entropy(model(x.to(device)).flatten(0, 1), y.to(device).flatten()).item()
                      for x, y in DataLoader(eval_set, batch_size=64)]
        perplexity = math.exp(sum(losses) / len(losses))
        dt.report(val_perplexity=perplexity)  # dlsched
        if dt.rank() == 0:
            print(f"epoch {epoch}: held-out perplexity {perplexity:.2f}", flush=True)


if __name__ == "__main__":
    main()
