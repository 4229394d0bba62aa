"""dlsched.torch — train your own PyTorch loop elastically under dlsched (guide: docs/porting.md).

    import dlsched.torch as dt
    dt.init()
    model = dt.ElasticDataParallel(Net())
    optimizer = torch.optim.AdamW(model.parameters()); scheduler = OneCycleLR(optimizer, ...)
    loader = dt.ElasticDataLoader(dataset, batch_size=64)
    for epoch in dt.remaining_epochs(10):
        for x, y in loader:
            ...; loss.backward(); optimizer.step(); scheduler.step()
            dt.report(loss=loss.item())

Outside the scheduler the same script runs with one worker. Model, optimizers training it, their LR
schedulers and GradScalers are registered when the loop starts and checkpointed/moved on resizes; anything
else with ``state_dict``/``load_state_dict`` via ``register(name, obj)``.
"""
from __future__ import annotations

from typing import Any

import torch

from dlsched.errors import UserError
from dlsched.torch.loader import ElasticDataLoader, remaining_epochs
from dlsched.torch.parallel import ElasticDataParallel
from dlsched.torch.session import Session, current_session, device, init

__all__ = ["init", "ElasticDataParallel", "ElasticDataLoader", "remaining_epochs", "report", "register", "rank",
           "world_size", "device", "current_session"]


def report(**metrics: Any) -> None:
    """Record metrics (loss, accuracy, validation metrics...) for this step, or alone outside a step."""
    values = {k: _number(k, v) for k, v in metrics.items()}
    current_session().report(values)


def _number(name: str, value: Any) -> float:
    """A metric as a float: Python and numpy numbers, one-element tensors; anything else is the user's error."""
    try:
        if isinstance(value, torch.Tensor) and value.numel() == 1:
            return float(value.item())
        if not isinstance(value, (str, bytes, torch.Tensor)):
            return float(value)
    except (TypeError, ValueError):
        pass
    shown = f"a tensor of shape {tuple(value.shape)}" if isinstance(value, torch.Tensor) else repr(value)[:80]
    raise UserError(f"report: {name}={shown} is not a number (give a float, an int, a numpy scalar or a "
                    "one-element tensor)")


def register(name: str, obj: Any) -> None:
    """Checkpoint and move ``obj`` (anything with state_dict/load_state_dict) with the job."""
    current_session().register(name, obj)


def rank() -> int:
    """This worker's rank in the group. Before the training loop starts: the rank the job's current plan gives
    it (-1 for a prepared standby worker); a resize may change it, as it may change rank 0."""
    s = current_session()
    return s.rank if s.joined or s.env is None else s.membership.planned()[0]


def world_size() -> int:
    s = current_session()
    return s.world if s.joined or s.env is None else s.membership.planned()[1]
