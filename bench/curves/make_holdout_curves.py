"""Generate the HOLD-OUT set of real training curves: never used to calibrate or tune the curve predictor.

Run: PYTHONPATH=src python bench/curves/make_holdout_curves.py [FILE.csv ...]   (~3-5 minutes on one core; torch
CPU, 1 thread; names given: only those runs, the index is always rewritten)

Scored by ``bench/holdout_accuracy.py``. The development set (``make_dev_curves.py``, whose runs set
``perf/calibration.json``) is digits MLP 64-128-10 / SGD, a char GRU (email, json, http, asyncio) and a char
transformer (unittest, xml, logging) with Adam(W), digits 5-9 fine-tune, a char-GRU fine-tune (collections,
concurrent) and a breast-cancer MLP 30-256-256-2 over-fitting loss. The hold-out tasks differ from it in model
family, width, optimiser, batch, seed, data split, logging interval and schedule placement:

* ``digitscnn``: scikit-learn's 8x8 digits (BSD-3), another split (1 297 train / 500 held out, permutation seed
  7), a small CNN (conv 8 -> pool -> conv 16 -> pool -> linear), Adam 3e-3, batch 32, 500 steps, logged every 10.
* ``cancerlin``: scikit-learn's breast-cancer data (BSD-3), standardised, a narrow tanh net 30-8-2 (the dev set's
  is 30-256-256-2 and over-fits), plain SGD 0.02 without momentum, batch 8, 400 steps, logged every 8; split
  369 / 200 (permutation seed 3). Accuracy saturates near 0.97: a run whose error is small and quantised (1/200).
* ``charlstm``: a character LSTM (embedding 24, hidden 64) on Python standard-library source the dev set does not
  use (``urllib``, ``importlib``, ``multiprocessing``; PSF licence), RMSprop 2e-3, sequences of 40, batch 24,
  600 steps, logged every 12; held-out loss and next-char accuracy on 128 fixed windows of the last 10 %.

Each task runs under the seven schedule families of the SPEC grammar: constant, step, cosine (warm-up),
onecycle, wsd, poly, linear; the LR is ``perf.schedule``'s for the SPEC in ``index.csv``, so the SPEC is exactly
the LR used. CSV columns: step, train_loss (mean minibatch loss since the previous row), loss (held-out),
accuracy (held-out), lr (the LR the optimiser used at that step). All runs train from random weights (regime
scratch). Seeds are fixed; bit-for-bit only on the same torch build and CPU, and ``charlstm``'s text is the running
Python's standard library (the committed runs: Python 3.11.7, torch 2.13.0+cpu, scikit-learn 1.9.1).
"""
from __future__ import annotations

import csv
import os
import pathlib
import sys
from dataclasses import dataclass
from typing import Callable

import numpy as np
import torch

from dlsched.perf.schedule import parse_schedule

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from make_dev_curves import CharRNN, _classifier_loop, _source_text, train  # noqa: E402  (the development set's own pieces)

OUT = pathlib.Path(__file__).resolve().parent / "holdout"

# placements deliberately not the dev set's (its step cuts are 1/2, 3/4; warm-ups B/20; wsd warm-down B/5)
SCHEDULES = {
    "constant": lambda B: "constant",
    "step": lambda B: f"step:{6 * B // 10},{85 * B // 100}:0.2",
    "cosine": lambda B: f"cosine:warmup={B // 10}",
    "onecycle": lambda B: "onecycle:pct=0.25",
    "wsd": lambda B: f"wsd:warmdown={3 * B // 10}:warmup={B // 10}",
    "poly": lambda B: f"poly:power=1.5:warmup={B // 20}",
    "linear": lambda B: f"linear:warmup={B // 10}",
}

# scikit-learn ships both datasets under its BSD-3 licence; they are copies of UCI ML repository sets (CC BY 4.0 there)
SKLEARN = "BSD-3-Clause (bundled with scikit-learn; a copy of a UCI dataset, CC BY 4.0 at UCI)"
PSF = "PSF-2.0 (Python standard-library source)"


