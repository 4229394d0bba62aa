import itertools
import math
from dataclasses import dataclass, replace

import numpy as np
import pytest

from dlsched.errors import UserError
from dlsched.policy import ClusterView, JobView, NodeView, make_policy
from dlsched.policy.dp import concave_greedy, hull_greedy, is_concave, knapsack_dp, pruned_dp, solve
from dlsched.policy.elastic import batch_range, validate_elastic_job


@dataclass(frozen=True)
class StepProfile:
    """A readable speed model: step = launch + per-sample compute * local batch + all-reduce when g > 1.

    ``fast_factor`` scales throughput on GPU type "fast" (for the heterogeneity tests).
    """

    launch: float = 0.01
    per_sample: float = 0.001
    allreduce: float = 0.05
    fast_factor: float = 1.0

    def throughput(self, num_gpus, num_nodes, global_batch, gpu_type=None):
        step = self.launch + self.per_sample * global_batch / num_gpus
        if num_gpus > 1:
            step += self.allreduce * (1 + 0.5 * (num_nodes - 1))
        return global_batch / step * (self.fast_factor if gpu_type == "fast" else 1.0)

    def efficiency(self, global_batch):
        return 1.0


def job(i, speed=StepProfile(), **kw):
    base = dict(id=f"j{i}", submit_time=float(i), requested_gpus=2, batch_size=64, min_batch_size=32,
                max_batch_size=1024, max_local_batch=128, speed=speed)
    base.update(kw)
    return JobView(**base)


# ---- the solver -------------------------------------------------------------------------------------------

def brute_force(curves, capacity):
    best = -np.inf
    for gs in itertools.product(*[range(len(c)) for c in curves]):
        if sum(gs) <= capacity:
            best = max(best, sum(c[g] for c, g in zip(curves, gs)))
    return best


def random_curves(rng, jobs, max_g, concave):
    curves = []
    for _ in range(jobs):
        G = int(rng.integers(1, max_g + 1))
        if concave:
            gains = np.sort(rng.uniform(-0.2, 1.0, G))[::-1]
            c = np.concatenate(([0.0], np.cumsum(gains)))
        else:
            c = np.concatenate(([0.0], rng.uniform(0, 3, G)))
            c[rng.uniform(size=G + 1) < 0.2] = -np.inf        # infeasible counts, sometimes "must run"
        curves.append(c)
    return curves


@pytest.mark.parametrize("seed", range(30))
def test_dp_matches_brute_force_on_tiny_instances(seed):
    rng = np.random.default_rng(seed)
    curves = random_curves(rng, jobs=int(rng.integers(1, 5)), max_g=4, concave=False)
    capacity = int(rng.integers(0, 9))
    sol = knapsack_dp(curves, capacity)
    expected = brute_force(curves, capacity)
    if np.isfinite(expected):
        assert sol.value == pytest.approx(expected)
        assert sol.gpus.sum() <= capacity
        assert sum(c[g] for c, g in zip(curves, sol.gpus)) == pytest.approx(expected)
    else:
        assert not np.isfinite(sol.value)


@pytest.mark.parametrize("seed", range(30))
def test_greedy_equals_dp_when_every_curve_is_concave(seed):
    rng = np.random.default_rng(100 + seed)
    curves = random_curves(rng, jobs=int(rng.integers(1, 8)), max_g=6, concave=True)
    assert all(is_concave(c) for c in curves)
    capacity = int(rng.integers(0, 20))
    greedy, dp = concave_greedy(curves, capacity), knapsack_dp(curves, capacity)
    assert greedy.value == pytest.approx(dp.value)
    assert sum(c[g] for c, g in zip(curves, greedy.gpus)) == pytest.approx(dp.value)
    assert greedy.gpus.sum() <= capacity


def test_solve_uses_the_greedy_on_large_concave_instances():
    rng = np.random.default_rng(9)
    curves = random_curves(rng, jobs=400, max_g=32, concave=True)
    sol = solve(curves, 512)
    assert sol.method == "greedy"
    assert sol.value == pytest.approx(knapsack_dp(curves, 512).value)


@pytest.mark.parametrize("seed", range(20))
def test_mixed_instance_uses_aggregate_and_stays_exact(seed):
    rng = np.random.default_rng(200 + seed)
    curves = random_curves(rng, 3, 4, concave=True) + random_curves(rng, 2, 3, concave=False)
    capacity = int(rng.integers(1, 12))
    sol = solve(curves, capacity)
    expected = brute_force(curves, capacity)
    if np.isfinite(expected):
        assert sol.value == pytest.approx(expected)
        assert sum(c[g] for c, g in zip(curves, sol.gpus)) == pytest.approx(expected)
        assert sol.gpus.sum() <= capacity


