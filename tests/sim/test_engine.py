import pytest

from dlsched.errors import UserError
from dlsched.policy.base import Allocation, ClusterView, JobAllocation, NodeView, Policy, make_policy
from dlsched.sim import SimConfig, Simulator, WorkloadJob, run
from dlsched.perf.pollux import load_app
from dlsched.sim.throughput import TraceThroughput
from tests.sim.helpers import jcts, job

# Average JCT printed by the Pollux OSDI'21 artifact simulator (shared/data/pollux/reference-results.md).
PEER = {"tiresias": 2473.65, "optimus": 4087.06}


def test_restart_penalty_and_first_decision():
    # Submitted at 0, first seen at t=60, 30 s restart, then 100 s of work.
    assert jcts([job("a", 0, 1, 100)], "fifo", interval=60, restart_penalty=30) == {"a": 190}


def test_slow_gpu_type_scales_progress():
    cluster = ClusterView((NodeView("k0", 1, "k80"),))
    r = run([job("a", 0, 1, 100)], "fifo", cluster, interval=10, restart_penalty=0, gpu_speed={"k80": 0.5})
    assert r.jct() == {"a": 210}


def test_metrics_and_timeline():
    r = run([job("A", 0, 2, 100), job("B", 0, 1, 20)], "fifo", ClusterView.homogeneous(1, 2), interval=10,
            restart_penalty=0)
    s = r.summary()
    assert s["finished"] == 2 and s["avg_jct"] == pytest.approx((110 + 130) / 2) and s["makespan"] == 130
    assert s["avg_queue_delay"] == pytest.approx((10 + 110) / 2)
    assert 0 < s["gpu_utilisation"] <= 1 and r.timeline.gpus_allocated.max() == 2


def test_horizon_stops_and_counts_unfinished():
    r = run([job("B", 0, 1, 10), job("A", 0, 1, 1000)], "fifo", ClusterView.homogeneous(1, 1), interval=10,
            restart_penalty=0, horizon=100)
    assert r.summary()["finished"] == 1 and r.end_time == 100


def test_horizon_between_decisions_stops_there():
    """The run went on to the next decision after the horizon: a job finishing in between (at 156 s, horizon 150 s)
    was reported finished with a makespan past the horizon while finished_by_horizon said 0."""
    r = run([job("a", 0, 1, 66)], "fifo", ClusterView.homogeneous(1, 1), interval=60, restart_penalty=30,
            horizon=150)
    assert r.summary()["finished"] == 0 and r.end_time == 150 and r.timeline.time.max() == 150
    r = run([job("a", 0, 1, 66)], "fifo", ClusterView.homogeneous(1, 1), interval=60, restart_penalty=30,
            horizon=156)
    assert r.jct() == {"a": 156} and r.end_time == 156


class _BatchPolicy(Policy):
    """Gives every job 2 GPUs and a fixed batch size; records what it saw."""

    name = "batch-probe"

    def __init__(self, batch):
        self.batch, self.seen = batch, []

    def decide(self, jobs, cluster):
        self.seen.append({j.id: j.current_batch_size for j in jobs})
        return Allocation({j.id: JobAllocation(2, batch_size=self.batch) for j in jobs})


def test_policy_chosen_batch_size_drives_progress(data_dir):
    spec = [WorkloadJob("c", 0, 2, app="cifar10", batch_size=128)]
    small, big = _BatchPolicy(128), _BatchPolicy(1024)
    cfg = SimConfig(interval=60, horizon=600)
    sims = [Simulator(spec, p, ClusterView.homogeneous(1, 4), cfg) for p in (small, big)]
    for s in sims:
        s.run()
    assert big.seen[1] == {"c": 1024} and small.seen[1] == {"c": 128}
    # Same GPUs and time, different batch -> different progress (throughput x statistical efficiency).
    assert sims[0].jobs[0].progress != pytest.approx(sims[1].jobs[0].progress, rel=1e-3)
    assert sims[1].jobs[0].split.atomic == 512


