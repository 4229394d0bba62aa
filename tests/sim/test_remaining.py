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
