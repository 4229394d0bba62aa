import pytest

from dlsched.policy.base import ClusterView, JobView, make_policy
from dlsched.sim.traces import LinearThroughput
from tests.sim.helpers import jcts, job


def test_optimus_marginal_gain_hand_computed():
    # 1 node x 4 GPUs, linear speed-up up to the request. t=10: A (Q=40) gains 80 s from a 2nd GPU, B (Q=10) 10 s,
    # so A gets 3, B 1. B ends at 30; A (25 left at 3/4 speed... 32.5-7.5) then gets all 4 and ends at 55.
    jobs = [job("A", 0, 4, 40), job("B", 0, 2, 10)]
    assert jcts(jobs, "optimus", gpus_per_node=4) == {"B": 30, "A": 55}


def test_optimus_gains_and_caps():
    p = make_policy("optimus")
    a = JobView("a", 0, 4, max_gpus=4, remaining_samples=40.0, speed=LinearThroughput(4))
    assert p.gain(a, 1, 4) == pytest.approx(160 - 80)
    assert p.gain(a, 4, 4) == 0.0     # never past max_gpus
    b = JobView("b", 1, 1, max_gpus=1, remaining_samples=1e9, speed=LinearThroughput(1))
    alloc = p.decide((a, b), ClusterView.homogeneous(2, 4))
    assert alloc.gpus("a") == 4 and alloc.gpus("b") == 1
