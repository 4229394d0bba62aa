"""The rest of a logged LR (``perf.lr_continuation``), on the LR the development runs logged (``bench/curves``): each
cut where the run was still training, its continuation against what it went on to log."""
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from dlsched.perf.lr_continuation import continuation, logged_lr_schedule, lr_logged_until

CURVES = Path(__file__).resolve().parents[2] / "bench" / "curves"


def logged(name: str, share: float):
    d = pd.read_csv(CURVES / f"{name}.csv")
    x, lr = d.step.to_numpy(float), d.lr.to_numpy(float)
    return x, lr, x <= share * x[-1], float(x[-1])


@pytest.mark.parametrize("name, share, family", [
    ("charlm-cosine", 0.1, "cosine"), ("tinylm-cosine", 0.5, "cosine"), ("digits-linear", 0.25, "linear"),
    ("charlm-poly", 0.25, "poly"), ("tinylm-wsd", 0.9, "wsd"), ("charlm-onecycle", 0.5, "cosine")])
def test_a_logged_decay_goes_on_as_its_family_to_within_a_percent_of_its_peak(name, share, family):
    x, lr, seen, budget = logged(name, share)
    schedule, found = logged_lr_schedule(x[seen], lr[seen], budget)
    assert found is not None and found.spec.split(":")[0] == family, found
    assert np.max(np.abs(schedule.lr(x[~seen]) - lr[~seen])) < 0.01 * lr.max()   # what the run then logged
    assert np.array_equal(schedule.lr(x[seen]), lr[seen])                          # the log itself is kept


@pytest.mark.parametrize("name, share", [
    ("charlm-constant", 0.5), ("tinylm-wsd", 0.5),   # flat since the peak: nothing tells what comes
    ("charlm-step", 0.6), ("tinylm-invsqrt", 0.5),   # a cut, an inverse square root: no family follows them
    ("charlm-cosine", 0.04)])                        # still warming up
def test_a_log_no_family_follows_is_held_at_its_last_value(name, share):
    x, lr, seen, budget = logged(name, share)
    assert continuation(x[seen], lr[seen], budget) is None
    schedule, found = logged_lr_schedule(x[seen], lr[seen], budget)
    assert found is None and schedule.lr(budget) == lr[seen][-1]


def test_a_log_that_reaches_the_budget_is_its_own_schedule():
    x, lr, _, budget = logged("charlm-cosine", 1.0)
    assert lr_logged_until(x, budget) is None and logged_lr_schedule(x, lr, budget)[1] is None
    assert lr_logged_until(x[:-2], budget) == x[-3]   # two logging intervals short: a run still training


def test_a_scheduler_stepped_per_epoch_and_logged_per_step_goes_on_as_its_family():
    """torch's CosineAnnealingLR stepped once an epoch, its LR logged every step (Lightning's LearningRateMonitor
    with a per-epoch scheduler): a staircase, whose each first row lies on the cosine."""
    import torch

    opt = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=0.1)
    cosine = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=90)
    x, lr = [], []
    for epoch in range(90):
        for i in range(50):
            x.append(epoch * 50 + i + 1)
            lr.append(opt.param_groups[0]["lr"])
        opt.step()
        cosine.step()
    x, lr = np.array(x, float), np.array(lr)
    seen = x <= 0.25 * 4500
    schedule, found = logged_lr_schedule(x[seen], lr[seen], 4500.0)
    assert found is not None and found.spec.startswith("cosine"), found
    assert np.max(np.abs(schedule.lr(x[~seen]) - lr[~seen])) < np.pi / 180 * lr.max()   # one epoch's drop at most
