"""``perf.prior``: the shape prior's pool by regime (from-scratch or fine-tune runs) and without runs that
over-fit, on a hand-made set of fits."""
import math

import numpy as np
import pytest

from dlsched.perf.annealing import CurvePrior
from dlsched.perf.calibration import Calibration, from_dict
from dlsched.perf.prior import KIND_MIN, FinishedFit, has_law_shape, prior_from_fits, regime_of, shape_pool
from dlsched.perf.schedule import parse_schedule

SCRATCH = [FinishedFit(0.3, 0.05, {"dataset": d, "metric": "loss", "regime": "scratch"}) for d in "abc"]
FINETUNE = [FinishedFit(1.5, 0.2, {"dataset": d, "metric": "loss", "regime": "finetune"}) for d in "def"]


def test_the_shape_prior_narrows_to_the_run_s_regime_once_three_of_it_remain():
    assert KIND_MIN == 3
    ft = prior_from_fits(SCRATCH + FINETUNE, {"dataset": "g", "metric": "loss", "regime": "finetune"})
    assert ft.alpha == pytest.approx(1.5) and ft.drop == pytest.approx(0.2)
    sc = prior_from_fits(SCRATCH + FINETUNE, {"dataset": "g", "metric": "loss", "regime": "scratch"})
    assert sc.alpha == pytest.approx(0.3) and sc.drop == pytest.approx(0.05)


def test_two_runs_of_the_regime_keep_the_wider_pool():
    few = prior_from_fits(SCRATCH + FINETUNE[:2], {"dataset": "g", "metric": "loss", "regime": "finetune"})
    assert 0.3 < few.alpha < 1.5 and 0.05 < few.drop < 0.2
    assert len(shape_pool(SCRATCH + FINETUNE[:2], {"metric": "loss", "regime": "finetune"}, lambda f: True)) == 5


def test_the_metric_kind_narrows_first_and_the_regime_within_it():
    """Fine-tune runs of another kind do not count toward the regime's three: the pool stays the kind's."""
    acc = [FinishedFit(1.0, 0.5, {"dataset": d, "metric": "accuracy", "regime": "finetune"}) for d in "xyz"]
    pool = shape_pool(SCRATCH + FINETUNE[:2] + acc, {"metric": "loss", "regime": "finetune"}, lambda f: True)
    assert pool == SCRATCH + FINETUNE[:2]
    assert shape_pool(SCRATCH + FINETUNE + acc, {"metric": "loss", "regime": "finetune"}, lambda f: True) == FINETUNE


def test_a_named_metric_s_declared_kind_sets_its_pool():
    """A service job's target names the metric its script reports (``val_mse``) and declares its kind: a loss-kind
    target pools with the loss runs, an accuracy-kind one with the error rates, whatever the name."""
    acc = [FinishedFit(1.0, 0.5, {"dataset": d, "metric": "accuracy"}) for d in "xyz"]
    assert shape_pool(SCRATCH + acc, {"metric": "val_mse", "kind": "loss"}, lambda f: True) == SCRATCH
    assert shape_pool(SCRATCH + acc, {"metric": "val_top1", "kind": "accuracy"}, lambda f: True) == acc
    named = [FinishedFit(0.3, 0.05, {"dataset": d, "metric": "val_mse", "kind": "loss"}) for d in "abc"]
    assert shape_pool(named + acc, {"metric": "loss"}, lambda f: True) == named


def test_a_drop_narrowing_counts_only_runs_whose_lr_fell():
    flat = [FinishedFit(1.5, float("nan"), f.meta) for f in FINETUNE[:2]] + FINETUNE[2:]
    p = prior_from_fits(SCRATCH + flat, {"dataset": "g", "metric": "loss", "regime": "finetune"})
    assert p.alpha == pytest.approx(1.5)          # three fine-tune α
    assert 0.05 < p.drop < 0.2                     # one fine-tune drop: pooled with the scratch runs'


