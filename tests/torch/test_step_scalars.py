"""The step scalars' all-reduce: started at the optimizer step when one optimizer trains the step, else at the boundary."""
from types import SimpleNamespace

import pytest
import torch
import torch.distributed as dist

from dlsched.torch.step_scalars import StepScalars


@pytest.fixture
def group():
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)  # a real (one-rank) all-reduce
    yield
    dist.destroy_process_group()


def _session(optimizers: int, values: list[float], sync: bool = True) -> SimpleNamespace:
    """What StepScalars reads of a session: the open step, the group's size, its optimizers and its scalars."""
    opts = [torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=0.1) for _ in range(optimizers)]
    return SimpleNamespace(open={"sync": sync}, world=2, registry=SimpleNamespace(optimizers=lambda: opts),
                           extras=lambda step_open: list(values))


def test_one_optimizer_starts_it_at_its_step_with_the_scalars_then(group):
    values = [1.0, 2.0]
    scalars = StepScalars()
    scalars.before_optimizer_step(_session(1, values))
    scalars.before_optimizer_step(_session(1, [9.0, 9.0]))  # a second optimizer.step in the step: started once
    values[1] = 5.0  # changed after the optimizer step: not this step's
    assert scalars.summed(lambda: pytest.fail("the boundary started it again")) == [1.0, 2.0]
    assert scalars.summed(lambda: [3.0]) == [3.0]  # the next sync step starts afresh


@pytest.mark.parametrize("optimizers,sync", [(2, True), (0, True), (1, False)], ids=["two-optimizers", "none", "not-sync"])
def test_otherwise_the_boundary_starts_it(group, optimizers, sync):
    scalars = StepScalars()
    scalars.before_optimizer_step(_session(optimizers, [1.0], sync=sync))
    assert scalars.summed(lambda: [3.0]) == [3.0]