@pytest.mark.parametrize("seed", range(40))
def test_hull_greedy_is_exact_whenever_it_certifies(seed):
    rng = np.random.default_rng(300 + seed)
    curves = []
    for _ in range(int(rng.integers(1, 5))):
        c = np.concatenate(([0.0], np.cumsum(rng.uniform(-0.1, 1.0, int(rng.integers(1, 5))))))
        c[rng.uniform(size=len(c)) < 0.15] = -np.inf
        c[0] = 0.0
        curves.append(c)
    capacity = int(rng.integers(0, 10))
    sol = hull_greedy(curves, capacity)
    if sol is not None:
        assert sol.value == pytest.approx(brute_force(curves, capacity))
        assert sol.gpus.sum() <= capacity
    assert solve(curves, capacity).value == pytest.approx(brute_force(curves, capacity))


@pytest.mark.parametrize("seed", range(60))
def test_pruned_dp_matches_brute_force(seed):
    rng = np.random.default_rng(500 + seed)
    curves = []
    for _ in range(int(rng.integers(1, 6))):
        c = np.concatenate(([0.0], rng.uniform(0, 3, int(rng.integers(1, 5)))))
        c[1:][rng.uniform(size=len(c) - 1) < 0.2] = -np.inf
        curves.append(c)
    capacity = int(rng.integers(0, 10))
    sol = pruned_dp(curves, capacity)
    assert sol is not None and sol.gpus.sum() <= capacity
    assert sol.value == pytest.approx(brute_force(curves, capacity))
    assert sum(c[g] for c, g in zip(curves, sol.gpus)) == pytest.approx(sol.value)


def test_hull_greedy_refuses_to_stop_inside_an_envelope_segment():
    curves = [np.array([0.0, 0.1, 3.0])]          # envelope 0 -> 2 GPUs; with 1 GPU the greedy would stop inside
    assert hull_greedy(curves, 1) is None
    assert solve(curves, 1).gpus.tolist() == [1]
    assert hull_greedy(curves, 2).gpus.tolist() == [2]


def test_non_concave_curve_is_detected():
    assert is_concave(np.array([0.0, 1.0, 1.5, 1.6]))
    assert not is_concave(np.array([0.0, -np.inf, 2.0, 2.5]))      # minimum of 2 GPUs
    assert not is_concave(np.array([0.0, 1.0, 2.1, 2.2]))          # a bump (hysteresis)


# ---- the elastic policy -----------------------------------------------------------------------------------

def normalised_throughput(j, g, b, cluster, node_size=4):
    rng = batch_range(j, cluster.total_gpus)
    ref = max(j.speed.throughput(rng.g_min, 1, b0, None) for b0 in rng.batches(rng.g_min))
    return j.speed.throughput(g, math.ceil(g / node_size), b, None) / ref if g else 0.0


def test_elastic_matches_brute_force_over_gpus_and_batches():
    cluster = ClusterView.homogeneous(1, 4)
    jobs = (job(0), job(1, StepProfile(allreduce=0.005)), job(2, StepProfile(per_sample=0.004)))
    alloc = make_policy("elastic", hysteresis=0.0).decide(jobs, cluster)
    got = sum(normalised_throughput(j, alloc.gpus(j.id), alloc.jobs[j.id].batch_size, cluster)
              for j in jobs if alloc.gpus(j.id))
    best = 0.0
    for gs in itertools.product(range(5), repeat=3):
        if sum(gs) > 4:
            continue
        total = 0.0
        for j, g in zip(jobs, gs):
            if g:
                total += max(normalised_throughput(j, g, int(b), cluster) for b in batch_range(j, 4).batches(g))
        best = max(best, total)
    assert got == pytest.approx(best, rel=1e-6)


def test_allocation_respects_capacity_batch_range_and_memory():
    cluster = ClusterView.homogeneous(2, 4)
    jobs = tuple(job(i) for i in range(12))
    alloc = make_policy("elastic").decide(jobs, cluster)
    assert 0 < alloc.total_gpus <= 8
    for jid, a in alloc.jobs.items():
        assert 32 <= a.batch_size <= 1024
        assert a.batch_size / a.num_gpus <= 128 and a.batch_size >= a.num_gpus
    assert len(alloc.jobs) < len(jobs)          # more jobs than GPUs: some wait at 0
    assert alloc == make_policy("elastic").decide(jobs, cluster)           # deterministic
    assert alloc == make_policy("elastic").decide(tuple(reversed(jobs)), cluster)


def test_elastic_uses_larger_batches_and_beats_gpu_only():
    cluster = ClusterView.homogeneous(2, 4)
    jobs = tuple(job(i) for i in range(3))
    elastic = make_policy("elastic").decide(jobs, cluster)
    rigid = make_policy("elastic-gpu-only").decide(jobs, cluster)
    assert all(a.batch_size == 64 for a in rigid.jobs.values())
    assert any(a.batch_size > 64 for a in elastic.jobs.values())

    def total(alloc):
        return sum(j.speed.throughput(alloc.gpus(j.id), math.ceil(alloc.gpus(j.id) / 4), alloc.jobs[j.id].batch_size)
                   for j in jobs if alloc.gpus(j.id))
    assert total(elastic) > 2 * total(rigid)