def test_trace_app_semantics(data_dir):
    app = load_app("cifar10")
    assert app.max_epochs == 100 and app.init_batch_size == 128 and app.max_batch_size == 4096
    split = app.split_batch(2048, 6)               # ceil(2048/6)=342 per GPU, no accumulation
    assert (split.atomic, split.accum_steps) == (342, 0)
    assert app.split_batch(256, 1).accum_steps == 1   # one GPU above the initial batch accumulates
    assert app.gain(128, 0) == pytest.approx(1.0)
    assert app.step_time((1, 3), 64) == app.step_time((3, 1), 64)   # rotations share a trace
    speed = TraceThroughput(app, epoch=0)
    assert speed.throughput(4, 1, 512) > speed.throughput(1, 1, 512) > 0
    assert speed.throughput(64, 16, 128) == 0.0                     # 2 samples per GPU: cannot run
    assert 0 < speed.efficiency(4096) < speed.efficiency(128) == pytest.approx(1.0)


def test_deterministic():
    jobs = [job(f"j{i}", 7 * i, 1 + i % 3, 30 + 11 * i) for i in range(20)]
    for p in ("fifo", "srtf", "tiresias", "optimus"):
        assert jcts(jobs, p, nodes=2, gpus_per_node=2) == jcts(jobs, p, nodes=2, gpus_per_node=2)


@pytest.mark.slow
@pytest.mark.parametrize("policy", ["tiresias", "optimus"])
def test_fidelity_to_pollux_artifact_workload1(data_dir, policy):
    r = run(data_dir / "pollux/workloads/workload-1.csv", policy, nodes=16, gpus_per_node=4, interval=60)
    assert r.summary()["finished"] == 160
    assert r.avg_jct == pytest.approx(PEER[policy], rel=0.03)
    assert r.avg_jct == pytest.approx(PEER[policy], abs=0.01)   # we reproduce the peer's semantics exactly


@pytest.mark.parametrize("policy", ["tiresias", "elastic"])
def test_batch_outside_the_traces_fails_at_submit(data_dir, policy):
    # cifar10 is validated at global batches 128..4096: 16 cannot be simulated by any policy.
    jobs = [WorkloadJob("ok", 0, 1, app="cifar10", batch_size=128), WorkloadJob("bad", 5000, 1, app="cifar10", batch_size=16)]
    with pytest.raises(UserError, match="job bad: field batch_size=16 is outside .*128..4096"):
        Simulator(jobs, make_policy(policy), ClusterView.homogeneous(1, 4))


class _NoBigBatch(Policy):
    """Refuses batches above 2048 at submit (test-only)."""

    name = "test-no-big-batch"

    def validate(self, job, cluster):
        if job.batch_size > 2048:
            raise UserError(f"job {job.id!r}: field batch_size={job.batch_size} is above 2048")

    def decide(self, jobs, cluster):
        return Allocation({j.id: JobAllocation(1) for j in jobs})


def test_policy_validates_every_job_at_submit(data_dir):
    jobs = [WorkloadJob("ok", 0, 1, app="cifar10", batch_size=128), WorkloadJob("big", 9000, 2, app="cifar10", batch_size=4096)]
    with pytest.raises(UserError, match="job 'big': field batch_size=4096 is above 2048"):
        Simulator(jobs, _NoBigBatch(), ClusterView.homogeneous(1, 2))
    assert Simulator(jobs, make_policy("elastic"), ClusterView.homogeneous(1, 2)).t == 0.0


