"""What a training job is: the contract between a job definition module and the runtime.

A job module exposes ``make_job(**params) -> TrainJob``. The runtime owns processes, data order,
batch sizes and checkpoints; the job only says *what* to train, so the same definition runs on
1 or N workers, all-reduce or parameter-server, and resumes from checkpoints unchanged.
"""
from __future__ import annotations

import importlib
import importlib.util
import sys
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import torch

from dlsched.entry_check import parse_params  # noqa: F401  (re-exported: train.run parses --param with it)
from dlsched.errors import UserError


@dataclass(frozen=True)
class TrainJob:
    """Model factory, an indexable dataset of ``num_samples`` items with integer ids, loss and SGD settings.

    ``get_batch(ids)`` returns ``(inputs, targets)`` for a 1-D LongTensor of sample ids; ids are
    ``0..num_samples-1`` and double as the exactly-once ledger keys. ``lr`` is the learning rate at
    ``batch_size`` (linear scaling rescales it when the global batch changes).
    """

    name: str
    make_model: Callable[[], torch.nn.Module]
    num_samples: int
    get_batch: Callable[[torch.Tensor], tuple[torch.Tensor, torch.Tensor]]
    loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
    batch_size: int = 32
    lr: float = 0.05
    momentum: float = 0.9
    weight_decay: float = 0.0
    epochs: int = 1
    target_loss: float | None = None  # convergence rule: stop once the epoch-mean loss is at or below it
    seed: int = 0
    max_local_batch: int | None = None  # memory limit per worker -> gradient accumulation past it
    throttle_s: float = 0.0  # extra seconds per step: emulates a heavier model in tests and demos
    params: dict[str, Any] = field(default_factory=dict)

    def make_optimizer(self, model: torch.nn.Module) -> torch.optim.SGD:
        return torch.optim.SGD(model.parameters(), lr=self.lr, momentum=self.momentum, weight_decay=self.weight_decay)


def load_entry(entry: str) -> Callable[..., TrainJob]:
    """Resolve ``path/to/file.py:make_job`` or ``package.module:make_job`` to the factory."""
    if ":" not in entry:
        raise UserError(f"--entry {entry!r}: expected 'path/to/file.py:make_job' or 'module:make_job'")
    target, func = entry.rsplit(":", 1)
    if target.endswith(".py"):
        path = Path(target).resolve()
        if not path.is_file():
            raise UserError(f"--entry {entry!r}: file {path} not found")
        modname = f"dlsched_job_{path.stem}"
        spec = importlib.util.spec_from_file_location(modname, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[modname] = module
        spec.loader.exec_module(module)
    else:
        try:
            module = importlib.import_module(target)
        except ImportError as e:
            raise UserError(f"--entry {entry!r}: cannot import module {target!r} ({e})") from e
    factory = getattr(module, func, None)
    if not callable(factory):
        raise UserError(f"--entry {entry!r}: {target} has no callable {func!r}")
    if func.startswith("_") or getattr(factory, "__module__", None) != module.__name__:
        # only a job factory the file defines, never something it imported (``from os import system``)
        raise UserError(f"--entry {entry!r}: {func!r} is not a function defined in {target}")
    return factory


def build_job(entry: str, params: dict[str, Any]) -> TrainJob:
    make_job = load_entry(entry)
    try:
        job = make_job(**params)
    except Exception as e:   # e.g. --param num_samples=-5: was a 15-line traceback; one line, its params and where
        frames = traceback.extract_tb(e.__traceback__)
        source = getattr(getattr(make_job, "__code__", None), "co_filename", None)
        own = [f for f in frames if f.filename == source]   # the job file's line, not the library's it called
        where = (own or frames)[-1]
        given = ", ".join(f"{k}={v!r}" for k, v in params.items())
        raise UserError(f"--entry {entry!r}: make_job({given}) raised {type(e).__name__}: {e} "
                        f"({where.filename}:{where.lineno})") from e
    if not isinstance(job, TrainJob):
        raise UserError(f"--entry {entry!r}: make_job returned {type(job).__name__}, expected dlsched.train.job.TrainJob")
    if job.num_samples <= 0:
        raise UserError(f"--entry {entry!r}: num_samples must be > 0, got {job.num_samples}")
    # epochs=-1 trained an epoch and ended "finished" with a negative total; batch_size=0 was a ZeroDivisionError
    for name in ("epochs", "batch_size"):
        if getattr(job, name) < 1:
            raise UserError(f"--entry {entry!r}: {name} must be >= 1, got {getattr(job, name)}")
    return job
