"""torch/lr_plan.py: the LR a script's schedulers will set, from copies stepped on a stand-in optimizer."""
import math

import numpy as np
import pytest
import torch
from torch.optim import lr_scheduler as sch

from dlsched.torch.lr_plan import knots, planned_lrs

STEPS = 300


def cosine_with_warmup(opt):
    return sch.LambdaLR(opt, lambda s: min(1.0, (s + 1) / 30) * 0.5 * (1 + math.cos(math.pi * min(s / STEPS, 1))))


SCHEDULERS = {
    "onecycle": lambda opt: [sch.OneCycleLR(opt, max_lr=0.1, total_steps=STEPS)],
    "lambda": lambda opt: [cosine_with_warmup(opt)],
    "multistep": lambda opt: [sch.MultiStepLR(opt, milestones=[100, 200], gamma=0.1)],
    "sequential": lambda opt: [sch.SequentialLR(opt, [sch.LinearLR(opt, 0.01, total_iters=20),
                                                      sch.CosineAnnealingLR(opt, T_max=STEPS - 20)], milestones=[20])],
    "two": lambda opt: [sch.LinearLR(opt, 0.1, total_iters=50), sch.ExponentialLR(opt, 0.995)],
}


@pytest.mark.parametrize("kind", SCHEDULERS)
@pytest.mark.parametrize("optimizer", [torch.optim.AdamW, lambda p, lr: torch.optim.SGD(p, lr, momentum=0.9)])
def test_the_plan_is_the_lr_the_schedulers_then_set_and_leaves_them_as_they_were(kind, optimizer):
    model = torch.nn.Linear(3, 1)
    opt = optimizer(model.parameters(), lr=0.1)
    schedulers = SCHEDULERS[kind](opt)
    for _ in range(40):                      # part-way through, with optimizer state
        model(torch.randn(4, 3)).sum().backward()
        opt.step()
        for s in schedulers:
            s.step()
    state = lambda: [(k, v.clone()) for d in opt.state_dict()["state"].values() for k, v in d.items()]  # noqa: E731
    before = ([s.state_dict() for s in schedulers], [g["lr"] for g in opt.param_groups], state())
    plan = planned_lrs(opt, schedulers, STEPS - 40)
    assert ([s.state_dict() for s in schedulers], [g["lr"] for g in opt.param_groups]) == before[:2]
    assert all(k == k2 and torch.equal(v, v2) for (k, v), (k2, v2) in zip(state(), before[2]))
    actual = []
    for _ in range(STEPS - 40):
        actual.append(opt.param_groups[0]["lr"])
        opt.step()
        for s in schedulers:
            s.step()
    assert plan == pytest.approx(actual, rel=1e-9, abs=1e-15)


def test_knots_keep_both_sides_of_every_jump_and_the_ends():
    lrs = np.repeat([1.0, 0.1, 0.01], [1000, 500, 500])
    at = knots(lrs)
    assert {999, 1000, 1499, 1500, 0, 1999} <= set(at.tolist()) and len(at) <= 410
    assert np.interp(np.arange(2000), at, lrs[at]) == pytest.approx(lrs)
