"""The one scheduling round: its diff, and the same check of a policy's answer in all three drivers."""
import pytest

from dlsched.backends.recording import RecordingBackend
from dlsched.policy.base import Allocation, ClusterView, JobAllocation, JobView, NodeView, Policy
from dlsched.round import InvalidAllocation, Move, Preempt, Resize, Start, diff, schedule
from dlsched.service.forecast import forecast
from dlsched.service.loop import LiveLoop
from dlsched.service.store import QUEUED, Store
from dlsched.sim import WorkloadJob, SimConfig, Simulator
from dlsched.spec import load_job_spec
from tests.service.conftest import cluster, job_yaml


class Overbook(Policy):
    """Every job gets every GPU of the cluster: more than exist once two jobs are active (a broken policy)."""

    name = "test-overbook"

    def decide(self, jobs, cluster):
        return Allocation({j.id: JobAllocation(cluster.total_gpus) for j in jobs})


class Ghost(Policy):
    """Allocates a job nobody submitted (a broken policy)."""

    name = "test-ghost"

    def decide(self, jobs, cluster):
        return Allocation({"ghost": JobAllocation(1)})


def _view(i: str, gpus: int = 0, node: str = "n0", batch: int | None = None) -> JobView:
    return JobView(id=i, submit_time=0.0, requested_gpus=2, batch_size=32, current_batch_size=batch,
                   placement={node: gpus} if gpus else {}, remaining_samples=100.0)


def _in_simulator(policy):
    specs = [WorkloadJob("1", 0.0, 2, duration=100.0), WorkloadJob("2", 0.0, 2, duration=100.0)]
    Simulator(specs, policy, ClusterView.homogeneous(2, 2), SimConfig(interval=60, horizon=600)).run()


def _in_live_loop(policy, tmp_path):
    store = Store(tmp_path / "t.db")
    loop = LiveLoop(store, RecordingBackend(), cluster(), tmp_path, policy=policy)
    store.submit(load_job_spec(job_yaml("a")))
    store.submit(load_job_spec(job_yaml("b")))
    before = store.snapshot()
    try:
        loop.round()
    finally:
        assert store.snapshot() == before and all(j.state == QUEUED for j in store.jobs())


def _in_forecast(policy):
    forecast([_view("1"), _view("2")], ClusterView((NodeView("n0", 2), NodeView("n1", 2)), 0.0), policy, 0.0)


@pytest.mark.parametrize("policy, message", [(Overbook(), "allocated 8 GPUs of 4"),
                                             (Ghost(), r"allocated unknown/inactive jobs \['ghost'\]")])
@pytest.mark.parametrize("driver", ["simulator", "live loop", "forecast"])
def test_every_driver_rejects_a_bad_allocation_with_the_same_check(driver, policy, message, tmp_path, monkeypatch):
    import dlsched.round as round_module

    checked = []
    real_check = round_module.check
    monkeypatch.setattr(round_module, "check", lambda *a: (checked.append(a[3]), real_check(*a)))
    with pytest.raises(InvalidAllocation, match=f"policy '{policy.name}' {message}"):
        {"simulator": lambda: _in_simulator(policy), "live loop": lambda: _in_live_loop(policy, tmp_path),
         "forecast": lambda: _in_forecast(policy)}[driver]()
    assert checked == [policy.name]


def test_placement_that_does_not_fit_is_rejected():
    class Pinned(Policy):
        name = "test-pinned"

        def decide(self, jobs, cluster):
            return Allocation({j.id: JobAllocation(2, nodes={"n0": 2}) for j in jobs})

    with pytest.raises(InvalidAllocation, match="over-subscribes nodes"):
        schedule(Pinned(), [_view("1"), _view("2")], ClusterView((NodeView("n0", 2), NodeView("n1", 2)), 0.0))


def test_the_diff_names_each_kind_of_change():
    jobs = [_view("new"), _view("gone", 1, batch=32), _view("grow", 1, batch=32), _view("batch", 1, batch=32),
            _view("moved", 1, batch=32), _view("same", 1, batch=32), _view("waits")]
    alloc = Allocation({"new": JobAllocation(1), "grow": JobAllocation(2), "batch": JobAllocation(1, batch_size=64),
                        "moved": JobAllocation(1), "same": JobAllocation(1)})
    placement = {"new": {"n1": 1}, "grow": {"n0": 2}, "batch": {"n0": 1}, "moved": {"n1": 1}, "same": {"n0": 1}}
    assert diff(jobs, alloc, placement) == (
        Start("new", 1, 32, {"n1": 1}), Preempt("gone"), Resize("grow", 2, 32, {"n0": 2}, moved=True),
        Resize("batch", 1, 64, {"n0": 1}, moved=False), Move("moved", {"n1": 1}))


def test_policy_defaults_need_no_lookup():
    assert (Overbook.rigid, Overbook.event_driven) == (False, False)
    assert Overbook().validate(_view("1"), ClusterView((NodeView("n0", 2),), 0.0)) is None