def test_gpu_only_runs_a_batch_above_the_per_gpu_limit_on_fewer_gpus_by_accumulating():
    """Batch 512 with max_local_batch 128 needs 4 GPUs without accumulation: on a 2-GPU cluster the gpu-only
    baselines refused the job ("no feasible GPU count"), on a busy one they held it off until 4 were free. The
    runtimes (and the simulator's trace model) accumulate micro-batches of at most 128, so it runs at 512 on 1 or 2
    GPUs; alone on 8 it still spreads. The batch-range policies keep b / g within the limit (a smaller batch)."""
    big = job(0, batch_size=512, max_local_batch=128, speed=StepProfile(allreduce=0.001))
    small = ClusterView.homogeneous(1, 2)
    for name in ("elastic-gpu-only", "saxena-gpu-only"):
        make_policy(name).validate(big, small)
        a = make_policy(name).decide((big,), small).jobs["j0"]
        assert a.batch_size == 512 and 1 <= a.num_gpus <= 2
        a = make_policy(name).decide((big,), ClusterView.homogeneous(2, 4)).jobs["j0"]
        assert a.batch_size == 512 and 4 <= a.num_gpus <= 8
    fixed, ranged = batch_range(big, 2, fixed_batch=True), batch_range(big, 2)
    assert (fixed.g_min, fixed.accumulate, fixed.fits(1, 512)) == (1, True, True)
    assert (ranged.accumulate, ranged.fits(2, 512), ranged.fits(2, 256)) == (False, False, True)


def running(j, gpus, batch, node="node0"):
    return replace(j, placement={node: gpus}, current_batch_size=batch, attrs=dict(j.attrs))


def test_hysteresis_keeps_a_running_job_unless_the_gain_is_at_least_5_percent():
    cluster = ClusterView.homogeneous(1, 4)
    # Alone on 4 GPUs, 1 GPU at batch 128 vs 4 GPUs is a large gain: it must rescale.
    alone = running(job(0, StepProfile(allreduce=0.001)), 1, 128)
    assert make_policy("elastic").decide((alone,), cluster).gpus("j0") == 4
    # A tiny all-reduce gain (< 5 %) from batch 1000 -> 1024 at the same g: keep the current batch.
    j = running(job(0, StepProfile(allreduce=0.001), max_local_batch=256), 4, 1000)
    a = make_policy("elastic").decide((j,), cluster).jobs["j0"]
    assert (a.num_gpus, a.batch_size) == (4, 1000)
    assert make_policy("elastic", hysteresis=0.0).decide((j,), cluster).jobs["j0"].batch_size == 1024


def test_a_grow_keeps_the_batch_where_the_speed_model_cannot_tell_batches_apart():
    """A live job's first speed fit is from one (GPUs, batch) configuration: compute only, every batch as fast. The
    smallest batch, the first candidate, won that tie: a 1 -> 2 GPU grow halved the job's batch 64 -> 32, which no
    measurement asked for (seen in `make demo`). A tie keeps the batch it runs at; a model that prefers a batch still
    gets it."""
    cluster = ClusterView.homogeneous(1, 2)
    flat = running(job(0, StepProfile(launch=0.0, allreduce=0.0), max_batch_size=256), 1, 64)
    a = make_policy("elastic").decide((flat,), cluster).jobs["j0"]
    assert (a.num_gpus, a.batch_size) == (2, 64)
    queued = job(0, StepProfile(launch=0.0, allreduce=0.0), batch_size=100, max_batch_size=256)   # not running: asked
    assert make_policy("elastic").decide((queued,), cluster).jobs["j0"].batch_size == 100
    fixed_cost = running(job(0, StepProfile(allreduce=0.0), max_batch_size=256), 1, 64)
    assert make_policy("elastic").decide((fixed_cost,), cluster).jobs["j0"].batch_size == 256


def test_a_better_batch_at_the_gpus_held_is_taken_there_not_by_a_detour_through_another_count():
    """A lone elastic job grew 1 -> 4 GPUs keeping its batch (its first speed fit could not tell batches apart); its
    measured fixed cost then asked for a larger batch. The DP valued staying at 4 only at the batch it ran at, so the
    larger batch was reachable only at another count: it shrank to 3 (batch 96, one node), then grew back to 4 (batch
    128), two restarts where one batch change does."""
    cluster = ClusterView((NodeView("node0", 3), NodeView("node1", 3)))
    lone = running(job(0, StepProfile(launch=0.05, per_sample=0.001, allreduce=0.001), batch_size=64,
                       max_batch_size=256, max_local_batch=32, max_gpus=4), 4, 64)
    lone = replace(lone, placement={"node0": 3, "node1": 1})
    a = make_policy("elastic").decide((lone,), cluster).jobs["j0"]
    assert (a.num_gpus, a.batch_size) == (4, 128)
    settled = replace(lone, current_batch_size=128)
    a = make_policy("elastic").decide((settled,), cluster).jobs["j0"]
    assert (a.num_gpus, a.batch_size) == (4, 128)


