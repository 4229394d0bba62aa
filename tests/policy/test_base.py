import pytest

from dlsched.policy.base import Allocation, ClusterView, JobAllocation, JobView, make_policy


def test_snapshots_are_immutable():
    job = JobView(id="a", submit_time=0.0, requested_gpus=2, placement={"n0": 2})
    with pytest.raises(Exception):
        job.requested_gpus = 3  # type: ignore[misc]
    with pytest.raises(TypeError):
        job.placement["n0"] = 4  # type: ignore[index]
    assert job.num_gpus == 2 and job.is_running


def test_allocation_checks_node_map():
    with pytest.raises(ValueError, match="do not add up"):
        JobAllocation(num_gpus=3, nodes={"n0": 2})
    with pytest.raises(ValueError, match="num_gpus must be >= 0"):
        JobAllocation(num_gpus=-1)
    alloc = Allocation({"a": JobAllocation(2), "b": JobAllocation(1, batch_size=64)})
    assert alloc.total_gpus == 3 and alloc.gpus("missing") == 0


def test_cluster_view_totals():
    c = ClusterView.homogeneous(16, 4)
    assert c.total_gpus == 64 and c.gpu_types == ("generic",)


def test_unknown_policy_is_a_clear_error():
    with pytest.raises(ValueError, match="unknown policy 'nope'"):
        make_policy("nope")


def test_a_policy_that_says_it_reads_no_remaining_work_decides_the_same_without_it():
    """``reads_remaining = False`` labels a policy's comparison row "none (not read)": it must hold. Three queued
    jobs on too few GPUs, told remaining work in the reverse of submission order, then nothing."""
    from dataclasses import replace

    from dlsched.policy.base import ClusterView, JobView, make_policy, policy_names
    from dlsched.sim.throughput import LinearThroughput

    cluster = ClusterView.homogeneous(1, 4)
    told = tuple(JobView(f"j{i}", submit_time=i, requested_gpus=2, remaining_samples=1000.0 * (3 - i),
                         speed=LinearThroughput(2, {})) for i in range(3))
    blind = tuple(replace(j, remaining_samples=None) for j in told)
    silent = [n for n in policy_names() if not getattr(make_policy(n), "reads_remaining", True)]
    assert {"fifo", "tiresias", "fleet"} <= set(silent)
    for name in silent:
        p = make_policy(name)
        assert p.decide(told, cluster) == p.decide(blind, cluster), name
    srtf = make_policy("srtf")
    assert srtf.reads_remaining and srtf.decide(told, cluster) != srtf.decide(blind, cluster)
