import pytest

from dlsched.errors import UserError
from dlsched.policy.base import Allocation, ClusterView, JobAllocation, Policy
from dlsched.sim import SimConfig, Simulator, WorkloadJob
from dlsched.sim.remaining import RemainingMode, parse_remaining
from tests.sim.helpers import job


class _Recorder(Policy):
    """Runs every job on 2 GPUs at its batch and records the remaining work it is told at each decision."""

    name = "recorder"

    def __init__(self):
        self.seen: list[dict[str, float | None]] = []

    def decide(self, jobs, cluster):
        self.seen.append({j.id: j.remaining_samples for j in jobs})
        return Allocation({j.id: JobAllocation(2, batch_size=j.batch_size) for j in jobs})


def _told(specs, remaining, horizon=1800):
    rec = _Recorder()
    Simulator(specs, rec, ClusterView.homogeneous(1, 4), SimConfig(remaining=remaining, horizon=horizon)).run()
    return rec.seen


def test_parse_modes_and_one_line_errors():
    assert parse_remaining("oracle") == RemainingMode("oracle")
    assert parse_remaining("noise:0.3") == RemainingMode("noise", 0.3) and str(RemainingMode("noise", 0.3)) == "noise:0.3"
    for bad in ("oracel", "noise:", "noise:-1", "none:2", "predicted:x"):
        with pytest.raises(UserError, match="remaining: bad value"):
            parse_remaining(bad)


def test_predicted_comes_from_observation_not_the_oracle(data_dir):
    spec = [WorkloadJob("c", 0, 2, app="cifar10", batch_size=512)]
    oracle, predicted, none = (_told(spec, m) for m in ("oracle", "predicted", "none"))
    assert all(s["c"] is None for s in none)
    o, p = [s["c"] for s in oracle], [s["c"] for s in predicted]
    assert all(x > 0 for x in p) and p != o
    # it shrinks as the job progresses and stays within a factor of the truth (it does not know how efficiency
    # will evolve, so it is not exact)
    assert p[-1] < p[1] and all(0.3 < x / y < 3 for x, y in zip(p, o))


def test_predicted_knows_nothing_of_a_job_without_declared_work(data_dir):
    assert all(s["d"] is None for s in _told([job("d", 0, 2, 600)], "predicted", horizon=120))


def test_noise_is_seeded_and_is_not_the_oracle():
    specs = [job(f"j{i}", 0, 2, 100 + i) for i in range(2)]
    a, b, o = _told(specs, "noise:0.5", 60), _told(specs, "noise:0.5", 60), _told(specs, "oracle", 60)
    assert a == b and a != o


def _blind_future(app, epoch):
    """A copy of ``app`` whose traces after ``epoch`` differ (more iterations, a noisier gradient): the oracle's
    answer changes, what the job has observed so far does not."""
    import copy

    changed = copy.copy(app)
    for table, factor in (("_iteration", 1.7), ("_grad_var", 3.0)):
        t = getattr(app, table).copy()
        t[:, epoch + 1:] *= factor
        setattr(changed, table, t)
    return changed


def test_predicted_mode_never_reads_the_traces_future(data_dir):
    """The policy's remaining work in ``predicted`` mode is a function of the job's observations only: changing the
    trace after the epoch the job has reached changes the oracle, never the prediction."""
    from dlsched.perf.pollux import load_app
    from dlsched.sim.job_state import SimJob
    from dlsched.sim.throughput import TraceThroughput

    app = load_app("cifar10")

    def told(a, mode, forget=False):
        j = SimJob(WorkloadJob("c", 0, 2, app="cifar10", batch_size=512), 0, a, 1.0)
        j.ngpus, j.ptuple, j.nodes, j.split = 2, (2,), {"n0": 2}, a.split_batch(512, 2)
        j.advance_trace(0.0, 600.0)
        assert 3 <= j.epoch < a.max_epochs - 1 and len(j.history) == j.epoch
        if forget:
            j.history.clear()
        return j.epoch, j.remaining(parse_remaining(mode), 600.0, TraceThroughput(a, j.epoch, 4))

    epoch, predicted = told(app, "predicted")
    future = _blind_future(app, epoch)
    assert told(future, "predicted") == (epoch, predicted)
    assert told(future, "oracle")[1] != told(app, "oracle")[1]
    assert told(app, "none")[1] is None
    # the epoch records are what the service's predictor reads (its observed rate), not only the rate now
    assert told(app, "predicted", forget=True)[1] != predicted


class _EpochRecorder(_Recorder):
    def decide(self, jobs, cluster):
        self.seen.append({j.id: (j.attrs["epoch"], j.remaining_samples) for j in jobs})
        return Allocation({j.id: JobAllocation(2, batch_size=j.batch_size) for j in jobs})


def test_a_policy_in_predicted_mode_is_told_the_same_whatever_the_traces_future(data_dir, monkeypatch):
    """End to end through the simulator: what the policy is told while a job is at epoch <= 5 does not depend on
    the trace after epoch 5 in ``predicted`` mode; in ``oracle`` mode it does."""
    import dlsched.sim.engine as engine
    from dlsched.perf.pollux import load_app

    spec = [WorkloadJob("c", 0, 2, app="cifar10", batch_size=512)]

    def told(mode, future):
        app = load_app("cifar10")
        monkeypatch.setattr(engine, "load_app", lambda name: _blind_future(app, 5) if future else app)
        rec = _EpochRecorder()
        Simulator(spec, rec, ClusterView.homogeneous(1, 4), SimConfig(remaining=mode, horizon=900)).run()
        return [s["c"] for s in rec.seen if s["c"][0] <= 5]

    same = told("predicted", False)
    assert len(same) >= 3 and told("predicted", True) == same
    assert told("oracle", True) != told("oracle", False)


class _PreemptOnce(_Recorder):
    """Runs the job on 2 GPUs, pre-empts it at one decision (600 s) and resumes it at the same size and batch."""

    def decide(self, jobs, cluster):
        self.seen.append({j.id: j.remaining_samples for j in jobs})
        g = 0 if 600 <= cluster.now < 660 else 2
        return Allocation({j.id: JobAllocation(g, batch_size=j.batch_size) for j in jobs if g})


def test_a_job_resumed_at_its_old_size_is_not_told_more_work_than_before_its_preemption(data_dir):
    """The observed rate is over the records since the job's last (re)start: from the epoch records before a
    pre-emption to those after, the wall clock holds the wait and the restart pause (a gap too short for the
    predictor's per-step restart check to see in epoch records). It told a resumed job 15 % more work left than
    before it was pre-empted, after it had trained two more epochs; two imagenet jobs then swapped every round."""
    rec = _PreemptOnce()
    spec = [WorkloadJob("c", 0, 2, app="cifar10", batch_size=512)]
    Simulator(spec, rec, ClusterView.homogeneous(1, 4), SimConfig(remaining="predicted", horizon=900)).run()
    told = [s["c"] for s in rec.seen]       # decisions at 60, 120, ... s
    before, resumed = told[9], told[11:14]  # 600 s (last before the pre-emption); 720-840 s, running again
    assert all(x < before for x in resumed), (before, resumed)