def test_hysteresis_blocks_a_small_rebalance_between_two_jobs():
    cluster = ClusterView.homogeneous(1, 4)
    # Without hysteresis the optimum swaps the two jobs' sizes for a small total gain; with 5 % it does not.
    a = running(job(0, StepProfile(allreduce=0.003)), 3, 384)
    b = running(job(1, StepProfile(allreduce=0.002)), 1, 128)
    for h, expect in ((0.05, 3), (0.0, 1)):
        alloc = make_policy("elastic", hysteresis=h).decide((a, b), cluster)
        assert alloc.gpus("j0") == expect, h


def test_non_preemptible_running_job_keeps_its_gpus():
    cluster = ClusterView.homogeneous(1, 4)
    stuck = replace(running(job(0), 1, 64), preemptible=False, attrs={})
    alloc = make_policy("elastic").decide((stuck, job(1, StepProfile(allreduce=0.0))), cluster)
    assert alloc.gpus("j0") == 1 and alloc.gpus("j1") == 3


def test_heterogeneous_cluster_gives_the_fast_type_to_the_job_that_gains_most():
    cluster = ClusterView((NodeView("f0", 1, "fast"), NodeView("s0", 1, "slow")))
    cheap = StepProfile(allreduce=1.0)            # will not scale past 1 GPU
    gains_a_lot = job(0, StepProfile(allreduce=1.0, fast_factor=4.0), max_gpus=1)
    gains_little = job(1, StepProfile(allreduce=1.0, fast_factor=1.2), max_gpus=1)
    for order in ((gains_little, gains_a_lot), (gains_a_lot, gains_little)):
        alloc = make_policy("elastic").decide(order, cluster)
        assert alloc.jobs["j0"].gpu_type == "fast" and alloc.jobs["j1"].gpu_type == "slow"
    cluster = ClusterView((NodeView("f0", 2, "fast"), NodeView("s0", 2, "slow")))
    mixed = (job(0, StepProfile(allreduce=1.0, fast_factor=2.0), max_gpus=1),) + tuple(
        job(i, cheap, max_gpus=1) for i in range(1, 6))
    types = {a.gpu_type for a in make_policy("elastic").decide(mixed, cluster).jobs.values()}
    assert types == {"fast", "slow"}
    per_type = {}
    many = tuple(job(i, cheap, max_gpus=1) for i in range(6))
    for a in make_policy("elastic").decide(many, cluster).jobs.values():
        per_type[a.gpu_type] = per_type.get(a.gpu_type, 0) + a.num_gpus
    assert per_type == {None: 4}          # no job tells the types apart: one pool, the driver places


def test_job_without_speed_model_runs_rigidly():
    cluster = ClusterView.homogeneous(1, 4)
    alloc = make_policy("elastic").decide((job(0, speed=None, requested_gpus=3),), cluster)
    assert alloc.gpus("j0") == 3 and alloc.jobs["j0"].batch_size == 64


# ---- submit-time validation ---------------------------------------------------------------------------------

@pytest.mark.parametrize("kw, message", [
    (dict(min_batch_size=512, max_batch_size=256, batch_size=None),
     "min_batch_size=512 is larger than max_batch_size=256"),
    (dict(batch_size=2048), "batch_size=2048 is outside"),
    (dict(max_local_batch=8, max_gpus=2), "needs >= 4 GPUs but at most 2"),
    (dict(min_batch_size=0), "min_batch_size must be >= 1"),
    (dict(batch_size=None, min_batch_size=None, max_batch_size=None), "needs batch_size or"),
])
def test_infeasible_batch_ranges_fail_at_submit_with_a_clear_line(kw, message):
    cluster = ClusterView.homogeneous(2, 4)
    with pytest.raises(UserError, match=message) as err:
        validate_elastic_job(job(7, **kw), cluster)
    assert "job 'j7'" in str(err.value) and "\n" not in str(err.value)


def test_gpu_only_needs_a_fixed_batch_and_skips_invalid_jobs_without_crashing():
    cluster = ClusterView.homogeneous(1, 4)
    bad = job(0, batch_size=None)
    with pytest.raises(UserError, match="batch_size is required by elastic-gpu-only"):
        validate_elastic_job(bad, cluster, fixed_batch=True)
    with pytest.raises(UserError, match="job 'j0'"):
        make_policy("elastic-gpu-only").validate(bad, cluster)
    make_policy("elastic").validate(job(0, batch_size=None), cluster)        # the range alone suffices there
    alloc = make_policy("elastic-gpu-only").decide((bad, job(1)), cluster)
    assert alloc.gpus("j0") == 0 and alloc.gpus("j1") >= 1


def test_urgency_gives_the_contended_gpu_to_the_job_closest_to_done():
    cluster = ClusterView.homogeneous(1, 1)
    long_first = job(0, remaining_samples=1e7)
    short_later = job(1, remaining_samples=1e4)
    assert make_policy("elastic", urgency=0.0).decide((long_first, short_later), cluster).gpus("j0") == 1   # FIFO tie
    assert make_policy("elastic", urgency=0.5).decide((long_first, short_later), cluster).gpus("j1") == 1


