import itertools
import math
from dataclasses import dataclass

import pytest

from dlsched.policy import ClusterView, JobView, make_policy
from dlsched.policy.elastic import batch_range
from dlsched.policy.goodput import goodput


@dataclass(frozen=True)
class NoisyProfile:
    """Throughput grows with batch (fixed launch cost per step); statistical efficiency falls with batch as in
    Pollux's gradient-noise-scale model: eff(b) = (noise + b0) / (noise + b), 1 at the reference batch b0."""

    launch: float = 0.02
    per_sample: float = 0.0005
    allreduce: float = 0.01
    noise: float = 200.0
    b0: int = 32

    def throughput(self, num_gpus, num_nodes, global_batch, gpu_type=None):
        step = self.launch + self.per_sample * global_batch / num_gpus + (self.allreduce if num_gpus > 1 else 0.0)
        return global_batch / step

    def efficiency(self, global_batch):
        return (self.noise + self.b0) / (self.noise + global_batch)


def job(i, speed=NoisyProfile(), **kw):
    base = dict(id=f"j{i}", submit_time=float(i), requested_gpus=1, batch_size=64, min_batch_size=32,
                max_batch_size=4096, max_local_batch=512, speed=speed)
    base.update(kw)
    return JobView(**base)


def test_goodput_is_throughput_times_efficiency():
    p = NoisyProfile()
    assert goodput(p, 2, 1, 256) == pytest.approx(p.throughput(2, 1, 256) * p.efficiency(256))


def test_goodput_picks_a_smaller_batch_than_throughput_when_large_batches_are_inefficient():
    cluster = ClusterView.homogeneous(1, 4)
    jobs = (job(0),)
    by_throughput = make_policy("elastic").decide(jobs, cluster).jobs["j0"]
    by_goodput = make_policy("goodput").decide(jobs, cluster).jobs["j0"]
    assert by_throughput.batch_size == 2048                 # 4 GPUs x 512: the fastest
    assert by_goodput.batch_size < by_throughput.batch_size
    p = NoisyProfile()
    assert goodput(p, by_goodput.num_gpus, 1, by_goodput.batch_size) > goodput(p, 4, 1, 2048)


def test_goodput_allocation_is_optimal_for_its_objective_on_a_tiny_instance():
    cluster = ClusterView.homogeneous(1, 4)
    jobs = (job(0), job(1, NoisyProfile(noise=5000.0)), job(2, NoisyProfile(allreduce=0.05)))
    alloc = make_policy("goodput", hysteresis=0.0).decide(jobs, cluster)

    def speedup(j, g, b):
        rng = batch_range(j, 4)
        ref = max(goodput(j.speed, rng.g_min, 1, int(b0)) for b0 in rng.batches(rng.g_min))
        return goodput(j.speed, g, math.ceil(g / 4), b) / ref

    got = sum(speedup(j, alloc.gpus(j.id), alloc.jobs[j.id].batch_size) for j in jobs if alloc.gpus(j.id))
    best = 0.0
    for gs in itertools.product(range(5), repeat=3):
        if sum(gs) <= 4:
            best = max(best, sum(max(speedup(j, g, int(b)) for b in batch_range(j, 4).batches(g))
                                 for j, g in zip(jobs, gs) if g))
    assert got == pytest.approx(best, rel=1e-6)
    assert alloc.total_gpus == 4


def test_goodput_runs_many_jobs_within_capacity():
    cluster = ClusterView.homogeneous(4, 4)
    jobs = tuple(job(i, NoisyProfile(noise=100.0 * (i + 1))) for i in range(24))
    alloc = make_policy("goodput").decide(jobs, cluster)
    assert alloc.total_gpus == 16 and len(alloc.jobs) == 16
    assert all(32 <= a.batch_size <= 4096 for a in alloc.jobs.values())


def test_elastic_policies_run_a_pollux_slice_in_the_simulator(data_dir):
    from dlsched.sim import read_workload, run

    # shared/data/pollux/workloads/workload-1.csv: ten small cifar10/ncf/bert jobs on 2 nodes x 4 GPUs.
    jobs = [j for j in read_workload(data_dir / "pollux" / "workloads" / "workload-1.csv").jobs
            if j.app in ("cifar10", "ncf", "bert") and j.requested_gpus <= 8][:10]
    results = {p: run(jobs, p, nodes=2) for p in ("elastic", "elastic-gpu-only", "goodput")}
    for res in results.values():
        assert len(res.finished) == 10
    assert results["goodput"].avg_jct < results["elastic-gpu-only"].avg_jct


def test_jobs_without_batch_sizes_scale_gpus_only_in_the_simulator():
    from dlsched.sim import WorkloadJob, run

    # Duration jobs as in shared/data/philly/philly.csv carry no batch size: they must run, never be dropped.
    jobs = [WorkloadJob(id=f"d{i}", submit_time=120.0 * i, requested_gpus=1 + i % 4, duration=600.0 + 200 * i)
            for i in range(12)]
    for policy in ("elastic", "elastic-gpu-only", "goodput"):
        res = run(jobs, policy, nodes=2, gpus_per_node=4)
        assert len(res.finished) == 12, policy


@pytest.mark.parametrize("left_s", [3.0, 5.0])
def test_goodput_does_not_preempt_a_long_job_to_grow_one_seconds_from_its_end(left_s):
    """Live, on 2 slots: a 1-GPU job was pre-empted to grow another a few seconds from its end (then grown back):
    the victim paid two pauses for the grower's second saved. A grow must repay the pause of the job it displaces."""
    p, restart = NoisyProfile(), 0.5
    rate = p.throughput(1, 1, 64)

    def running(i, left):
        return job(i, placement={"node0": 1}, current_batch_size=64, remaining_samples=left * rate, run_time=30.0,
                   attrs={"restart_s": restart, "restarts": 0})

    cluster = ClusterView(ClusterView.homogeneous(1, 2).nodes, now=100.0)
    alloc = make_policy("goodput").decide((running(0, left_s), running(1, 300.0)), cluster)
    assert (alloc.gpus("j0"), alloc.gpus("j1")) == (1, 1)
    # with free GPUs, or a job far from its end, a grow still pays
    alloc = make_policy("goodput").decide((running(0, 60.0),), cluster)
    assert alloc.gpus("j0") == 2
    off = make_policy("goodput", grow_pause=False).decide((running(0, left_s), running(1, 300.0)), cluster)
    assert (off.gpus("j0"), off.gpus("j1")) == (2, 0)     # what it did before