def test_no_regime_named_no_narrowing_and_an_unnamed_finished_run_is_from_scratch():
    both = prior_from_fits(SCRATCH + FINETUNE, {"dataset": "g", "metric": "loss"})
    assert 0.3 < both.alpha < 1.5
    assert regime_of({}) == "scratch" and regime_of({"regime": "finetune"}) == "finetune"
    bare = [FinishedFit(0.3, 0.05, {"dataset": d, "metric": "loss"}) for d in "abc"]
    assert prior_from_fits(bare + FINETUNE, {"metric": "loss", "regime": "scratch"}).alpha == pytest.approx(0.3)


def test_the_shipped_table_carries_each_fit_s_regime_and_reads_an_older_one_as_scratch():
    bands = ((-0.1, 0.1),)
    fits = ((0.3, 0.05, "loss", "anneal", "scratch"),) * 3 + ((1.5, 0.2, "loss", "anneal", "finetune"),) * 3
    cal = Calibration((0.1,), bands, bands, fits=fits)
    cosine = parse_schedule("cosine", 1000.0)
    assert cal.curve_prior("loss", cosine, "finetune").drop == pytest.approx(0.2)
    assert cal.curve_prior("loss", cosine).drop == pytest.approx(0.05)   # scratch by default
    old = from_dict(Calibration((0.1,), bands, bands, fits=tuple(f[:4] for f in fits)).as_dict())   # before regimes
    assert old.curve_prior("loss", cosine, "finetune").drop == pytest.approx(0.125)   # all six: scratch
    assert old.curve_prior("loss", cosine, "scratch").drop == pytest.approx(0.125)


# three from-scratch loss runs that over-fitted (the dev set's cancer task): their fits describe no curve the law has
OVERFIT = [FinishedFit(3.0, 0.6, {"dataset": "cancer", "metric": "loss", "regime": "scratch", "overfits": True},
                       final=0.2) for _ in range(3)]


def test_a_run_that_over_fits_sets_no_shape_number_and_does_not_count_toward_a_narrowing():
    assert not any(map(has_law_shape, OVERFIT)) and all(map(has_law_shape, SCRATCH))
    meta = {"dataset": "g", "metric": "loss", "regime": "scratch"}
    assert shape_pool(SCRATCH + OVERFIT, meta, lambda f: True) == SCRATCH
    p = prior_from_fits(SCRATCH + OVERFIT, meta)
    assert p.alpha == pytest.approx(0.3) and p.drop == pytest.approx(0.05)
    # two scratch runs left: the scratch narrowing is not made, the over-fitting ones do not make up the three
    assert shape_pool(SCRATCH[:2] + OVERFIT + FINETUNE, meta, lambda f: True) == SCRATCH[:2] + FINETUNE


def test_only_over_fitting_runs_give_the_default_shape_but_still_their_task_s_level():
    p = prior_from_fits(OVERFIT, {"dataset": "cancer", "metric": "loss"})
    default = CurvePrior()
    assert (p.alpha, p.drop) == (default.alpha, default.drop)
    assert p.final == pytest.approx(0.2)     # the level: where the task's runs ended


def test_a_few_runs_of_other_tasks_that_agree_do_not_narrow_the_shape_below_the_default():
    """The demo: four finished jobs of other tasks, α within ±0.3, gave a spread at the same-task floor (0.2) and
    held a fifth task's fit to α 0.6 where its points said 2. The default's spread counts as runs too."""
    meta = {"family": "cifar.py", "metric": "loss", "batch": 64}
    others = [FinishedFit(a, 0.05, {"family": f"job{i}.py", "metric": "loss", "batch": 64})
              for i, a in enumerate((0.63, 0.53, 0.80, 0.70))]
    default = CurvePrior(alpha_sigma=0.76, drop_sigma=0.2)
    p = prior_from_fits(others, meta, default=default)
    assert 0.4 < p.alpha_sigma < 0.76 and p.drop_sigma > 0.1   # 0.2 and 0.05 before
    # runs of the same task (dataset and metric named and equal) may narrow it to the same-task floor
    same = [FinishedFit(f.alpha, f.drop, {**f.meta, "dataset": "cifar10"}) for f in others]
    assert prior_from_fits(same, {**meta, "dataset": "cifar10"}, default=default).alpha_sigma == pytest.approx(0.2)