def test_a_job_about_to_finish_is_not_rescaled():
    cluster = ClusterView.homogeneous(1, 4)
    speed = StepProfile(allreduce=0.001)
    rate = speed.throughput(1, 1, 128)
    far = running(job(0, speed, remaining_samples=rate * 3600), 1, 128)         # an hour left: scale out
    near = running(job(0, speed, remaining_samples=rate * 20), 1, 128)          # 20 s left: a 30 s restart loses
    assert make_policy("elastic").decide((far,), cluster).gpus("j0") == 4
    assert make_policy("elastic").decide((near,), cluster).gpus("j0") == 1
    assert make_policy("elastic", restart_cost=0.0).decide((near,), cluster).gpus("j0") == 4


def test_pinned_jobs_that_no_longer_fit_do_not_block_the_others():
    small = ClusterView.homogeneous(1, 2)          # the cluster lost a node: 3 pinned GPUs no longer fit
    pinned = replace(running(job(0), 3, 96), preemptible=False, attrs={})
    alloc = make_policy("elastic").decide((pinned, job(1)), small)
    assert alloc.gpus("j1") >= 1 and alloc.total_gpus <= 2


def test_without_remaining_work_the_job_that_ran_least_goes_first():
    cluster = ClusterView.homogeneous(1, 1)
    old = job(0, run_time=50_000.0, attained_service=50_000.0)
    new = job(1, run_time=0.0, attained_service=0.0)
    assert make_policy("elastic").decide((old, new), cluster).gpus("j1") == 1
    assert make_policy("elastic", urgency=0.0).decide((old, new), cluster).gpus("j0") == 1


@pytest.mark.parametrize("seed", range(20))
def test_vectorised_concavity_check_agrees_with_the_scalar_one(seed):
    from dlsched.policy.dp import _concave_rows
    rng = np.random.default_rng(700 + seed)
    curves = random_curves(rng, 6, 5, concave=True) + random_curves(rng, 6, 5, concave=False)
    assert _concave_rows(curves) == [j for j, c in enumerate(curves) if is_concave(c)]


@pytest.mark.parametrize("seed", range(3))
def test_solve_on_large_non_concave_instances_matches_the_plain_dp(seed):
    rng = np.random.default_rng(900 + seed)
    curves = []
    for _ in range(400):                    # step-time-like curves: a dip at 2 GPUs (all-reduce), then concave
        G = int(rng.integers(2, 24))
        g = np.arange(G + 1, dtype=float)
        c = g / (1 + rng.uniform(0.02, 0.3) * np.maximum(g - 1, 0))
        c[2:] -= rng.uniform(0, 0.6)
        curves.append(c)
    sol = solve(curves, 512)
    assert sol.method in ("hull-greedy", "pruned-dp")
    assert sol.value == pytest.approx(knapsack_dp(curves, 512).value)
    assert sum(c[g] for c, g in zip(curves, sol.gpus)) == pytest.approx(sol.value) and sol.gpus.sum() <= 512


def test_pinned_jobs_are_fixed_before_the_envelope_methods_run():
    # a pinned running job (one finite point, u[0] = -inf) used to send the whole instance to the plain DP
    rng = np.random.default_rng(7)
    curves = []
    for _ in range(400):
        G = int(rng.integers(2, 24))
        g = np.arange(G + 1, dtype=float)
        c = g / (1 + rng.uniform(0.02, 0.3) * np.maximum(g - 1, 0))
        c[2:] -= rng.uniform(0, 0.6)
        curves.append(c)
    for j in range(0, 400, 10):
        pin = np.full(len(curves[j]), -np.inf)
        pin[2] = curves[j][2]
        curves[j] = pin
    sol = solve(curves, 512)
    assert sol.method in ("hull-greedy", "pruned-dp")
    assert sol.value == pytest.approx(knapsack_dp(curves, 512).value)
    assert all(sol.gpus[j] == 2 for j in range(0, 400, 10)) and sol.gpus.sum() <= 512
    assert not np.isfinite(solve(curves, 60).value)          # the pinned 80 GPUs do not fit


def test_a_job_without_any_batch_field_scales_gpus_and_reports_no_batch():
    cluster = ClusterView.homogeneous(1, 4)
    free = job(0, StepProfile(allreduce=0.0), batch_size=None, min_batch_size=None, max_batch_size=None,
               max_local_batch=None)
    make_policy("elastic-gpu-only").validate(free, cluster)
    for name in ("elastic", "elastic-gpu-only"):
        a = make_policy(name).decide((free,), cluster).jobs["j0"]
        assert a.num_gpus >= 1 and a.batch_size is None


def test_a_reused_policy_follows_a_job_whose_batch_limits_change():
    # decide() memoises batch ranges across decisions: the memo must key on the fields, not the job id.
    cluster = ClusterView.homogeneous(1, 4)
    policy = make_policy("elastic")
    wide = policy.decide((job(0),), cluster).jobs["j0"]
    narrow = policy.decide((job(0, batch_size=32, min_batch_size=16, max_batch_size=48),), cluster).jobs["j0"]
    assert wide.batch_size > 48
    assert 16 <= narrow.batch_size <= 48
    assert policy.decide((job(0),), cluster).jobs["j0"] == wide


