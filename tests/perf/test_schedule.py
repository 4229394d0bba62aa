import numpy as np
import pytest

from dlsched.perf.schedule import Schedule, areas, parse_schedule, shared_shape, stretched


def test_every_spec_family_parses_to_its_shape():
    B = 100.0
    assert parse_schedule("constant", B).lr([0, 50, 99]).tolist() == [1, 1, 1]
    step = parse_schedule("step:30,60:0.1", B)
    assert np.allclose(step.lr([0, 29.9, 30, 59, 60, 99]), [1, 1, 0.1, 0.1, 0.01, 0.01])
    cos = parse_schedule("cosine:warmup=10", B)
    assert cos.lr(0) == 0 and cos.lr(10) == pytest.approx(1) and cos.lr(100) == pytest.approx(0, abs=1e-9)
    assert cos.lr(55) == pytest.approx(0.5, abs=1e-3)
    one = parse_schedule("onecycle:pct=0.25", B)
    assert one.lr(25) == pytest.approx(1) and one.lr(0) == pytest.approx(1 / 25) and one.lr(100) < 1e-4
    wsd = parse_schedule("wsd:warmdown=20:warmup=5", B)
    assert np.allclose(wsd.lr([0, 5, 50, 80, 90, 100]), [0, 1, 1, 1, 0.5, 0])
    poly = parse_schedule("poly:power=2", B)
    assert poly.lr(50) == pytest.approx(0.25, abs=1e-3)
    assert parse_schedule("linear:warmup=20", B).lr(60) == pytest.approx(0.5, abs=1e-3)
    steps = parse_schedule("steps:0=0.01,5=0.1,95=0.01", B)
    assert np.allclose(steps.lr([0, 4.9, 5, 94, 95]), [0.01, 0.01, 0.1, 0.1, 0.01])
    pts = parse_schedule("points:0=0,15=0.1,30=0.005,35=0", B)
    assert pts.lr(7.5) == pytest.approx(0.05) and pts.lr(50) == 0


def _torch_lrs(make, steps: int) -> np.ndarray:
    """The LR a torch scheduler gives each of ``steps`` steps (stepped once a step), relative to the optimizer's."""
    import torch

    opt = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=1.0)
    sched, lrs = make(opt), []
    for _ in range(steps):
        lrs.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    return np.array(lrs)


def test_floors_inverse_square_root_exponential_and_restarts_are_the_schedulers_users_run():
    import torch.optim.lr_scheduler as S

    B, x = 200, np.arange(200)
    cos_min = _torch_lrs(lambda o: S.CosineAnnealingLR(o, T_max=B, eta_min=0.1), B)
    assert np.allclose(parse_schedule("cosine:min=0.1", B).lr(x), cos_min, atol=1e-4)
    linear_to = _torch_lrs(lambda o: S.LinearLR(o, start_factor=1.0, end_factor=0.2, total_iters=B), B)
    assert np.allclose(parse_schedule("linear:min=0.2", B).lr(x), linear_to, atol=1e-4)
    expo = _torch_lrs(lambda o: S.ExponentialLR(o, gamma=0.98), B)
    assert np.allclose(parse_schedule("exp:gamma=0.98", B).lr(x), expo, rtol=1e-3)
    # fairseq's inverse_sqrt and Hugging Face's get_inverse_sqrt_schedule: linear warm-up, then sqrt(T / (x - W + T))
    W, T = 20, 50
    rsqrt = _torch_lrs(lambda o: S.LambdaLR(o, lambda s: s / W if s < W else (T / (s - W + T)) ** 0.5), B)
    assert np.allclose(parse_schedule(f"invsqrt:warmup={W}:timescale={T}", B).lr(x), rsqrt, atol=1e-4)
    assert parse_schedule(f"invsqrt:warmup={W}", B).lr(80) == pytest.approx((W / 80) ** 0.5, abs=1e-4)
    assert parse_schedule("exp:gamma=0.5:every=10:warmup=10", B).lr(30) == pytest.approx(0.25, abs=1e-3)
    sgdr = _torch_lrs(lambda o: S.CosineAnnealingWarmRestarts(o, T_0=30, T_mult=2, eta_min=0.1), B)
    assert np.allclose(parse_schedule("sgdr:t0=30:mult=2:min=0.1", B).lr(x), sgdr, atol=1e-3)
    wsd = parse_schedule("wsd:warmdown=20:min=0.1", B)
    assert np.allclose(wsd.lr([0, 180, 190, 200]), [1, 1, 0.55, 0.1])


@pytest.mark.parametrize("spec", ["cosine:warmup", "step:30,20:0.1", "poly:warmup=5", "wsd:warmup=5",
                                  "cosine:min=1", "invsqrt", "invsqrt:min=0.1", "exp:gamma=1.5", "exp:gamma=0",
                                  "exp:gamma=0.9:every=0", "sgdr", "sgdr:t0=10:mult=0.5", "sgdr:t0=0.001",
                                  "onecycle:pct=2", "steps:a=1", "bogus", "cosine:warmup=200",
                                  "points:0=0,10=inf", "steps:0=nan", "step:30:inf", "step:nan:0.1", "step:0,30:0.1"])
def test_a_bad_spec_is_one_line_naming_the_spec(spec):
    with pytest.raises(ValueError) as e:
        parse_schedule(spec, 100)
    assert spec in str(e.value) and "\n" not in str(e.value)


