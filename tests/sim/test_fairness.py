import pytest

from dlsched.policy.base import ClusterView
from dlsched.sim import run
from dlsched.sim.fairness import finish_time_fairness, isolated_jcts
from tests.sim.helpers import job


def test_rho_is_shared_jct_over_alone_jct():
    cluster = ClusterView.homogeneous(1, 1)
    jobs = [job("a", 0, 1, 100), job("b", 0, 1, 100)]
    alone = isolated_jcts(jobs, cluster, interval=10.0, restart_penalty=0.0)
    assert alone == {"a": pytest.approx(100.0 + 10), "b": pytest.approx(110.0)}   # first decision at t = 10
    shared = run(jobs, "fifo", cluster, interval=10.0, restart_penalty=0.0)
    worst, mean = finish_time_fairness(shared, alone)
    assert worst == pytest.approx(210 / 110) and mean == pytest.approx((110 / 110 + 210 / 110) / 2)