@pytest.mark.parametrize("policy", ["elastic-gpu-only", "saxena-gpu-only"])
def test_gpu_only_runs_a_fixed_batch_above_the_per_gpu_limit_by_accumulating(data_dir, policy):
    """A fixed batch of 4096 needs >= 4 GPUs at <= 1024 samples per GPU; the cluster has 2. The gpu-only baselines
    refused it at submit ("no feasible GPU count"), though the trace model runs it as the runtimes do: 2048 per GPU
    as 2 micro-batches of 1024 (``split_batch``), priced as the extra passes."""
    jobs = [WorkloadJob("big", 0, 2, app="cifar10", batch_size=4096)]
    sim = Simulator(jobs, make_policy(policy), ClusterView.homogeneous(1, 2), SimConfig(interval=60, horizon=600))
    sim.run()
    big = sim.jobs[0]
    assert (big.ngpus, big.batch, big.split.atomic, big.split.accum_steps) == (2, 4096, 1024, 1) and big.progress > 0


def test_trace_job_view_carries_min_local_batch(data_dir):
    sim = Simulator([WorkloadJob("a", 0, 1, app="cifar10", batch_size=128)], make_policy("elastic"),
                    ClusterView.homogeneous(1, 4))
    assert sim._make_view(sim.jobs[0]).min_local_batch == load_app("cifar10").min_local_bsz == 32


def test_trace_job_gpu_cap_comes_from_the_app_not_the_user_batch(data_dir):
    # cifar10: user batch 128 at >= 32 per GPU would cap it at 4 GPUs; the app's traced batches reach 4096 (128 GPUs).
    cluster = ClusterView.homogeneous(2, 4)
    sim = Simulator([WorkloadJob("a", 0, 1, app="cifar10", batch_size=128)], make_policy("elastic"), cluster)
    view = sim._make_view(sim.jobs[0])
    assert view.max_gpus == 4096 // 32
    grown = make_policy("elastic").decide((view,), cluster).jobs["a"]
    assert grown.num_gpus > 4 and grown.batch_size > 128          # batch grows with the GPUs
    fixed = make_policy("elastic-gpu-only").decide((view,), cluster).jobs["a"]
    assert fixed.num_gpus <= 4 and fixed.batch_size == 128
    assert make_policy("optimus").gain(view, 4, 4) == 0.0           # the user's batch cannot feed a 5th GPU


def test_elastic_reads_min_local_batch_from_the_field_or_attrs():
    from dlsched.policy.base import JobView
    from dlsched.policy.elastic import batch_range

    common = dict(batch_size=128, min_batch_size=128, max_batch_size=256, max_local_batch=128)
    assert batch_range(JobView("a", 0, 1, min_local_batch=32, **common), 64).g_max == 256 // 32
    assert batch_range(JobView("a", 0, 1, attrs={"min_local_batch": 64}, **common), 64).g_max == 256 // 64
    assert batch_range(JobView("a", 0, 1, **common), 64).g_max == 64


@pytest.mark.parametrize("knob", [{"interval": float("nan")}, {"interval": float("inf")},
                                  {"restart_penalty": float("nan")}, {"restart_penalty": -1.0},
                                  {"horizon": float("nan")}, {"horizon": float("inf")}, {"horizon": 0.0},
                                  {"seed": -1}])
def test_bad_config_is_a_user_error_before_the_run(knob):
    """A NaN restart penalty made run() loop forever, a NaN/inf horizon or interval raised ValueError/OverflowError
    mid-run, a negative seed a numpy ValueError: each is now a UserError naming the knob."""
    (name, value), = knob.items()
    with pytest.raises(UserError, match=f"{name} must be"):
        run([job("a", 0, 1, 100)], "fifo", ClusterView.homogeneous(1, 1), **knob)


@pytest.mark.parametrize("policy", ["fifo", "srtf", "tiresias"])
def test_placement_option_never_changes_a_policy_that_places_its_own_jobs(policy):
    """FIFO/SRTF/Tiresias place their jobs most free first, but the uncontended fast path placed newcomers with
    SimConfig.placement: with best-fit a 2-GPU job went to the slow 2-GPU node instead of the fast 4-GPU one
    (JCT 110 s instead of 60 s) while the contended path ignored the option."""
    cluster = ClusterView((NodeView("fast", 4, "a"), NodeView("slow", 2, "b")))
    runs = {pl: run([job("x", 0, 2, 100)], policy, cluster, interval=10, restart_penalty=0,
                    gpu_speed={"a": 2.0, "b": 1.0}, placement=pl).jct()
            for pl in ("most-free", "best-fit", "consolidated")}
    assert runs["best-fit"] == runs["consolidated"] == runs["most-free"] == {"x": 60}
    assert make_policy(policy).places_own


