"""Generate the development set of REAL training curves for the schedule-aware predictor.

Run: PYTHONPATH=src python bench/curves/make_dev_curves.py [FILE.csv ...]   (~6 minutes on one core; torch
CPU, 1 thread; names given: only those runs, the index is always rewritten)

Two real tasks on data that installed packages ship, each trained once under every LR schedule family the
predictor knows (the schedule drives training through ``perf.schedule``, so the spec in ``index.csv`` is
exactly the LR the run used):

* ``digits``: scikit-learn's 8x8 handwritten digits (1 797 images, BSD-3 licence), MLP 64-128-10, SGD
  momentum 0.9, batch 16; curve = held-out loss and accuracy on 397 images, every 10 steps.
* ``charlm``: a character GRU language model on Python standard-library source text (PSF licence: the
  ``email``, ``json``, ``http`` and ``asyncio`` packages), hidden 96, sequences of 48, batch 32, Adam;
  curve = held-out loss (nats/char) and next-char accuracy on a fixed 256-sequence slice, every 10 steps.
* ``tinylm``: a 2-layer causal transformer character LM on other standard-library packages (``unittest``,
  ``xml``, ``logging``; PSF licence), AdamW, 600 steps; held-out loss on 96 fixed sequences every 10 steps.
  Also under the inverse-square-root schedule (linear warm-up, then sqrt(W/x)).

Each CSV has step, loss, accuracy, lr (the LR the optimiser used at that step), wall_s (seconds since the
run started) and train_loss (mean minibatch loss since the previous row). Seeds are fixed.
"""
from __future__ import annotations

import csv
import os
import pathlib
import sys
import time

import numpy as np
import torch

from dlsched.perf.schedule import parse_schedule

OUT = pathlib.Path(__file__).resolve().parent
EVERY = 10

SCHEDULES = {  # name -> spec as a function of the budget
    "constant": lambda B: "constant",
    "step": lambda B: f"step:{B // 2},{3 * B // 4}:0.1",
    "cosine": lambda B: f"cosine:warmup={B // 20}",
    "onecycle": lambda B: "onecycle:pct=0.3",
    "wsd": lambda B: f"wsd:warmdown={B // 5}:warmup={B // 20}",
    "poly": lambda B: f"poly:power=2:warmup={B // 20}",
    "linear": lambda B: f"linear:warmup={B // 20}",
    "steps": lambda B: f"steps:0=0.3,{B // 10}=1,{6 * B // 10}=0.3,{85 * B // 100}=0.05",
    "invsqrt": lambda B: inverse_sqrt_spec(B, B // 20),
    # ImageNet's 30/60-of-90-epochs placement: a prefix past the first cut must predict the second
    "multistep": lambda B: f"step:{B // 3},{2 * B // 3}:0.1",
}


def inverse_sqrt_spec(B: int, W: int) -> str:
    """Transformer (Vaswani et al.) inverse square root: linear warm-up to W, then sqrt(W / x), as ``points:``."""
    xs = [0, W] + [int(v) for v in np.unique(np.geomspace(W, B, 24).round())[1:]]
    return "points:" + ",".join(f"{x}={min(x / W, (W / x) ** 0.5) if x else 0:.4g}" for x in xs)


def digits_task(seed: int):
    from sklearn.datasets import load_digits

    X, y = load_digits(return_X_y=True)
    rng = np.random.default_rng(0)
    idx = rng.permutation(len(X))
    X = torch.tensor(X[idx] / 16.0, dtype=torch.float32)
    y = torch.tensor(y[idx])
    tr, va = slice(0, 1400), slice(1400, None)
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.02, momentum=0.9)
    gen = torch.Generator().manual_seed(seed)

    def batch():
        i = torch.randint(0, 1400, (16,), generator=gen)
        return X[tr][i], y[tr][i]

    def evaluate():
        with torch.no_grad():
            out = model(X[va])
            return float(torch.nn.functional.cross_entropy(out, y[va])), float((out.argmax(1) == y[va]).float().mean())

    def step(xb, yb):
        return torch.nn.functional.cross_entropy(model(xb), yb)

    return model, opt, 0.02, batch, step, evaluate