def test_areas_count_the_forward_area_and_the_annealing_once_it_happened():
    s = parse_schedule("step:50:0.1", 100)
    s1, s2 = areas(s, [25, 50, 100])
    assert s1[0] == pytest.approx(0.25, rel=1e-2) and s1[2] == pytest.approx(0.55, rel=1e-2)
    assert s2[0] == 0 and s2[1] < 0.05 and s2[2] == pytest.approx(0.9, rel=1e-2)
    assert parse_schedule("constant", 100).anneals_after(0) is False and s.anneals_after(10) and not s.anneals_after(60)


def test_lr_column_schedule_follows_the_logged_values():
    s = Schedule.from_points([0, 10, 20], [1.0, 0.5, 0.25], budget=20)
    assert s.lr(5) == pytest.approx(0.75) and s.anneals_after(0)


def test_decay_tells_cuts_by_factors_from_gradual_annealing():
    B = 100.0
    assert parse_schedule("constant", B).decay == "none"
    assert parse_schedule("step:30,60:0.1", B).decay == "step"
    assert parse_schedule("steps:0=0.3,10=1,60=0.3", B).decay == "step"   # warm-up steps up, then a cut
    for spec in ("cosine:warmup=10", "onecycle", "wsd:warmdown=20", "linear", "steps:0=1,10=0.96,20=0.92"):
        assert parse_schedule(spec, B).decay == "anneal", spec


def test_a_logged_lr_is_a_step_schedule_where_it_is_a_staircase_of_cuts():
    """A logged LR was read as annealed whatever it was: a StepLR logged every 50 steps took the annealing prior, and
    predicted a Lightning run's final accuracy 2 points above its own SPEC's (0.981 vs 0.961)."""
    import torch

    def logged(scheduler, epochs=20, rows=5, **kw):
        opt = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=0.1)
        sched, xs, lrs = scheduler(opt, **kw), [], []
        for e in range(epochs):
            for r in range(rows):
                xs.append(e * rows + r)
                lrs.append(opt.param_groups[0]["lr"])
            opt.step()
            sched.step()
        return Schedule.from_points(xs, lrs, epochs * rows).decay

    lr = torch.optim.lr_scheduler
    assert logged(lr.MultiStepLR, milestones=[10, 15], gamma=0.1) == "step"
    assert logged(lr.StepLR, step_size=5, gamma=0.5) == "step"
    assert logged(lr.CosineAnnealingLR, T_max=20) == "anneal"   # per epoch: a staircase of small falls
    assert logged(lr.CosineAnnealingLR, T_max=100, rows=1, epochs=100) == "anneal"
    assert logged(lr.LinearLR, start_factor=1.0, end_factor=0.0, total_iters=20) == "anneal"   # its last falls are big


def test_runs_of_one_recipe_share_a_shape_whatever_their_length_and_it_stretches_to_a_budget():
    a, b = parse_schedule("cosine:warmup=40", 800), parse_schedule("cosine:warmup=30", 600)
    assert shared_shape([a, b]) is a and shared_shape([a, parse_schedule("step:400,600:0.1", 800)]) is None
    assert shared_shape([a, parse_schedule("cosine:warmup=40:min=0.1", 800)]) is None   # a floor is another recipe
    long = stretched(a, 1000, "as a")
    assert (long.spec, long.budget) == ("as a", 1000)
    assert np.allclose(long.lr([0, 50, 525, 1000]), a.lr([0, 40, 420, 800]))
@pytest.mark.parametrize("name", ["charlm-multistep", "charlm-steps", "tinylm-steps", "tinylm-invsqrt", "digitsft-cosine"])
def test_the_logged_lr_of_one_recipe_at_another_budget_and_logging_is_one_shape_and_other_recipes_are_not(name):
    """Real logs (bench/curves, every 10 steps): a recipe's other run (reruns/: 0.8x the budget) logs its cuts and its
    warm-up at rows up to an interval apart, and its first row is not its LR from 0 (compared point by point, 4 of 23
    such pairs were "other recipes"); the same logs of the task's other schedules stay apart."""
    import pandas as pd
    from pathlib import Path

    curves = Path(__file__).resolve().parents[2] / "bench" / "curves"

    def logged(path, budget):
        d = pd.read_csv(path)
        return Schedule.from_points(d.step, d.lr, budget)

    index = pd.read_csv(curves / "index.csv").set_index("file")
    task = name.partition("-")[0]
    run = logged(curves / f"{name}.csv", float(index.loc[f"{name}.csv", "budget"]))
    other = curves / "reruns" / f"{name}.csv"
    if other.exists():
        assert shared_shape([run, logged(other, 0.8 * index.loc[f"{name}.csv", "budget"])]) is run
    else:   # the same SPEC at another budget: digits' cosine over 800 steps, the fine-tune's over 400
        assert shared_shape([run, logged(curves / "digits-cosine.csv", 800.0)]) is run
    for f, row in index.iterrows():
        if row.task == task and f != f"{name}.csv":
            assert shared_shape([run, logged(curves / f, float(row.budget))]) is None, f




def test_a_span_may_be_a_share_of_the_budget():
    """warmup=0.05 meant as Hugging Face's warmup_ratio was a warm-up of 0.05 steps, silently: W% says it."""
    x = np.linspace(0, 1200, 97)
    assert np.allclose(parse_schedule("cosine:warmup=5%", 1200).lr(x), parse_schedule("cosine:warmup=60", 1200).lr(x))
    assert np.allclose(parse_schedule("wsd:warmdown=20%:warmup=1%", 1200).lr(x),
                       parse_schedule("wsd:warmdown=240:warmup=12", 1200).lr(x))
    with pytest.raises(ValueError, match="gamma must be a number, got '5%'"):   # not a span of x
        parse_schedule("exp:gamma=5%", 1200)