@dataclass(frozen=True)
class BatchCostly(StepProfile):
    """Efficiency falls with the batch (as the gradient-noise model says): a larger batch needs more samples."""

    def efficiency(self, global_batch):
        return 64 / global_batch if global_batch > 64 else 1.0


def test_urgency_weight_does_not_depend_on_the_batch_the_job_runs_at():
    # the same job, same progress left, seen at batch 64 and at batch 512 (8x the samples left at 1/8 efficiency):
    # its weight relative to a second job must not change, or weights oscillate as batches change
    policy = make_policy("goodput")
    speed = BatchCostly()
    small = running(job(0, speed, remaining_samples=1e5), 1, 64)
    large = running(job(0, speed, remaining_samples=8e5), 1, 512)
    other = job(1, speed, remaining_samples=3e5)
    refs = {"j0": 1.0, "j1": 1.0}
    assert policy._scales([small, other], refs) == pytest.approx(policy._scales([large, other], refs))


def test_power_mean_fairness_admits_a_waiting_job_before_growing_a_running_one():
    cluster = ClusterView.homogeneous(1, 4, now=3600.0)    # an hour old: goodput's restart budget lets it move
    speed = StepProfile(allreduce=0.0)       # scales linearly: the sum of speed-ups gives it every GPU
    first = running(job(0, speed, requested_gpus=1), 1, 64)
    second = job(1, StepProfile(allreduce=0.2))
    greedy = make_policy("goodput", urgency=0.0).decide((first, second), cluster)
    fair = make_policy("goodput-fair", urgency=0.0).decide((first, second), cluster)
    assert greedy.gpus("j0") == 4 and greedy.gpus("j1") == 0
    assert fair.gpus("j0") >= 1 and fair.gpus("j1") >= 1
    with pytest.raises(ValueError, match="fairness"):
        make_policy("goodput", fairness=0.5)


def test_whole_nodes_gives_a_job_spanning_nodes_whole_nodes():
    cluster = ClusterView.homogeneous(4, 4)
    jobs = (job(0, StepProfile(allreduce=0.001)), job(1, StepProfile(allreduce=0.002)),
            job(2, StepProfile(allreduce=0.003)))
    alloc = make_policy("goodput", whole_nodes=True).decide(jobs, cluster)
    assert all(a.num_gpus <= 4 or a.num_gpus % 4 == 0 for a in alloc.jobs.values())


def test_saxena_is_the_paper_objective_solved_on_arrival_and_departure():
    p, base = make_policy("saxena"), make_policy("saxena-gpu-only")
    assert p.event_driven and base.event_driven and base.fixed_batch and not p.fixed_batch
    assert (p.urgency, p.hysteresis, p.restart_cost) == (0.0, 0.0, 0.0)
    cluster = ClusterView.homogeneous(1, 4)
    lone = job(0, StepProfile(allreduce=0.001), batch_size=32, min_local_batch=32)
    assert p.decide((lone,), cluster).gpus("j0") == 4                 # grows its batch with the GPUs
    assert base.decide((lone,), cluster).gpus("j0") == 1              # batch 32 at >= 32 per GPU: one GPU


def test_without_remaining_work_the_weight_follows_run_time_not_gpu_seconds():
    # two jobs that ran equally long, one on 8x the GPUs: growing a job must not by itself lower its weight
    policy = make_policy("goodput")
    a, b = job(0, run_time=600.0, attained_service=600.0), job(1, run_time=600.0, attained_service=4800.0)
    scales = policy._scales([a, b], {"j0": 1.0, "j1": 1.0})
    assert scales["j0"] == pytest.approx(scales["j1"])


def test_without_remaining_work_a_larger_request_ages_a_job_faster():
    # the request is a prior on size (Tiresias' GPUs x time) that scales the run time; q = 0 ignores it
    small, large = job(0, run_time=600.0, requested_gpus=1), job(1, run_time=600.0, requested_gpus=16)
    scales = make_policy("goodput", request_prior=0.5)._scales([small, large], {"j0": 1.0, "j1": 1.0})
    assert scales["j1"] / scales["j0"] == pytest.approx(((600 * 4 + 3600) / (600 + 3600)) ** 0.5)
    # before it runs a large request is level with a small one: the prior cannot keep it waiting
    fresh = make_policy("goodput", request_prior=0.5)._scales(
        [job(0, requested_gpus=1), job(1, requested_gpus=16)], {"j0": 1.0, "j1": 1.0})
    assert fresh["j0"] == pytest.approx(fresh["j1"])
    flat = make_policy("goodput", request_prior=0.0)._scales([small, large], {"j0": 1.0, "j1": 1.0})
    assert flat["j0"] == pytest.approx(flat["j1"])
    # `elastic` reads it too (without it its `none` runs were above Tiresias' on 5 of 13 scenarios)
    el = make_policy("elastic")._scales([small, large], {"j0": 1.0, "j1": 1.0})
    assert el["j1"] / el["j0"] == pytest.approx(((600 * 4 + 3600) / (600 + 3600)) ** 0.5)
    assert make_policy("elastic", request_prior=0.0)._scales([small, large], {"j0": 1.0, "j1": 1.0}) == flat
    with pytest.raises(ValueError, match="request_prior"):
        make_policy("goodput", request_prior=-1.0)