def _char_lm_loop(model, train, val, T: int, V: int, batch_size: int, val_windows: int, gen):
    """(batch, step, evaluate) of a next-character model: random training windows, fixed evenly spaced
    validation windows, cross-entropy loss and accuracy."""
    vstarts = torch.arange(val_windows) * ((len(val) - T - 1) // val_windows)
    vx = torch.stack([val[s:s + T] for s in vstarts])
    vy = torch.stack([val[s + 1:s + T + 1] for s in vstarts])

    def batch():
        s = torch.randint(0, len(train) - T - 1, (batch_size,), generator=gen)
        return torch.stack([train[i:i + T] for i in s]), torch.stack([train[i + 1:i + T + 1] for i in s])

    def evaluate():
        with torch.no_grad():
            out = model(vx)
            return (float(torch.nn.functional.cross_entropy(out.reshape(-1, V), vy.reshape(-1))),
                    float((out.argmax(-1) == vy).float().mean()))

    def step(xb, yb):
        return torch.nn.functional.cross_entropy(model(xb).reshape(-1, V), yb.reshape(-1))

    return batch, step, evaluate


def charlm_task(seed: int):
    import asyncio
    import email
    import http
    import json

    text = ""
    for pkg in (email, json, http, asyncio):
        for f in sorted(pathlib.Path(pkg.__file__).parent.glob("*.py")):
            text += f.read_text(encoding="utf-8", errors="replace")
    chars = sorted(set(text))
    data = torch.tensor([chars.index(c) for c in text], dtype=torch.long)
    split = int(0.9 * len(data))
    train, val = data[:split], data[split:]
    V, T = len(chars), 48
    torch.manual_seed(seed)

    class CharGRU(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = torch.nn.Embedding(V, 32)
            self.rnn = torch.nn.GRU(32, 96, batch_first=True)
            self.head = torch.nn.Linear(96, V)

        def forward(self, x):
            return self.head(self.rnn(self.emb(x))[0])

    model = CharGRU()
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    return (model, opt, 3e-3, *_char_lm_loop(model, train, val, T, V, batch_size=32, val_windows=256,
                                             gen=torch.Generator().manual_seed(seed)))


def tinylm_task(seed: int):
    """A 2-layer causal transformer character LM (width 48, context 48, batch 16) on other stdlib packages than
    ``charlm`` (AdamW, weight decay 0.01)."""
    import logging
    import unittest
    import xml

    text = ""
    for pkg in (unittest, xml, logging):
        for f in sorted(pathlib.Path(pkg.__file__).parent.rglob("*.py")):
            text += f.read_text(encoding="utf-8", errors="replace")
    chars = sorted(set(text))
    data = torch.tensor([chars.index(c) for c in text], dtype=torch.long)
    split = int(0.9 * len(data))
    train, val = data[:split], data[split:]
    V, T, D = len(chars), 48, 48
    torch.manual_seed(seed)

    class TinyLM(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = torch.nn.Embedding(V, D)
            self.pos = torch.nn.Parameter(0.02 * torch.randn(T, D))
            layer = torch.nn.TransformerEncoderLayer(D, 4, 4 * D, dropout=0.0, batch_first=True, norm_first=True)
            self.body = torch.nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
            self.head = torch.nn.Linear(D, V)
            self.mask = torch.nn.Transformer.generate_square_subsequent_mask(T)

        def forward(self, x):
            return self.head(self.body(self.emb(x) + self.pos[: x.shape[1]], mask=self.mask, is_causal=True))

    model = TinyLM()
    opt = torch.optim.AdamW(model.parameters(), lr=2e-3, weight_decay=0.01)
    return (model, opt, 2e-3, *_char_lm_loop(model, train, val, T, V, batch_size=16, val_windows=96,
                                             gen=torch.Generator().manual_seed(seed)))


TASKS = {"digits": (digits_task, 800), "charlm": (charlm_task, 800), "tinylm": (tinylm_task, 600)}
# the first two tasks' runs predate the inverse-square-root family
FAMILIES = {"digits": [n for n in SCHEDULES if n != "invsqrt"], "charlm": [n for n in SCHEDULES if n != "invsqrt"],
            "tinylm": list(SCHEDULES)}


def run(task: str, sched_name: str) -> list[dict]:
    make, budget = TASKS[task]
    model, opt, peak, batch, step_loss, evaluate = make(seed=1)
    sched = parse_schedule(SCHEDULES[sched_name](budget), budget)
    rows, t0, acc_loss, n = [], time.perf_counter(), 0.0, 0
    for s in range(budget):
        lr = peak * float(sched.lr(s))
        for g in opt.param_groups:
            g["lr"] = lr
        xb, yb = batch()
        loss = step_loss(xb, yb)
        opt.zero_grad()
        loss.backward()
        opt.step()
        acc_loss, n = acc_loss + float(loss), n + 1
        if (s + 1) % EVERY == 0:
            vl, va = evaluate()
            rows.append({"step": s + 1, "loss": round(vl, 6), "accuracy": round(va, 6), "lr": f"{lr:.6g}",
                         "wall_s": round(time.perf_counter() - t0, 4), "train_loss": round(acc_loss / n, 6)})
            acc_loss, n = 0.0, 0
    return rows


def main() -> None:
    torch.set_num_threads(1)
    only = sys.argv[1:]
    index = []
    for task, (_, budget) in TASKS.items():
        for name in FAMILIES[task]:
            spec = SCHEDULES[name]
            fname = f"{task}-{name}.csv"
            if not only or fname in only:
                rows = run(task, name)
                with open(OUT / fname, "w", newline="") as f:
                    w = csv.DictWriter(f, fieldnames=list(rows[0]))
                    w.writeheader()
                    w.writerows(rows)
                print(f"{fname}: final loss {rows[-1]['loss']:.4f} acc {rows[-1]['accuracy']:.4f}", flush=True)
            index.append({"file": fname, "task": task, "schedule": spec(budget), "budget": budget})
    with open(OUT / "index.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(index[0]))
        w.writeheader()
        w.writerows(index)


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    main()
