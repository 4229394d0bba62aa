"""Generate the development set of REAL training curves for the schedule-aware predictor.

Run: PYTHONPATH=src python bench/curves/make_dev_curves.py [FILE.csv ...]   (~8 minutes on one core; torch
CPU, 1 thread; names given: only those runs, the index is always rewritten)
     PYTHONPATH=src python bench/curves/make_dev_curves.py --reruns   (``reruns/``: ``tinylm`` and ``charlm`` again under
     each of their schedules, at 0.8x the budget and another seed: a recipe's other run, ``bench/live_lr.py``)

Three real tasks on data that installed packages ship, each trained once under every LR schedule family the
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

Fine-tune and over-fitting runs (the tasks above train from scratch; users also fine-tune pretrained models,
whose curves fall fast from a good start, improve little in relative terms and often over-fit). Pre-training
happens here, deterministically (fixed seed, constant LR, ``pretrained``), nothing is downloaded:

* ``digitsft``: the digits MLP pre-trained on digits 0-4 (300 steps), then fine-tuned with its whole 10-way
  head on digits 5-9 (520 training images, 400 steps, SGD lr 0.01); curve = held-out **accuracy** on 376
  images of digits 5-9 (``metric`` accuracy in the index): near 0 at step 10 (the 5-9 outputs were never
  trained), past 90 % by step 80-90. Schedules: constant, step, cosine, linear, wsd.
* ``charft``: the charlm GRU pre-trained on charlm's packages (400 steps), then fine-tuned on ``collections``
  and ``concurrent`` (PSF licence; ~120 k characters, a vocabulary shared by both texts), Adam 1e-3, 400 steps;
  curve = held-out loss. Schedules: constant, cosine, linear, wsd.
* ``cancer``: scikit-learn's breast-cancer data (569 cases, BSD-3 licence), standardised; an MLP 30-256-256-2
  far larger than the data needs, Adam 2e-4, trained from scratch on 300 cases, 500 steps; curve = held-out
  loss on the other 269, which bottoms (steps 130-320) and rises late (over-fitting). Regime ``scratch``: it
  is not pre-trained. Schedules: constant, step, cosine, onecycle, poly.

``index.csv`` names each run's model ``family``, its ``metric`` (the CSV column the curve is), its
``regime`` (``scratch`` | ``finetune``: what ``dlsched predict curve --regime`` declares) and whether its task
``overfits`` by design (``cancer``: its fits set no shape prior, ``perf.prior``).

Each CSV has step, loss, accuracy, lr (the LR the optimiser used at that step), wall_s (seconds since the
run started) and train_loss (mean minibatch loss since the previous row). Seeds are fixed; bit-for-bit only on
the same torch build and CPU: regenerated on another machine, charlm-constant ended 0.25 % off its committed
CSV (the same with this script's version before its tasks shared one loop).
"""
from __future__ import annotations

import csv
import functools
import os
import pathlib
import sys
import time
from dataclasses import dataclass
from typing import Callable

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
    # a cosine to a floor (torch eta_min, timm min_lr), and an exponential decay per "epoch" of B / 50 steps
    "cosmin": lambda B: f"cosine:min=0.1:warmup={B // 20}",
    "exp": lambda B: f"exp:gamma=0.9:every={B // 50}:warmup={B // 20}",
}


def inverse_sqrt_spec(B: int, W: int) -> str:
    """Transformer (Vaswani et al.) inverse square root: linear warm-up to W, then sqrt(W / x), as ``points:``."""
    xs = [0, W] + [int(v) for v in np.unique(np.geomspace(W, B, 24).round())[1:]]
    return "points:" + ",".join(f"{x}={min(x / W, (W / x) ** 0.5) if x else 0:.4g}" for x in xs)


def _digits() -> tuple[torch.Tensor, torch.Tensor]:
    """scikit-learn's digits, scaled to [0, 1], in one fixed shuffled order."""
    from sklearn.datasets import load_digits

    X, y = load_digits(return_X_y=True)
    idx = np.random.default_rng(0).permutation(len(X))
    return torch.tensor(X[idx] / 16.0, dtype=torch.float32), torch.tensor(y[idx])