def test_without_remaining_work_a_waiting_job_displaces_a_running_one_only_past_a_margin():
    # duration jobs (Philly's) on one 4-GPU node, each wanting all 4: run-time aging lowers the running job's weight
    # every round, so without a margin two near-equal jobs swap (and restart) round after round
    from dlsched.sim.throughput import LinearThroughput

    def duration_job(i, ran):
        return JobView(id=f"j{i}", submit_time=0.0, requested_gpus=4, run_time=ran, speed=LinearThroughput(4))

    cluster = ClusterView.homogeneous(1, 4, now=7200.0)
    waiting = duration_job(1, 600.0)
    near = running(duration_job(0, 700.0), 4, None)           # weight 2 % below the waiting job's
    assert make_policy("goodput").decide((near, waiting), cluster).gpus("j0") == 4
    assert make_policy("goodput", aging_hysteresis=0.0).decide((near, waiting), cluster).gpus("j1") == 4
    far = running(duration_job(0, 3000.0), 4, None)           # ran far longer: the waiting job goes first
    assert make_policy("goodput").decide((far, waiting), cluster).gpus("j1") == 4
    with pytest.raises(ValueError, match="aging_hysteresis"):
        make_policy("goodput", aging_hysteresis=-0.1)


def test_restart_budget_keeps_young_and_often_restarted_jobs_and_lets_old_ones_move():
    # Pollux's penalty: a move is worth max(age - n R, 0) / (age + R); alone on 4 GPUs a linear job wants them all
    speed = StepProfile(allreduce=0.0)
    young = running(job(0, speed, requested_gpus=1, attrs={"restart_s": 30.0, "restarts": 0}), 1, 64)
    policy = make_policy("goodput", urgency=0.0)
    assert policy.decide((young,), ClusterView.homogeneous(1, 4, now=5.0)).gpus("j0") == 1   # needs 7x
    assert policy.decide((young,), ClusterView.homogeneous(1, 4, now=3600.0)).gpus("j0") == 4
    churned = running(job(0, speed, requested_gpus=1, attrs={"restart_s": 30.0, "restarts": 120}), 1, 64)
    assert policy.decide((churned,), ClusterView.homogeneous(1, 4, now=3600.0)).gpus("j0") == 1
    assert make_policy("goodput", urgency=0.0, restart_budget=False).decide(
        (young,), ClusterView.homogeneous(1, 4, now=5.0)).gpus("j0") == 4


def test_restart_budget_on_the_run_clock_does_not_count_time_spent_waiting():
    # submitted an hour ago but started 5 s ago: on the submit clock its restarts are nearly free, on the run clock
    # it is young (it still needs 7x to move); only for a job whose time left is predicted
    speed = StepProfile(allreduce=0.0)
    waited = replace(running(job(0, speed, requested_gpus=1, attrs={"restart_s": 30.0, "restarts": 0}), 1, 64),
                     run_time=5.0, remaining_samples=1e9)
    cluster = ClusterView.homogeneous(1, 4, now=3600.0)
    assert make_policy("goodput", urgency=0.0, budget_run_clock=False).decide((waited,), cluster).gpus("j0") == 4
    assert make_policy("goodput", urgency=0.0).decide((waited,), cluster).gpus("j0") == 1
    ran = replace(waited, run_time=3600.0)
    assert make_policy("goodput", urgency=0.0).decide((ran,), cluster).gpus("j0") == 4
    unknown = replace(waited, remaining_samples=None)     # no prediction: the submit clock
    assert make_policy("goodput", urgency=0.0).decide((unknown,), cluster).gpus("j0") == 4


def test_fair_share_base_measures_speed_ups_against_an_even_share():
    # Pollux's base: goodput at ceil(cluster / jobs) GPUs. Two jobs on 8 GPUs: base 4, so a linear job's speed-up
    # at 4 GPUs is 1 and waiting (worth s = 1/2 under the shifted power mean) beats running it at 1 GPU alone.
    cluster = ClusterView.homogeneous(2, 4, now=3600.0)
    linear = StepProfile(allreduce=0.0)
    jobs = (job(0, linear, requested_gpus=1), job(1, linear, requested_gpus=1))
    policy = make_policy("goodput-fair", urgency=0.0)
    assert policy.fair_share_base
    alloc = policy.decide(jobs, cluster)
    assert alloc.gpus("j0") == alloc.gpus("j1") == 4
    assert not make_policy("goodput-fair", fair_share_base=False).fair_share_base