def test_a_field_neither_run_names_is_not_shared():
    """A new job without a dataset shares none with a finished one without a dataset: that run must not outweigh
    one that names its dataset (both are of other families)."""
    meta = {"family": "new.py", "dataset": None, "metric": "loss"}
    unnamed = FinishedFit(0.5, 0.05, {"family": "a.py", "dataset": None, "metric": "loss"})
    named = FinishedFit(2.0, 0.05, {"family": "b.py", "dataset": "imagenet", "metric": "loss"})
    assert prior_from_fits([unnamed, named], meta).alpha == pytest.approx(1.0)   # the geometric mean: equal weights


def test_a_same_task_run_that_over_fits_does_not_narrow_the_other_tasks_spread():
    """The spread is of the pool a shape number comes from: a run of the new job's task that over-fitted is not in
    it, so the others are still other tasks only."""
    meta = {"family": "cifar.py", "dataset": "cifar10", "metric": "loss"}
    others = [FinishedFit(a, 0.05, {"family": f"job{i}.py", "dataset": f"d{i}", "metric": "loss"})
              for i, a in enumerate((0.63, 0.53, 0.80))]
    overfit = FinishedFit(3.0, 0.05, {**meta, "overfits": True})
    p = prior_from_fits(others + [overfit], meta, default=CurvePrior(alpha_sigma=0.76, drop_sigma=0.2))
    assert p.alpha_sigma > 0.4 and p.drop_sigma > 0.1


def test_carried_finals_lean_on_the_runs_whose_schedules_need_the_shortest_carry():
    """A task whose runs gain more from LR area than their law says (each ended e^(0.05·log S1) below it): carried to
    a nearly constant schedule, the runs under decays miss it by the most, and the runs carried to each other's
    schedules show that miss growing with the carry's length in LR area; the level leans on the WSD run."""
    from dlsched.perf.annealing import AnnealingCurve
    from dlsched.perf.prior import carry_weights, level_prior
    from dlsched.perf.schedule import areas

    def truth(s):   # where a run under s really ends
        law = AnnealingCurve(1.5, 2.0, 0.4, 0.03, s).value([s.budget])[0]
        return float(law * areas(s, [s.budget])[0][0] ** -0.05)

    specs = ("wsd:warmdown=160", "cosine", "linear", "step:400,600:0.1", "poly:power=2")
    fits = []
    for spec in specs:
        s = parse_schedule(spec, 800)
        fits.append(FinishedFit(0.4, 0.03, {"dataset": "lm", "metric": "loss"}, truth(s),
                                AnnealingCurve(1.5, 2.0, 0.4, 0.03, s)))
    new = parse_schedule("wsd:warmdown=80", 800)
    level, *_ = level_prior(fits, {"dataset": "lm", "metric": "loss"}, new)
    w = carry_weights(fits, new, 0.03)
    assert w.argmax() == 0 and w[0] > 2 * w[1:].max()   # the WSD run's carry is the shortest
    plain = prior_from_fits(fits[:2], {"dataset": "lm", "metric": "loss"}, schedule=new)   # two runs: equal weights
    assert plain.level_weights == (0.5, 0.5)
    assert abs(math.log(level / truth(new))) < 0.5 * abs(math.log(float(np.exp(np.mean(
        [np.log(fits[i].final * AnnealingCurve(1.5, 2.0, 0.4, 0.03, new).value([800])[0]
                / fits[i].curve.value([800])[0]) for i in range(len(specs))]))) / truth(new)))
