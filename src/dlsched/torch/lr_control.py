"""The LR rule applied inside the user's optimizer step: the factor for the current batch, ramped per step."""
from __future__ import annotations

import time

import torch

from dlsched.torch.lr_rule import RAMP_STEPS, compensate_momentum, default_rule, target_factor


class LrControl:
    def __init__(self, session):
        self.s = session  # its step, batch sizes, noise estimate and factor
        self.saved_lrs: list[float] = []

    def rule(self) -> str:
        if self.s.lr_rule != "auto":
            return self.s.lr_rule
        opts = self.s.registry.optimizers()
        return default_rule(opts[0]) if opts else "linear"

    def retarget(self) -> None:
        s = self.s
        rule, reference = self.rule(), s._reference()
        before = s.factor.batch or reference   # the batch of the LR in force (none set yet: the script's own)
        target = target_factor(rule, s.global_batch, reference, s.noise)
        sgd = any(isinstance(o, torch.optim.SGD) for o in s.objects.values())
        s.factor = s.factor.retarget(s.step, target, RAMP_STEPS if rule == "linear" and sgd else 0, s.global_batch)
        if s.rank == 0 and (target != 1.0 or s.factor.start != 1.0):
            s._emit({"event": "lr_rule", "time": time.time(), "rule": rule, "from_batch": before,
                     "to_batch": s.global_batch, "reference_batch": reference, "factor": target,
                     "ramp_steps": s.factor.ramp})

    def pre_step(self, optimizer, args, kwargs) -> None:
        s = self.s
        f = s.factor.at(s.step)
        if isinstance(optimizer, torch.optim.SGD):
            compensate_momentum(optimizer, s.factor.at(s.step - 1), f)
        self.saved_lrs = [g["lr"] for g in optimizer.param_groups]
        for g in optimizer.param_groups:
            g["lr"] = g["lr"] * f
        s.step_lr = float(optimizer.param_groups[0]["lr"])
        s.step_lr_factor = f
        for m in s.models:
            m._measure_before_step(s)
        s.scalars.before_optimizer_step(s)  # after the measurement: the local |g|² is final

    def post_step(self, optimizer, args, kwargs) -> None:
        for g, lr in zip(optimizer.param_groups, self.saved_lrs):
            g["lr"] = lr