def test_trace_job_on_a_node_bigger_than_its_traces_is_refused_before_the_run(data_dir):
    """On 8-GPU nodes a 6-GPU cifar10 job crashed the run mid-way: 'ValueError: cifar10: no step time for placement
    (6,) local batch 342' (the Pollux traces measured at most 4 GPUs per node)."""
    spec = [WorkloadJob("c", 0, 6, app="cifar10", batch_size=2048)]
    with pytest.raises(UserError, match=r"node 'node0' has 8 GPUs: the cifar10 traces measured at most 4 GPUs per node"):
        run(spec, "fifo", ClusterView.homogeneous(2, 8))
    r = run([job("d", 0, 6, 100)], "fifo", ClusterView.homogeneous(1, 8))   # duration jobs know no traces
    assert r.summary()["finished"] == 1


class _HoldProbe(Policy):
    """Gives every job its request; records what ``policy.restart_hold`` reads of each running job."""

    name = "hold-probe"

    def __init__(self):
        self.seen = []

    def decide(self, jobs, cluster):
        from dlsched.policy.restart_hold import settling

        self.seen.append((cluster.now, {j.id: (j.attrs.get("changed_at"), j.attrs.get("settled_at"),
                                              settling(j, cluster.now)) for j in jobs if j.is_running}))
        return Allocation({j.id: JobAllocation(j.requested_gpus) for j in jobs})


def test_a_job_pays_its_restart_by_the_next_decision_at_the_published_clock():
    """The simulator tells a policy when a running job last (re)started and when its pause ends; at the published
    60 s clock and 30 s restart a job started at one decision has paid by the next, so ``restart_hold`` never binds
    there (the published figures are those without it)."""
    probe = _HoldProbe()
    Simulator([job("a", 0, 1, 1000)], probe, ClusterView.homogeneous(1, 1),
              SimConfig(interval=60, restart_penalty=30, horizon=300)).run()
    assert probe.seen[1:4] == [(120.0, {"a": (60.0, 90.0, False)}), (180.0, {"a": (60.0, 90.0, False)}),
                               (240.0, {"a": (60.0, 90.0, False)})]
    probe = _HoldProbe()   # a faster clock: held through its pause and as long again
    Simulator([job("a", 0, 1, 1000)], probe, ClusterView.homogeneous(1, 1),
              SimConfig(interval=20, restart_penalty=30, horizon=140)).run()
    assert [(t, s["a"][2]) for t, s in probe.seen[1:]] == [(40.0, True), (60.0, True), (80.0, False), (100.0, False),
                                                            (120.0, False), (140.0, False)]   # started at 20


def test_strict_fifo_skips_the_rounds_an_arrival_behind_a_waiting_job_cannot_change():
    """An overloaded cluster's queue was sorted and diffed again at every arrival; the answers are the same."""
    from dlsched.policy.fifo import FifoPolicy

    class Counted(FifoPolicy):
        def __init__(self, queues_behind: bool):
            super().__init__()
            self.arrival_queues_behind, self.calls = queues_behind, 0

        def decide(self, jobs, cluster):
            self.calls += 1
            return super().decide(jobs, cluster)

    jobs = [job(f"j{i}", 5 * i, 1 + i % 4, 200 + 37 * (i % 7)) for i in range(60)]   # 4 GPUs: a queue builds
    skipping, deciding = Counted(True), Counted(False)
    assert jcts(jobs, skipping, nodes=1, gpus_per_node=4) == jcts(jobs, deciding, nodes=1, gpus_per_node=4)
    assert skipping.calls < 0.7 * deciding.calls, (skipping.calls, deciding.calls)
    assert make_policy("fifo", backfill=True).arrival_queues_behind is False   # a newcomer may fit now: it decides


