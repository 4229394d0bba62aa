"""What a script's checkpoint holds: its wrapped models and the objects registered (or discovered) with them."""
from __future__ import annotations

import gc
from typing import Any, Callable

import torch

from dlsched.errors import UserError
from dlsched.torch.accumulation import MicroBatches, gate

LRScheduler = torch.optim.lr_scheduler.LRScheduler


class StateRegistry:
    def __init__(self, pre_step: Callable, post_step: Callable, micro: MicroBatches):
        self.pre_step, self.post_step = pre_step, post_step  # hooked onto every registered optimizer
        self.micro = micro  # optimizers and GradScalers wait for a step's last micro-batch
        self.models: list = []  # ElasticDataParallel instances, in creation order
        self.objects: dict[str, Any] = {}  # name -> object with state_dict/load_state_dict
        self.hooked: set[int] = set()

    def register(self, name: str, obj: Any) -> None:
        if not (hasattr(obj, "state_dict") and hasattr(obj, "load_state_dict")):
            raise UserError(f"register({name!r}): {type(obj).__name__} has no state_dict/load_state_dict")
        self.objects[name] = obj
        if id(obj) in self.hooked:
            return
        self.hooked.add(id(obj))
        gate(obj, self.micro)
        if isinstance(obj, torch.optim.Optimizer):
            obj.register_step_pre_hook(self.pre_step)
            obj.register_step_post_hook(self.post_step)

    def discover(self) -> None:
        """Register every optimizer training a wrapped model, its LR schedulers and every GradScaler."""
        params = {id(p): i for m in self.models for i, p in enumerate(m.module.parameters())}
        known = {id(o) for o in self.objects.values()}
        optimizers, schedulers, scalers = [], [], []
        for obj in gc.get_objects():
            if id(obj) in known:
                continue
            kind = type(obj)
            if issubclass(kind, torch.optim.Optimizer):
                mine = [params[id(p)] for g in obj.param_groups for p in g["params"] if id(p) in params]
                if mine or not params:
                    optimizers.append((min(mine, default=0), obj))
            elif issubclass(kind, LRScheduler):
                schedulers.append(obj)
            elif issubclass(kind, torch.amp.GradScaler):
                scalers.append(obj)
        optimizers = [o for _, o in sorted(optimizers, key=lambda t: t[0])]
        for i, opt in enumerate(optimizers):
            self.register(f"optimizer{i}", opt)
            for j, sched in enumerate(s for s in schedulers if s.optimizer is opt):
                self.register(f"optimizer{i}.scheduler{j}.{type(sched).__name__}", sched)
        for i, scaler in enumerate(scalers):
            self.register(f"scaler{i}", scaler)

    def optimizers(self) -> list[torch.optim.Optimizer]:
        return [o for o in self.objects.values() if isinstance(o, torch.optim.Optimizer)]

    def state(self) -> dict:
        objects = {f"model{i}": m.module.state_dict() for i, m in enumerate(self.models)}
        objects.update({name: obj.state_dict() for name, obj in self.objects.items()})
        return objects

    def load(self, objects: dict) -> None:
        for i, m in enumerate(self.models):
            m.module.load_state_dict(objects[f"model{i}"])
        for name, obj in self.objects.items():
            if name not in objects:
                raise UserError(f"the job's state has no {name!r} (registered here, not in the job's first run)")
            obj.load_state_dict(objects[name])