def test_release_horizon_preempts_for_a_waiting_job_only_when_capacity_is_not_about_to_free():
    # 2 GPUs, both held: a long job L (an hour left) and a job E. A waiting job S 2.25x shorter than L weighs
    # sqrt(2.25) = 1.5x as much: SRPT hands it L's GPU. But when E ends in 40 s, S would get E's GPU then anyway;
    # over those 40 s L pays its 30 s pause at the resume, 0.75 of its value: L keeps its GPU and S waits.
    speed = StepProfile(allreduce=0.0)
    rate = speed.throughput(1, 1, 128)
    cluster = ClusterView.homogeneous(1, 2, now=3600.0)

    def jobs(e_left, s_left=1600.0):
        kw = dict(max_gpus=1, attrs={"restart_s": 30.0})
        long_ = running(job(0, speed, remaining_samples=rate * 3600, **kw), 1, 128)
        ending = running(job(1, speed, remaining_samples=rate * e_left, **kw), 1, 128, node="node0")
        return long_, ending, job(2, speed, remaining_samples=rate * s_left, **kw)

    soon, later = jobs(40.0), jobs(3600.0)
    assert make_policy("goodput", release_horizon=False).decide(soon, cluster).gpus("j2") == 1
    assert make_policy("goodput", release_horizon=True).decide(soon, cluster).gpus("j0") == 1
    assert make_policy("goodput", release_horizon=True).decide(soon, cluster).gpus("j2") == 0
    assert make_policy("goodput", release_horizon=True).decide(later, cluster).gpus("j2") == 1
    # the same for a shrink: L on 2 of 3 GPUs gives its second one to S unless E is about to end
    three = ClusterView.homogeneous(1, 3, now=3600.0)

    def shrink_case(e_left, s_left=1600.0):
        long_, ending, short = jobs(e_left, s_left)
        wide = running(replace(long_, max_gpus=2), 2, 256)
        return wide, ending, short

    assert make_policy("goodput", release_horizon=True).decide(shrink_case(40.0), three).gpus("j0") == 2
    alloc = make_policy("goodput", release_horizon=True).decide(shrink_case(1000.0), three)   # E outweighs S
    assert (alloc.gpus("j0"), alloc.gpus("j2")) == (1, 1)
    # S twice L's weight: its gain 2 against L's loss 1 + 0.75 x (1 now + 2 at the regrow) still keeps L whole
    assert make_policy("goodput", release_horizon=True).decide(shrink_case(40.0, 900.0), three).gpus("j0") == 2
    assert make_policy("goodput", release_horizon=False).decide(shrink_case(40.0, 900.0), three).gpus("j0") == 1


def test_without_remaining_work_the_sizes_of_finished_jobs_decide_who_runs_on():
    # Philly-like duration jobs, one GPU for two: run-time aging lets the newcomer displace the job that has run
    # 700 s (least attained first); when every job that finished ran ~1 000 s the older one is nearly done and runs
    # on (size_prior="gittins"), and when most finished within 10 s the newcomer is likely one of those and goes first
    from dlsched.sim.throughput import LinearThroughput

    def duration_job(i, ran):
        return JobView(id=f"j{i}", submit_time=float(i), requested_gpus=1, max_gpus=1, run_time=ran,
                       speed=LinearThroughput(1))

    def finished(sizes):
        return tuple(replace(duration_job(k, s), id=f"f{k}") for k, s in enumerate(sizes))

    old, new = running(duration_job(0, 700.0), 1, None), duration_job(1, 0.0)
    like = ClusterView((NodeView("node0", 1),), now=9000.0, finished=finished([950.0, 1000.0, 1050.0] * 5))
    assert make_policy("goodput", size_prior="aging").decide((old, new), like).gpus("j1") == 1
    assert make_policy("goodput").decide((old, new), like).gpus("j0") == 1
    tail = ClusterView((NodeView("node0", 1),), now=9000.0, finished=finished([10.0] * 12 + [20_000.0] * 3))
    assert make_policy("goodput").decide((old, new), tail).gpus("j1") == 1
    few = ClusterView((NodeView("node0", 1),), now=9000.0, finished=finished([1000.0] * 9))   # too few: aging
    assert make_policy("goodput").decide((old, new), few).gpus("j1") == 1
    # an elastic job's run time is the policy's choice as much as its size: it keeps aging
    grown = tuple(replace(f, max_gpus=4, speed=StepProfile()) for f in like.finished)
    elastic_like = replace(like, finished=grown)
    assert make_policy("goodput").decide((old, new), elastic_like).gpus("j1") == 1
    # before any size is known (or past every one) duration jobs age by band: in one band the running one runs on
    same_band = ClusterView((NodeView("node0", 1),), now=9000.0)
    ahead, behind = running(duration_job(0, 2000.0), 1, None), duration_job(1, 1030.0)
    assert make_policy("goodput").decide((ahead, behind), same_band).gpus("j0") == 1
    assert make_policy("goodput", size_prior="aging").decide((ahead, behind), same_band).gpus("j1") == 1
    with pytest.raises(ValueError, match="size_prior"):
        make_policy("goodput", size_prior="oracle")
