"""The rest of a logged LR (``perf.lr_continuation``), on the LR the development runs logged (``bench/curves``): each
cut where the run was still training, its continuation against what it went on to log."""
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from dlsched.perf.lr_continuation import continuation, logged_lr_schedule, lr_logged_until
from dlsched.perf.schedule import Schedule

CURVES = Path(__file__).resolve().parents[2] / "bench" / "curves"


def logged(name: str, share: float):
    d = pd.read_csv(CURVES / f"{name}.csv")
    x, lr = d.step.to_numpy(float), d.lr.to_numpy(float)
    return x, lr, x <= share * x[-1], float(x[-1])


@pytest.mark.parametrize("name, share, family", [
    ("charlm-cosine", 0.1, "cosine"), ("tinylm-cosine", 0.5, "cosine"), ("digits-linear", 0.25, "linear"),
    ("charlm-poly", 0.25, "poly"), ("tinylm-wsd", 0.9, "wsd"), ("charlm-onecycle", 0.5, "cosine"),
    ("tinylm-invsqrt", 0.25, "invsqrt"), ("charlm-cosmin", 0.5, "cosine"), ("tinylm-exp", 0.25, "exp")])
def test_a_logged_decay_goes_on_as_its_family_to_within_a_percent_of_its_peak(name, share, family):
    x, lr, seen, budget = logged(name, share)
    schedule, found = logged_lr_schedule(x[seen], lr[seen], budget)
    assert found is not None and found.spec.split(":")[0] == family, found
    assert np.max(np.abs(schedule.lr(x[~seen]) - lr[~seen])) < 0.01 * lr.max()   # what the run then logged
    assert np.array_equal(schedule.lr(x[seen]), lr[seen])                          # the log itself is kept