def _classifier_loop(model, Xtr, ytr, Xva, yva, batch_size: int, gen):
    """(batch, step, evaluate) of a classifier on in-memory tensors: random training minibatches, the whole
    held-out set evaluated (cross-entropy loss and accuracy)."""

    def batch():
        i = torch.randint(0, len(Xtr), (batch_size,), generator=gen)
        return Xtr[i], ytr[i]

    def evaluate():
        with torch.no_grad():
            out = model(Xva)
            return float(torch.nn.functional.cross_entropy(out, yva)), float((out.argmax(1) == yva).float().mean())

    def step(xb, yb):
        return torch.nn.functional.cross_entropy(model(xb), yb)

    return batch, step, evaluate


def _mlp(*widths: int) -> torch.nn.Sequential:
    layers = []
    for a, b in zip(widths, widths[1:]):
        layers += [torch.nn.Linear(a, b), torch.nn.ReLU()]
    return torch.nn.Sequential(*layers[:-1])


def digits_task(seed: int):
    X, y = _digits()
    torch.manual_seed(seed)
    model = _mlp(64, 128, 10)
    opt = torch.optim.SGD(model.parameters(), lr=0.02, momentum=0.9)
    return (model, opt, 0.02, *_classifier_loop(model, X[:1400], y[:1400], X[1400:], y[1400:], 16,
                                                torch.Generator().manual_seed(seed)))


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


def _source_text(*packages, recursive: bool = False) -> str:
    """The Python source of standard-library packages (PSF licence), in a fixed file order."""
    text = ""
    for pkg in packages:
        root = pathlib.Path(pkg.__file__).parent
        for f in sorted(root.rglob("*.py") if recursive else root.glob("*.py")):
            text += f.read_text(encoding="utf-8", errors="replace")
    return text


def _charlm_text() -> str:
    import asyncio
    import email
    import http
    import json

    return _source_text(email, json, http, asyncio)


class CharRNN(torch.nn.Module):
    """Embedding, one recurrent layer (``cell``: torch.nn.GRU or torch.nn.LSTM), a linear head per position."""
    def __init__(self, V: int, cell=torch.nn.GRU, emb: int = 32, hidden: int = 96):
        super().__init__()
        self.emb = torch.nn.Embedding(V, emb)
        self.rnn = cell(emb, hidden, batch_first=True)
        self.head = torch.nn.Linear(hidden, V)

    def forward(self, x):
        return self.head(self.rnn(self.emb(x))[0])


def _encoded(text: str, chars: list[str]) -> torch.Tensor:
    return torch.tensor([chars.index(c) for c in text], dtype=torch.long)


def charlm_task(seed: int):
    text = _charlm_text()
    chars = sorted(set(text))
    data = _encoded(text, chars)
    split = int(0.9 * len(data))
    train, val = data[:split], data[split:]
    V, T = len(chars), 48
    torch.manual_seed(seed)
    model = CharRNN(V)
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    return (model, opt, 3e-3, *_char_lm_loop(model, train, val, T, V, batch_size=32, val_windows=256,
                                             gen=torch.Generator().manual_seed(seed)))


def tinylm_task(seed: int):
    """A 2-layer causal transformer character LM (width 48, context 48, batch 16) on other stdlib packages than
    ``charlm`` (AdamW, weight decay 0.01)."""
    import logging
    import unittest
    import xml

    text = _source_text(unittest, xml, logging, recursive=True)
    chars = sorted(set(text))
    data = _encoded(text, chars)
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


@functools.cache
def pretrained(task: str) -> dict:
    """The pre-trained weights a fine-tune task starts from: trained here at a constant LR with seed 0, so every
    schedule of the task fine-tunes the same model (a deep copy of the state; nothing is downloaded)."""
    model, opt, peak, batch, step, _ = PRETRAIN[task](seed=0)
    train(opt, peak, batch, step, PRETRAIN_STEPS[task])
    return {k: v.clone() for k, v in model.state_dict().items()}


