"""The forecast rolls the real policies forward: hand-computed starts and finishes on tiny clusters."""
from dataclasses import dataclass

import pytest

from dlsched.policy.base import ClusterView, JobView, NodeView, make_policy
from dlsched.service.forecast import forecast, rate_for


@dataclass(frozen=True)
class PerGpu:
    """samples/s = per_gpu * GPUs (linear scaling), any batch."""
    per_gpu: float

    def throughput(self, num_gpus, num_nodes=1, global_batch=0, gpu_type=None):
        return self.per_gpu * num_gpus

    def efficiency(self, global_batch):
        return 1.0


def one_node(gpus):
    return ClusterView((NodeView("n0", gpus),), 0.0)


def job(i, gpus, left, per_gpu=None, running=False, submit=0.0, **kw):
    return JobView(id=str(i), submit_time=submit, requested_gpus=gpus, max_gpus=gpus, batch_size=32,
                   remaining_samples=left, speed=PerGpu(per_gpu) if per_gpu else None,
                   placement={"n0": gpus} if running else {}, current_batch_size=32 if running else None, **kw)


def test_fifo_queue_starts_when_the_running_job_finishes():
    jobs = [job(1, 4, 1000, per_gpu=2.5, running=True), job(2, 4, 500, per_gpu=5.0, submit=1.0)]
    f = forecast(jobs, one_node(4), make_policy("fifo"), now=100.0, start_s=5.0)
    assert f.finish["1"] == pytest.approx(200.0)             # 1000 samples at 10/s, already running: no restart
    assert f.start["2"] == pytest.approx(200.0)
    assert f.finish["2"] == pytest.approx(200.0 + 5.0 + 25.0)  # start-up, then 500 at 20/s
    assert not f.cut_short


def test_srtf_preempts_the_long_job_and_charges_its_restart():
    jobs = [job(1, 1, 1000, per_gpu=1.0, running=True), job(2, 1, 100, per_gpu=1.0, submit=5.0)]
    f = forecast(jobs, one_node(1), make_policy("srtf"), now=0.0, start_s=5.0, step_s=1000.0)
    assert f.start["2"] == 0.0 and f.finish["2"] == pytest.approx(105.0)
    assert f.finish["1"] == pytest.approx(105.0 + 5.0 + 1000.0)   # waited, restarted, then all its work


def test_the_observed_rate_calibrates_the_model():
    v = job(1, 2, 100, per_gpu=10.0, running=True)
    assert rate_for(v, 4, 1, 32, observed=10.0) == pytest.approx(20.0)   # model says 20/s on 2: observed is half
    assert rate_for(job(2, 2, 100, running=True), 4, 1, 32, observed=6.0) == pytest.approx(12.0)  # no model: linear
    assert rate_for(job(3, 2, 100), 2, 1, 32, observed=None) is None


def test_unknown_work_holds_its_gpus_and_what_waits_behind_it_has_no_start():
    jobs = [job(1, 4, None, per_gpu=1.0, running=True), job(2, 4, 10, per_gpu=1.0, submit=1.0)]
    f = forecast(jobs, one_node(4), make_policy("fifo"), now=0.0)
    assert f.finish == {"1": None, "2": None} and f.start["2"] is None and not f.cut_short


def test_a_bounded_forecast_says_it_was_cut_short():
    jobs = [job(1, 1, 10_000, per_gpu=1.0, running=True)]
    f = forecast(jobs, one_node(1), make_policy("tiresias"), now=0.0, step_s=10.0, max_decisions=3)
    assert f.cut_short and f.decisions == 3 and f.finish["1"] is None


def test_decisions_one_per_completion_for_event_driven_policies_and_few_for_the_others():
    jobs = [job(i, 1, 1000.0 * (i + 1), per_gpu=1.0, running=i < 2, submit=float(i)) for i in range(6)]
    fifo = forecast(jobs, one_node(2), make_policy("fifo"), now=0.0, step_s=10.0)
    assert fifo.decisions == 6 and not fifo.cut_short          # at now, then after each completion but the last
    tiresias = forecast(jobs, one_node(2), make_policy("tiresias"), now=0.0, step_s=10.0)
    assert not tiresias.cut_short and tiresias.decisions < 100  # the period grows with the look-ahead (~12 000 s)
    assert all(f is not None for f in tiresias.finish.values())