@pytest.mark.parametrize("name, share", [
    ("charlm-constant", 0.5), ("tinylm-wsd", 0.5),   # flat since the peak: nothing tells what comes
    ("charlm-step", 0.6),                            # a cut: nothing tells where the next one comes
    ("tinylm-invsqrt", 0.1),                         # 3 rows of decay: fewer than a family with 3 parameters needs
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


def _scheduled(make, steps: int) -> tuple[np.ndarray, np.ndarray]:
    """(step, LR) of a real torch scheduler stepped every step, each row the LR its step trained with."""
    import torch

    opt = torch.optim.AdamW([torch.zeros(1, requires_grad=True)], lr=3e-4)
    sched, lr = make(opt), []
    for _ in range(steps):
        lr.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    return np.arange(1, steps + 1, dtype=float), np.array(lr)


def _warm_then(decay, warmup: int):
    return lambda s: s / warmup if s < warmup else decay(s)


@pytest.mark.parametrize("family, make", [
    ("cosine", lambda o: __import__("torch").optim.lr_scheduler.CosineAnnealingLR(o, T_max=1000, eta_min=3e-5)),
    ("linear", lambda o: __import__("torch").optim.lr_scheduler.LinearLR(o, 1.0, 0.05, total_iters=1000)),
    ("exp", lambda o: __import__("torch").optim.lr_scheduler.ExponentialLR(o, gamma=0.997)),
    ("invsqrt", lambda o: __import__("torch").optim.lr_scheduler.LambdaLR(   # fairseq's inverse_sqrt
        o, _warm_then(lambda s: (100 / s) ** 0.5, 100))),
    ("cosine", lambda o: __import__("torch").optim.lr_scheduler.LambdaLR(    # a warm-up, then a cosine to 10 %
        o, _warm_then(lambda s: 0.1 + 0.45 * (1 + np.cos(np.pi * (s - 50) / 950)), 50)))])
def test_a_schedulers_floor_rate_or_inverse_square_root_goes_on_as_it_does(family, make):
    """torch schedulers users run whose decay ends above 0 (eta_min, end_factor), or never ends (exponential, inverse
    square root), logged every 10 steps and cut at a quarter of a 1 000-step budget: held before."""
    x, lr = _scheduled(make, 1000)
    x, lr = x[9::10], lr[9::10]
    seen = x <= 250
    schedule, found = logged_lr_schedule(x[seen], lr[seen], 1000.0)
    assert found is not None and found.spec.split(":")[0] == family, found
    assert np.max(np.abs(schedule.lr(x[~seen]) - lr[~seen])) < 0.01 * lr.max()



def test_a_long_per_step_log_is_matched_on_a_sample_of_its_rows(monkeypatch):
    """100 000 steps logged one by one (float32, as a logger writes them): each family is fitted to at most ``ROWS``
    of them, spread evenly (all of them took 19 s), and the cosine is found with where its warm-up ended."""
    import dlsched.perf.lr_continuation as module

    x, budget, warmup = np.arange(1, 100_001, dtype=float), 200_000.0, 2000.0
    lr = np.where(x < warmup, x / warmup, 0.5 * (1 + np.cos(np.pi * (x - warmup) / (budget - warmup)))) * 3e-4
    lr = lr.astype(np.float32).astype(float)
    rows, fit = [], module._fit

    def counted(family, x, *args):
        rows.append(len(x))
        return fit(family, x, *args)
    monkeypatch.setattr(module, "_fit", counted)
    found = continuation(x, lr, budget)
    assert rows and max(rows) <= module.ROWS
    assert found is not None and found.spec.startswith("cosine:warmup=")
    assert abs(float(found.spec.split("=")[1]) - warmup) < 1


@pytest.mark.parametrize("t_mult, cut, spec", [(1, 250, "sgdr:t0=200"), (2, 350, "sgdr:t0=100:mult=2"),
                                                (2, 250, "sgdr:t0=100:mult=2"), (3, 200, "sgdr:t0=66.67:mult=3"),
                                                (2, 110, None)])   # 1 row of the second cycle: its growth unseen
def test_a_log_that_restarted_goes_on_restarting(t_mult, cut, spec):
    """torch's CosineAnnealingWarmRestarts logged every 10 steps: once a restart shows, its cycles go on, their growth
    (T_mult) from the first two cycles, or from the second's decay so far where one restart shows; its highest row
    was a later cycle's first, whose decay alone a poly followed before."""
    import torch

    x, lr = _scheduled(lambda o: torch.optim.lr_scheduler.CosineAnnealingWarmRestarts(
        o, T_0=200 // t_mult, T_mult=t_mult), 1000)   # T_0 66 for T_mult 3: restarts at 66, 264, 858
    x, lr = x[9::10], lr[9::10]
    seen = x <= cut
    schedule, found = logged_lr_schedule(x[seen], lr[seen], 1000.0)
    if spec is None:
        assert found is None
        return
    name, t0, *mult = spec.split(":")
    got = dict(p.split("=") for p in found.spec.split(":")[1:])
    assert found.spec.startswith(name) and abs(float(got["t0"]) - float(t0[3:])) < 1 and got.get("mult") == \
        (mult[0][5:] if mult else None), found
    assert np.max(np.abs(schedule.lr(x[~seen]) - lr[~seen])) < 0.01 * lr.max()


def recipe(name: str, scale: float = 1.0) -> Schedule:
    """The LR a recipe's other run logged (``bench/curves/reruns``: 0.8x the budget, another seed)."""
    d, index = pd.read_csv(CURVES / "reruns" / f"{name}.csv"), pd.read_csv(CURVES / "reruns" / "index.csv")
    budget = float(index.set_index("file").loc[f"{name}.csv", "budget"])
    return Schedule.from_points(d.step, scale * d.lr, budget, spec="its recipe's other run")


@pytest.mark.parametrize("name, share", [("tinylm-step", 0.4), ("tinylm-multistep", 0.2), ("charlm-wsd", 0.5),
                                         ("tinylm-steps", 0.5)])
def test_a_log_that_follows_its_recipe_goes_on_as_the_recipes_other_run_did_cuts_to_come_included(name, share):
    """A step schedule before its cuts, a WSD in its stable phase: no family can tell what comes, the recipe's
    other run (a shorter one, another seed, its LR logged at another scale) does: it cut, then ran at the new LR."""
    x, lr, seen, budget = logged(name, share)
    assert continuation(x[seen], lr[seen], budget) is None   # held without it
    schedule, found = logged_lr_schedule(x[seen], lr[seen], budget, recipe(name, scale=3.0))
    assert found is not None and found.spec == "its recipe's other run"
    assert found.scale == pytest.approx(1 / 3, rel=1e-6)
    # what the run then logged, except within a logging interval of a cut (the rows each run logged it between)
    gap = np.abs(schedule.lr(x[~seen]) - lr[~seen]) / lr.max()
    cut = np.abs(np.diff(lr, prepend=lr[0])) > 0.05 * lr.max()
    near = np.convolve(cut, np.ones(3), mode="same")[~seen] > 0
    assert np.max(gap[~near], initial=0.0) < 0.01 and near.sum() <= 3 * cut[~seen].sum()
    assert np.array_equal(schedule.lr(x[seen]), lr[seen])


def test_a_log_that_departs_from_the_recipe_given_goes_on_as_its_own():
    """A cosine's log given a step recipe: past its first rows they part, and the cosine goes on as its family."""
    x, lr, seen, budget = logged("tinylm-cosine", 0.4)
    schedule, found = logged_lr_schedule(x[seen], lr[seen], budget, recipe("tinylm-step"))
    assert found is not None and found.spec.startswith("cosine")
    x, lr, seen, budget = logged("tinylm-step", 0.6)   # past its first cut, a constant recipe does not follow
    assert logged_lr_schedule(x[seen], lr[seen], budget, recipe("tinylm-constant"))[1] is None