def _digits_low(seed: int):
    """Pre-training of ``digitsft``: the digits MLP on digits 0-4 only."""
    X, y = _digits()
    low = y < 5
    torch.manual_seed(seed)
    model = _mlp(64, 128, 10)
    opt = torch.optim.SGD(model.parameters(), lr=0.02, momentum=0.9)
    return (model, opt, 0.02, *_classifier_loop(model, X[low], y[low], X[low][:1], y[low][:1], 16,
                                                torch.Generator().manual_seed(seed)))


def digitsft_task(seed: int):
    """Fine-tune the 0-4 MLP, whole 10-way head, on digits 5-9: 520 training images, the rest (376) held out."""
    X, y = _digits()
    high = y >= 5
    Xh, yh = X[high], y[high]
    model = _mlp(64, 128, 10)
    model.load_state_dict(pretrained("digitsft"))
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    return (model, opt, 0.01, *_classifier_loop(model, Xh[:520], yh[:520], Xh[520:], yh[520:], 16,
                                                torch.Generator().manual_seed(seed)))


def _charft_vocab() -> tuple[str, str, list[str]]:
    """(pre-training text, fine-tuning text, the vocabulary of both): charlm's packages, then ``collections`` and
    ``concurrent``."""
    import collections
    import concurrent

    pre, ft = _charlm_text(), _source_text(collections, concurrent, recursive=True)
    return pre, ft, sorted(set(pre + ft))


def _charft_pre(seed: int):
    """Pre-training of ``charft``: the char GRU on charlm's text, over both texts' vocabulary."""
    pre, _, chars = _charft_vocab()
    data = _encoded(pre, chars)
    torch.manual_seed(seed)
    model = CharRNN(len(chars))
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    return (model, opt, 3e-3, *_char_lm_loop(model, data, data[:4096], 48, len(chars), batch_size=32,
                                             val_windows=8, gen=torch.Generator().manual_seed(seed)))


def charft_task(seed: int):
    """Fine-tune the pre-trained GRU on ``collections`` + ``concurrent``: 80 % to train, 20 % held out."""
    _, ft, chars = _charft_vocab()
    data = _encoded(ft, chars)
    split = int(0.8 * len(data))
    model = CharRNN(len(chars))
    model.load_state_dict(pretrained("charft"))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    return (model, opt, 1e-3, *_char_lm_loop(model, data[:split], data[split:], 48, len(chars), batch_size=32,
                                             val_windows=256, gen=torch.Generator().manual_seed(seed)))


def cancer_task(seed: int):
    """Breast-cancer diagnosis from scratch with a model far too big for 300 training cases: it over-fits (at
    Adam 2e-3 its held-out loss rose from step 50 on; 2e-4 puts the rise in the second half, as a user sees it)."""
    from sklearn.datasets import load_breast_cancer

    X, y = load_breast_cancer(return_X_y=True)
    idx = np.random.default_rng(0).permutation(len(X))
    X, y = X[idx], y[idx]
    mu, sd = X[:300].mean(0), X[:300].std(0) + 1e-9   # the training cases' statistics only
    X = torch.tensor((X - mu) / sd, dtype=torch.float32)
    y = torch.tensor(y)
    torch.manual_seed(seed)
    model = _mlp(30, 256, 256, 2)
    opt = torch.optim.Adam(model.parameters(), lr=2e-4)
    return (model, opt, 2e-4, *_classifier_loop(model, X[:300], y[:300], X[300:], y[300:], 16,
                                                torch.Generator().manual_seed(seed)))


PRETRAIN = {"digitsft": _digits_low, "charft": _charft_pre}
PRETRAIN_STEPS = {"digitsft": 300, "charft": 400}


@dataclass(frozen=True)
class Task:
    make: Callable
    budget: int
    family: str                 # the model's family (``perf.prior`` matches finished runs on it)
    schedules: tuple[str, ...]
    metric: str = "loss"        # the CSV column the curve is
    regime: str = "scratch"     # scratch | finetune (``dlsched predict curve --regime``)
    overfits: bool = False      # built to over-fit: its fits are no shape the law has (``perf.prior``)