def test_the_elastic_policy_grows_a_job_when_the_other_leaves():
    # two elastic jobs share 4 GPUs; when the short one finishes, the long one gets all 4 and finishes sooner
    # than at its current 2 GPUs
    a = JobView(id="a", submit_time=0.0, requested_gpus=2, min_gpus=1, max_gpus=4, batch_size=32, min_batch_size=32,
                max_batch_size=32, remaining_samples=4000, speed=PerGpu(10.0), placement={"n0": 2},
                current_batch_size=32)
    b = JobView(id="b", submit_time=0.0, requested_gpus=2, min_gpus=1, max_gpus=4, batch_size=32, min_batch_size=32,
                max_batch_size=32, remaining_samples=200, speed=PerGpu(10.0), placement={"n0": 2},
                current_batch_size=32)
    f = forecast([a, b], one_node(4), make_policy("elastic"), now=0.0, step_s=60.0, resize_s=2.0)
    at_current = 4000 / 20.0
    assert f.finish["b"] is not None and f.finish["a"] < at_current


def test_an_ensemble_ends_with_its_last_member_and_frees_gpus_as_members_leave():
    from dlsched.service.fleet_status import members_left
    from dlsched.service.forecast import with_members

    # the runtime's events: 3 one-slot members at 100 samples/s, caps 1000/1000/5000 samples, 0 done at the plan
    events = [
        {"kind": "job_profiled", "time": 0.0, "detail": {"profiles": [{"member": m, "rates": [100.0]} for m in "abc"],
                                                        "max_samples": {"a": 1000, "b": 1000, "c": 5000}}},
        {"kind": "job_flotillas", "time": 0.0, "detail": {"flotillas": [{"members": {"a": 1, "b": 1, "c": 1}, "rate": 100.0}],
                                                         "samples_done": {"a": 0, "b": 0, "c": 0}}},
    ]
    ens = with_members(job(1, 3, None, per_gpu=100.0, running=True, kind="ensemble"), members_left(events, now=0.0))
    assert ens.remaining_samples == 7000
    other = job(2, 2, 400, per_gpu=10.0, submit=1.0)
    f = forecast([ens, other], one_node(4), make_policy("fifo"), now=0.0, start_s=5.0, resize_s=2.0)
    # a and b leave at 10 s: the ensemble now needs 1 GPU, the waiting 2-GPU job starts; c trains on (resized: 2 s)
    assert f.start["2"] == pytest.approx(10.0) and f.finish["2"] == pytest.approx(10.0 + 5.0 + 20.0)
    assert f.finish["1"] == pytest.approx(10.0 + 2.0 + 40.0)
    # as one elastic job of 7000 samples the ensemble would hold 3 GPUs to the end and the other job would wait
    whole = forecast([job(1, 3, 7000, per_gpu=100.0, running=True), other], one_node(4), make_policy("fifo"), now=0.0)
    assert whole.start["2"] == pytest.approx(whole.finish["1"]) == pytest.approx(7000 / 300)


def test_members_left_extrapolates_since_the_last_plan_and_drops_converged_members():
    from dlsched.service.fleet_status import members_left

    events = [
        {"kind": "job_profiled", "time": 0.0, "detail": {"profiles": [{"member": "a", "rates": [50.0, 90.0]},
                                                                      {"member": "b", "rates": [40.0]}],
                                                        "max_samples": {"a": 10_000, "b": 2000}}},
        {"kind": "job_flotillas", "time": 100.0, "detail": {"flotillas": [{"members": {"a": 2}, "rate": 90.0}],
                                                           "samples_done": {"a": 1000, "b": 2000}}},
        {"kind": "job_member_converged", "time": 101.0, "detail": {"member": "b"}},
    ]
    assert members_left(events, now=110.0) == (("a", (50.0, 90.0), 10_000 - 1000 - 900.0),)


class SeesFinished:
    """fifo, recording the finished jobs each decision was shown (``ClusterView.finished``)."""

    event_driven, rigid, placement = True, True, None

    def __init__(self):
        self.fifo, self.seen = make_policy("fifo"), []

    def __getattr__(self, name):
        return getattr(self.fifo, name)

    def decide(self, jobs, cluster):
        self.seen.append((cluster.now, [(f.id, f.run_time) for f in cluster.finished]))
        return self.fifo.decide(jobs, cluster)


def test_the_forecast_shows_its_policy_the_finished_jobs_and_those_that_finish_in_it():
    """The simulator shows its policy the jobs that finished (the Gittins ranking learns sizes from them); the
    forecast showed none, neither the live ones nor those finishing as it rolls forward."""
    done = job(9, 1, 0)
    cluster = ClusterView((NodeView("n0", 4),), 0.0, (done,))
    policy = SeesFinished()
    jobs = [job(1, 4, 1000, per_gpu=2.5, running=True), job(2, 4, 500, per_gpu=5.0, submit=1.0)]
    f = forecast(jobs, cluster, policy, now=100.0, start_s=5.0)
    assert f.finish["2"] == pytest.approx(230.0)
    assert policy.seen[0] == (100.0, [("9", 0.0)])
    assert (200.0, [("9", 0.0), ("1", pytest.approx(100.0))]) in policy.seen   # job 1 ran 100 s more, then ended
