import pytest

from dlsched.policy.placement import PlacementError, best_fit, consolidated, most_free_first, place
from dlsched.policy.base import Allocation, ClusterView, JobAllocation, NodeView


def test_most_free_first_takes_fullest_nodes_in_order():
    free = {"n0": 2, "n1": 4, "n2": 4}
    out = most_free_first(6, free)
    assert list(out.items()) == [("n1", 4), ("n2", 2)]   # ties -> first in cluster order; order kept
    with pytest.raises(PlacementError):
        most_free_first(11, free)


def test_consolidated_uses_fewest_nodes_evenly():
    assert consolidated(4, {"n0": 3, "n1": 2, "n2": 2}) == {"n0": 2, "n1": 2}
    assert consolidated(3, {"n0": 3, "n1": 4}) == {"n1": 3}
    assert sum(consolidated(5, {"n0": 3, "n1": 3}).values()) == 5   # no even split: falls back


def test_best_fit_leaves_whole_nodes_free():
    free = {"n0": 4, "n1": 1, "n2": 3}
    assert best_fit(1, free) == {"n1": 1}              # the tightest fit, not the emptiest node
    assert best_fit(3, free) == {"n2": 3}
    assert best_fit(4, free) == {"n0": 4}
    assert best_fit(6, {"n0": 4, "n1": 4, "n2": 2}) == {"n0": 4, "n2": 2}   # a whole node, then the tightest
    assert sum(best_fit(5, {"n0": 3, "n1": 2, "n2": 1}).values()) == 5      # nothing fits: the fullest first
    with pytest.raises(PlacementError):
        best_fit(11, {"n0": 4, "n1": 4, "n2": 2})


def test_a_policy_that_packs_places_with_its_own_strategy():
    from dlsched.policy.base import JobView, make_policy
    from dlsched.round import schedule

    c = ClusterView.homogeneous(2, 4)
    held = JobView(id="held", submit_time=0.0, requested_gpus=3, placement={"node1": 3})
    new = JobView(id="new", submit_time=1.0, requested_gpus=1)
    goodput = make_policy("goodput")          # rigid jobs (no speed model) keep their request
    assert goodput.placement is best_fit
    assert schedule(goodput, (held, new), c).placement["new"] == {"node1": 1}     # most-free would take node0
    assert make_policy("goodput", packing=False).placement is None


def test_place_keeps_unchanged_jobs_and_places_smallest_first():
    c = ClusterView.homogeneous(2, 4)
    alloc = Allocation({"big": JobAllocation(4), "keep": JobAllocation(2), "tiny": JobAllocation(1)})
    out = place(alloc, c, {"keep": {"node1": 2}})
    assert out["keep"] == {"node1": 2}
    assert out["tiny"] == {"node0": 1}          # placed before "big"
    assert sum(out["big"].values()) == 4
    with pytest.raises(PlacementError):
        place(Allocation({"x": JobAllocation(9)}), c, {})


def test_place_with_optimus_theorem_1():
    c = ClusterView.homogeneous(3, 4)
    alloc = Allocation({"x": JobAllocation(1), "y": JobAllocation(2), "z": JobAllocation(2), "a": JobAllocation(4)})
    held = {"x": {"node0": 1}, "y": {"node1": 2}, "z": {"node2": 2}}          # free: 3, 2, 2
    assert place(alloc, c, held, strategy=consolidated)["a"] == {"node0": 2, "node1": 2}
    assert place(alloc, c, held)["a"] == {"node0": 3, "node1": 1}


def test_simulator_uses_chosen_placement():
    from dlsched.sim import WorkloadJob, run

    jobs = [WorkloadJob("a", 0, 1, duration=100), WorkloadJob("b", 0, 2, duration=100)]
    r = run(jobs, "fifo", ClusterView.homogeneous(2, 2), interval=10, restart_penalty=0, placement="consolidated")
    assert r.jct() == {"a": 110, "b": 110}


def test_place_keeps_a_job_on_its_gpu_type():
    c = ClusterView((NodeView("fast0", 4, "v100"), NodeView("slow0", 4, "k80"), NodeView("slow1", 4, "k80")))
    alloc = Allocation({"a": JobAllocation(2, gpu_type="v100"), "b": JobAllocation(6, gpu_type="k80"),
                        "c": JobAllocation(2)})
    out = place(alloc, c, {"a": {"slow0": 2}})          # a held k80 GPUs: moved to its type, not kept
    assert out["a"] == {"fast0": 2}
    assert set(out["b"]) == {"slow0", "slow1"} and sum(out["b"].values()) == 6
    assert sum(out["c"].values()) == 2
    with pytest.raises(PlacementError, match="no nodes of GPU type 'a100'"):
        place(Allocation({"x": JobAllocation(1, gpu_type="a100")}), c, {})


def test_resized_job_keeps_the_gpus_it_holds():
    c = ClusterView.homogeneous(3, 4)
    held = {"grow": {"node1": 1}, "shrink": {"node2": 2, "node0": 2}}
    alloc = Allocation({"grow": JobAllocation(3), "shrink": JobAllocation(2)})
    out = place(alloc, c, held)
    assert out["shrink"] == {"node2": 2}                      # its first GPUs, not a fresh most-free node
    assert out["grow"] == {"node1": 3}                        # grows beside its GPU, on no extra node
    # a kept map spanning more nodes than a fresh one is not forced: 1 GPU on a full-ish node grows elsewhere
    busy = place(Allocation({"j": JobAllocation(4), "x": JobAllocation(3)}), c, {"j": {"node0": 1}, "x": {"node0": 3}})
    assert busy["x"] == {"node0": 3} and busy["j"] == {"node1": 4}


def test_round_moves_no_job_whose_size_is_unchanged():
    """A hand-made round: one job grows, one shrinks, one waits, and the two that keep their size on nodes that
    still fit must not move (a move is a restart the simulator charges)."""
    from dlsched.policy.base import JobView, Policy
    from dlsched.round import Move, Resize, schedule

    class Fixed(Policy):
        name = "fixed"

        def decide(self, jobs, cluster):
            return Allocation({"a": JobAllocation(2), "b": JobAllocation(4), "c": JobAllocation(1),
                               "d": JobAllocation(3)})

    c = ClusterView.homogeneous(4, 4)
    held = {"a": {"node3": 2}, "b": {"node2": 2, "node1": 2}, "c": {"node1": 2}, "d": {"node0": 1}}
    jobs = [JobView(id=j, submit_time=0.0, requested_gpus=sum(n.values()), placement=n, current_batch_size=32)
            for j, n in held.items()]
    d = schedule(Fixed(), jobs, c)
    assert d.nodes("a") == {"node3": 2} and d.nodes("b") == {"node2": 2, "node1": 2}
    assert not [x for x in d.actions if isinstance(x, Move)]
    acts = {x.job_id: x for x in d.actions}
    assert set(acts) == {"c", "d"}
    assert dict(acts["c"].nodes) == {"node1": 1}               # shrink: keeps one of its GPUs
    assert dict(acts["d"].nodes) == {"node0": 3}               # grow: beside the GPU it holds
