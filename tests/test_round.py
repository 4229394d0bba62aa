"""The one scheduling round: its diff, and the same check of a policy's answer in all three drivers."""
import dataclasses

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


def _held(i: str, gpus: int, current: int | None, held: int | None, lo: int = 16, hi: int = 256, **kw) -> JobView:
    """A job whose spec allows batches lo..hi (its batch 32), at ``current``; ``held``: an operator's `dlsched resize
    --batch` (the live view then narrows the range and the batch to it, ``service.job_models.job_view``)."""
    b, blo, bhi = (held, held, held) if held is not None else (32, lo, hi)
    return JobView(id=i, submit_time=float(len(i)), requested_gpus=gpus or 1, batch_size=b, min_batch_size=blo,
                   max_batch_size=bhi, current_batch_size=current, placement={"n0": gpus} if gpus else {},
                   remaining_samples=1e6, **kw)


@pytest.mark.parametrize("name", ["tiresias", "fifo", "srtf"])
def test_a_held_batch_is_what_the_job_runs_at_under_a_policy_that_chooses_no_batch(name):
    """Tester's report: under tiresias `resize 18 -n 2 --batch 128` (queued) started it at its last batch, 64, and
    `resize 18 -n 3 --batch 256` (running) resized it to 3 workers at 64: the current batch won over the held one."""
    from dlsched.policy import make_policy

    cluster = ClusterView((NodeView("n0", 8),), 0.0)
    jobs = [_held("queued", 0, current=64, held=128), _held("running", 2, current=64, held=256),
            _held("free", 2, current=64, held=None), _held("new", 0, current=None, held=None)]
    got = {a.job_id: a for a in schedule(make_policy(name), jobs, cluster).actions}
    assert got["queued"] == Start("queued", 1, 128, got["queued"].nodes)
    assert isinstance(got["running"], Resize) and (got["running"].num_gpus, got["running"].batch_size) == (2, 256)
    assert "free" not in got                          # its current batch is inside its range: kept, no change
    assert got["new"].batch_size == 32


def test_a_batch_the_policy_chose_wins_over_the_held_one():
    jobs = [_held("a", 1, current=64, held=128)]
    assert diff(jobs, Allocation({"a": JobAllocation(1, batch_size=96)}), {"a": {"n0": 1}}) == (
        Resize("a", 1, 96, {"n0": 1}),)
    assert diff(jobs, Allocation({"a": JobAllocation(1)}), {"a": {"n0": 1}}) == (Resize("a", 1, 128, {"n0": 1}),)


def test_kept_batch():
    assert _held("a", 1, current=64, held=None).kept_batch == 64        # inside the spec's range
    assert _held("a", 1, current=64, held=128).kept_batch == 128        # the operator's
    assert _held("a", 1, current=None, held=None).kept_batch == 32      # not run yet: the spec's
    assert JobView(id="a", submit_time=0.0, requested_gpus=1, current_batch_size=500, min_batch_size=16,
                   max_batch_size=256).kept_batch == 256                # no batch asked: the current one, in range
    assert JobView(id="a", submit_time=0.0, requested_gpus=1, current_batch_size=48).kept_batch == 48   # no range


def test_the_forecast_runs_a_held_batch_as_the_round_does():
    """A running job at batch 64 held at 128, whose samples/s are its batch: it finishes at the held batch's rate."""
    from dataclasses import dataclass

    from dlsched.policy import make_policy

    @dataclass(frozen=True)
    class PerBatch:
        def throughput(self, num_gpus, num_nodes, global_batch, gpu_type=None):
            return float(global_batch)

        def efficiency(self, global_batch):
            return 1.0

    job = dataclasses.replace(_held("a", 1, current=64, held=128), remaining_samples=12800.0, speed=PerBatch(),
                              attrs={})
    f = forecast([job], ClusterView((NodeView("n0", 1),), 0.0), make_policy("tiresias"), 0.0, resize_s=2.0)
    assert f.finish["a"] == pytest.approx(2.0 + 12800 / 128)