def digitscnn(seed: int):
    from sklearn.datasets import load_digits

    X, y = load_digits(return_X_y=True)
    idx = np.random.default_rng(7).permutation(len(X))
    X = torch.tensor(X[idx] / 16.0, dtype=torch.float32).reshape(-1, 1, 8, 8)
    y = torch.tensor(y[idx])
    torch.manual_seed(seed)
    model = torch.nn.Sequential(
        torch.nn.Conv2d(1, 8, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
        torch.nn.Conv2d(8, 16, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
        torch.nn.Flatten(), torch.nn.Linear(64, 10))
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    return model, opt, 3e-3, *_classifier_loop(model, X[:1297], y[:1297], X[1297:], y[1297:], 32,
                                          torch.Generator().manual_seed(seed))


def cancerlin(seed: int):
    from sklearn.datasets import load_breast_cancer

    X, y = load_breast_cancer(return_X_y=True)
    idx = np.random.default_rng(3).permutation(len(X))
    X, y = X[idx], y[idx]
    mu, sd = X[:369].mean(0), X[:369].std(0) + 1e-9   # training statistics only
    X = torch.tensor((X - mu) / sd, dtype=torch.float32)
    y = torch.tensor(y)
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(30, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.02)
    return model, opt, 0.02, *_classifier_loop(model, X[:369], y[:369], X[369:], y[369:], 8,
                                          torch.Generator().manual_seed(seed))


def charlstm(seed: int):
    import importlib
    import multiprocessing
    import urllib

    text = _source_text(urllib, importlib, multiprocessing, recursive=True)
    chars = sorted(set(text))
    lookup = {c: i for i, c in enumerate(chars)}
    data = torch.tensor([lookup[c] for c in text], dtype=torch.long)
    split = int(0.9 * len(data))
    train, val = data[:split], data[split:]
    V, T, W = len(chars), 40, 128
    starts = torch.arange(W) * ((len(val) - T - 1) // W)
    vx = torch.stack([val[s:s + T] for s in starts])
    vy = torch.stack([val[s + 1:s + T + 1] for s in starts])
    torch.manual_seed(seed)
    model = CharRNN(V, torch.nn.LSTM, emb=24, hidden=64)
    opt = torch.optim.RMSprop(model.parameters(), lr=2e-3)
    gen = torch.Generator().manual_seed(seed)

    def batch():
        s = torch.randint(0, len(train) - T - 1, (24,), generator=gen)
        return torch.stack([train[i:i + T] for i in s]), torch.stack([train[i + 1:i + T + 1] for i in s])

    def loss(xb, yb):
        return torch.nn.functional.cross_entropy(model(xb).reshape(-1, V), yb.reshape(-1))

    def evaluate():
        with torch.no_grad():
            out = model(vx)
            return (float(torch.nn.functional.cross_entropy(out.reshape(-1, V), vy.reshape(-1))),
                    float((out.argmax(-1) == vy).float().mean()))

    return model, opt, 2e-3, batch, loss, evaluate


@dataclass(frozen=True)
class Task:
    make: Callable
    budget: int
    every: int
    seed: int
    family: str
    licence: str


TASKS = {"digitscnn": Task(digitscnn, 500, 10, 11, "cnn", SKLEARN),
         "cancerlin": Task(cancerlin, 400, 8, 12, "mlp", SKLEARN),
         "charlstm": Task(charlstm, 600, 12, 13, "lstm", PSF)}


def run(task: str, sched: str) -> list[dict]:
    t = TASKS[task]
    model, opt, peak, batch, loss_of, evaluate = t.make(t.seed)
    lr_at = parse_schedule(SCHEDULES[sched](t.budget), t.budget).lr
    rows = train(opt, peak, batch, loss_of, t.budget, lr_at, evaluate, every=t.every)
    return [{k: r[k] for k in ("step", "train_loss", "loss", "accuracy", "lr")} for r in rows]   # no wall_s: as committed


def main() -> None:
    torch.set_num_threads(1)
    OUT.mkdir(exist_ok=True)
    only, index = sys.argv[1:], []
    for task, t in TASKS.items():
        for name in SCHEDULES:
            fname = f"{task}-{name}.csv"
            if not only or fname in only:
                rows = run(task, name)
                with open(OUT / fname, "w", newline="") as f:
                    w = csv.DictWriter(f, fieldnames=list(rows[0]), lineterminator="\n")
                    w.writeheader()
                    w.writerows(rows)
                print(f"{fname}: final loss {rows[-1]['loss']:.4f} acc {rows[-1]['accuracy']:.4f}", flush=True)
            index.append({"file": fname, "task": task, "schedule": SCHEDULES[name](t.budget), "budget": t.budget,
                          "x": "step", "metrics": "loss;accuracy", "also": "train_loss;lr", "every": t.every,
                          "family": t.family, "seed": t.seed, "regime": "scratch", "licence": t.licence})
    with open(OUT / "index.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(index[0]), lineterminator="\n")
        w.writeheader()
        w.writerows(index)


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    main()
