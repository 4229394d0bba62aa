import numpy as np
import pytest

from dlsched.policy.size_history import SizeHistory, kaplan_meier
from dlsched.policy.release_horizon import expected_release_horizons
from dlsched.policy.base import JobView
from tests.policy.test_elastic import StepProfile, job, running


def test_kaplan_meier_without_censoring_is_the_empirical_distribution():
    points, mass = kaplan_meier(np.array([100.0, 100.0, 800.0, 2500.0]), np.array([]))
    assert points.tolist() == [100.0, 800.0, 2500.0]
    assert mass.tolist() == pytest.approx([0.5, 0.25, 0.25])


def test_kaplan_meier_counts_a_running_job_as_at_least_its_age():
    # one of three jobs still running at 500 s: it is not among those that ended at 100 s, and its mass goes to
    # the sizes above 500 s
    points, mass = kaplan_meier(np.array([100.0, 800.0]), np.array([500.0]))
    assert points.tolist() == [100.0, 800.0]
    assert mass.tolist() == pytest.approx([1 / 3, 2 / 3])


def test_size_history_records_the_jobs_that_left_at_their_last_service():
    h = SizeHistory()
    h.observe({"a": 10.0, "b": 20.0})
    h.observe({"a": 70.0, "b": 80.0, "c": 0.0})
    h.observe({"b": 140.0, "c": 60.0})
    assert h.sizes == [70.0]


def test_expected_release_waits_for_young_jobs_and_not_for_old_ones():
    # run times seen: half the jobs ran 100 s, half 10 000 s. Two running 1-GPU jobs 50 s in are each even odds to
    # end 50 s from now: one GPU frees within ~50 s in expectation, so taking 1 GPU from the victim pays for about
    # that long. Two 1-GPU jobs 5 000 s in are long ones: they free GPUs only ~5 000 s from now.
    points, mass = np.array([100.0, 10_000.0]), np.array([0.5, 0.5])
    speed = StepProfile()
    victim = running(job(0, speed, run_time=3000.0), 4, 128)

    def young_or_old(i, ran):
        return running(job(i, speed, run_time=ran), 1, 64, node=f"node{i}")

    young = expected_release_horizons([victim, young_or_old(1, 50.0), young_or_old(2, 50.0)], points, mass)
    old = expected_release_horizons([victim, young_or_old(1, 5000.0), young_or_old(2, 5000.0)], points, mass)
    w_young, w_old = young["j0"][3], old["j0"][3]      # g = 3 kept: 1 GPU taken
    assert 40.0 <= w_young <= 60.0
    assert 4000.0 <= w_old <= 6000.0
    assert np.isinf(young["j0"][0])                     # 4 GPUs never free from two 1-GPU jobs
    assert expected_release_horizons([victim], points, mass) == {}


def test_the_policy_learns_run_times_from_its_decisions_and_uses_them_only_without_predictions():
    from dlsched.policy.base import ClusterView, make_policy

    speed = StepProfile(allreduce=0.0)
    cluster = ClusterView.homogeneous(1, 4, now=36_000.0)
    policy = make_policy("goodput", residual_release=True)
    for i in range(12):                              # 12 jobs seen once, each gone at the next decision
        policy.decide((JobView(**{**job(10 + i, speed).__dict__, "run_time": 100.0 * (i + 1), "attrs": {}}),),
                      cluster)
    assert sorted(policy.run_sizes.sizes) == [100.0 * (i + 1) for i in range(11)]
    # jobs that know their remaining work: the learned distribution is not read, the decision is the default's
    known = (running(job(0, speed, remaining_samples=1e6, attrs={"restarts": 1}), 2, 128),
             running(job(1, speed, remaining_samples=1e4, max_gpus=1, attrs={"restarts": 1}), 1, 64, node="node0"),
             job(2, speed, remaining_samples=1e5))
    assert policy.decide(known, cluster) == make_policy("goodput").decide(known, cluster)