def test_strict_fifo_is_shown_only_the_head_of_its_queue_and_decides_the_same(data_dir):
    """The simulator passes a strict FIFO the running jobs and the head of the queue (``queue_window_gpus``): an
    overloaded queue of thousands was viewed and sorted at every completion. Same jobs, same times, as a FIFO shown
    every queued job; the window is what it was shown."""
    import random

    from dlsched.policy.fifo import FifoPolicy

    class ShownEverything(FifoPolicy):
        def queue_window_gpus(self, cluster):
            return None

    class Counting(FifoPolicy):
        shown = 0

        def decide(self, jobs, cluster):
            Counting.shown = max(Counting.shown, sum(not j.is_running for j in jobs))
            return super().decide(jobs, cluster)

    rng = random.Random(3)   # ~4x the cluster's capacity, ties in submit time included
    jobs = [job(f"j{i}", float(rng.choice(range(0, 4000, 40))), rng.choice((1, 1, 2, 4, 8)), rng.uniform(50, 900))
            for i in range(400)]
    cluster = ClusterView.homogeneous(2, 4)
    every = run(jobs, ShownEverything(), cluster, interval=60.0).jobs
    head = run(jobs, Counting(), cluster, interval=60.0).jobs
    assert every.equals(head)
    assert 0 < Counting.shown <= 9    # at most 8 GPUs' worth and the one past them; the queue held hundreds


class _FinishedProbe(Policy):
    """Runs every job at its request (one at a time fits) and records the finished jobs each decision was shown."""

    name = "finished-probe"

    def __init__(self):
        self.seen = []

    def decide(self, jobs, cluster):
        self.seen.append({f.id: f.run_time for f in cluster.finished})
        return Allocation({j.id: JobAllocation(j.requested_gpus) for j in jobs[:1]})


def test_the_policy_is_shown_the_jobs_that_finished_and_how_long_they_ran():
    # what a policy without remaining work learns job sizes from (policy/gittins.py): nothing before a job ends
    probe = _FinishedProbe()
    run([job("a", 0, 1, 100), job("b", 0, 1, 200)], probe, ClusterView.homogeneous(1, 1), interval=10,
        restart_penalty=0)
    assert probe.seen[0] == {}
    assert probe.seen[-1] == {"a": 100}


class _TurnProbe(Policy):
    """One GPU, the jobs take turns at every decision; records the restarts each job is shown."""

    name = "turn-probe"

    def __init__(self):
        self.seen = []

    def decide(self, jobs, cluster):
        self.seen.append({j.id: j.attrs.get("restarts") for j in jobs})
        turn = jobs[len(self.seen) % len(jobs)]
        return Allocation({turn.id: JobAllocation(1)})


def test_every_kind_of_job_is_shown_its_restarts():
    # Pollux's restart budget (``goodput``) reads attrs["restarts"], which the live service gives every job
    # (service/job_models.py); the simulator gave it to trace jobs only, so duration and ensemble jobs ran without it
    from dlsched.policy.fleet import ModelProfile
    from dlsched.sim.ensemble_job import EnsembleWork
    from dlsched.sim.fleet import Member

    ens = WorkloadJob("ens", 0.0, 1, ensemble=EnsembleWork((Member(ModelProfile("m", (100.0,)), 1e6),), restart_s=0.0))
    probe = _TurnProbe()
    run([job("d", 0, 1, 10_000), ens], probe, ClusterView.homogeneous(1, 1), interval=10, restart_penalty=0,
        horizon=60)
    # they take turns (the ensemble first): a job's first start is not a restart, each later start is one
    assert [s["ens"] for s in probe.seen] == [0, 0, 0, 1, 1, 2]
    assert [s["d"] for s in probe.seen] == [0, 0, 0, 0, 1, 1]
