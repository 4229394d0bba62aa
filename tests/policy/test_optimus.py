import pytest

from dlsched.policy.base import ClusterView, JobView, make_policy
from dlsched.sim.throughput import LinearThroughput
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


def _table2_ps(gpu_types=("generic",)):
    from dlsched.perf.speed import OptimusSyncSpeed, PSSpeedModel

    # Optimus Table 2 sync θ (shared/data/tables/optimus2018_tables.csv), M = 64 as in the seed notebook
    return PSSpeedModel({t: OptimusSyncSpeed((1.02, 2.78, 4.92, 0.0, 0.02), 64) for t in gpu_types}, gpu_types[0], 64)


def test_optimus_gives_a_ps_job_servers_and_workers_by_marginal_gain():
    p = make_policy("optimus")
    ps = JobView("ps", 0, 2, remaining_samples=1e6, speed=_table2_ps())
    alloc = p.decide((ps,), ClusterView.homogeneous(1, 10)).jobs["ps"]
    # the greedy reaches the exhaustive optimum over p + w <= 10 of the Table 2 model: 5 servers, 5 workers
    assert (alloc.num_gpus, alloc.servers) == (10, 5) == (10, _table2_ps().split(10)[0])
    ar = JobView("ar", 0, 4, max_gpus=8, remaining_samples=1e5, speed=LinearThroughput(8))
    both = p.decide((ps, ar), ClusterView.homogeneous(2, 8)).jobs
    assert both["ps"].num_gpus + both["ar"].num_gpus == 16 and both["ar"].servers is None
    assert 1 <= both["ps"].servers < both["ps"].num_gpus


def test_ps_speed_model_has_a_gpu_type_dimension():
    from dlsched.perf.speed import OptimusSyncSpeed, PSSpeedModel

    slow = OptimusSyncSpeed((1.02, 2.78, 4.92, 0.0, 0.02), 64)
    fast = OptimusSyncSpeed((0.25, 2.78, 4.92, 0.0, 0.02), 64)  # 4x faster compute term θ0
    m = PSSpeedModel({"K80": slow, "V100": fast}, "K80", 64)
    assert m.samples_per_s(2, 4, "V100") > m.samples_per_s(2, 4) == m.samples_per_s(2, 4, "K80")
    assert m.split(10, "V100")[1] < m.split(10, "K80")[1]  # less compute per worker -> fewer workers pay off
    with pytest.raises(ValueError, match="TPU"):
        m.samples_per_s(1, 1, "TPU")