# the first two tasks' runs predate the inverse-square-root family, digits' the floor and the exponential too
OLD = tuple(n for n in SCHEDULES if n not in ("invsqrt", "cosmin", "exp"))
TASKS = {"digits": Task(digits_task, 800, "mlp", OLD), "charlm": Task(charlm_task, 800, "gru", OLD + ("cosmin", "exp")),
         "tinylm": Task(tinylm_task, 600, "transformer", tuple(SCHEDULES)),
         "digitsft": Task(digitsft_task, 400, "mlp", ("constant", "step", "cosine", "linear", "wsd"), "accuracy",
                          "finetune"),
         "charft": Task(charft_task, 400, "gru", ("constant", "cosine", "linear", "wsd"), regime="finetune"),
         "cancer": Task(cancer_task, 500, "mlp", ("constant", "step", "cosine", "onecycle", "poly"), overfits=True)}


def train(opt, peak: float, batch, step_loss, steps: int, lr_at=lambda s: 1.0, evaluate=None,
          every: int = EVERY) -> list[dict]:
    """The one training loop (pre-training and every logged run, the hold-out set's too): ``lr_at(step)`` relative
    to ``peak``; with ``evaluate``, a row every ``every`` steps."""
    rows, t0, acc_loss, n = [], time.perf_counter(), 0.0, 0
    for s in range(steps):
        lr = peak * float(lr_at(s))
        for g in opt.param_groups:
            g["lr"] = lr
        xb, yb = batch()
        loss = step_loss(xb, yb)
        opt.zero_grad()
        loss.backward()
        opt.step()
        acc_loss, n = acc_loss + float(loss.detach()), n + 1
        if evaluate is not None and (s + 1) % every == 0:
            vl, va = evaluate()
            rows.append({"step": s + 1, "loss": round(vl, 6), "accuracy": round(va, 6), "lr": f"{lr:.6g}",
                         "wall_s": round(time.perf_counter() - t0, 4), "train_loss": round(acc_loss / n, 6)})
            acc_loss, n = 0.0, 0
    return rows


# a recipe's other run (``--reruns``): the same schedule SPEC at this share of the budget, another seed
RERUN_BUDGET, RERUN_SEED, RERUN_TASKS = 0.8, 2, ("tinylm", "charlm")


def run(task: str, sched_name: str, budget: int | None = None, seed: int = 1) -> list[dict]:
    t = TASKS[task]
    budget = budget or t.budget
    model, opt, peak, batch, step_loss, evaluate = t.make(seed=seed)
    sched = parse_schedule(SCHEDULES[sched_name](budget), budget)
    return train(opt, peak, batch, step_loss, budget, sched.lr, evaluate)


def write_rows(path: pathlib.Path, rows: list[dict]) -> None:
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]), lineterminator="\n")
        w.writeheader()
        w.writerows(rows)
    print(f"{path.name}: final loss {rows[-1]['loss']:.4f} acc {rows[-1]['accuracy']:.4f}", flush=True)


def reruns() -> None:
    (OUT / "reruns").mkdir(exist_ok=True)
    index = []
    for task in RERUN_TASKS:
        budget = int(TASKS[task].budget * RERUN_BUDGET)
        for name in TASKS[task].schedules:
            write_rows(OUT / "reruns" / f"{task}-{name}.csv", run(task, name, budget, RERUN_SEED))
            index.append({"file": f"{task}-{name}.csv", "task": task, "schedule": SCHEDULES[name](budget),
                          "budget": budget, "seed": RERUN_SEED})
    with open(OUT / "reruns" / "index.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(index[0]), lineterminator="\n")
        w.writeheader()
        w.writerows(index)


def main() -> None:
    torch.set_num_threads(1)
    if sys.argv[1:] == ["--reruns"]:
        return reruns()
    only = sys.argv[1:]
    index = []
    for task, t in TASKS.items():
        for name in t.schedules:
            fname = f"{task}-{name}.csv"
            if not only or fname in only:
                write_rows(OUT / fname, run(task, name))
            index.append({"file": fname, "task": task, "schedule": SCHEDULES[name](t.budget), "budget": t.budget,
                          "family": t.family, "metric": t.metric, "regime": t.regime,
                          "overfits": t.overfits})
    with open(OUT / "index.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(index[0]), lineterminator="\n")
        w.writeheader()
        w.writerows(index)


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    main()
