import pytest

from dlsched.placement import PlacementError, consolidated, most_free_first, place
from dlsched.policy.base import Allocation, ClusterView, JobAllocation


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


def test_place_keeps_unchanged_jobs_and_places_smallest_first():
    c = ClusterView.homogeneous(2, 4)
    alloc = Allocation({"big": JobAllocation(4), "keep": JobAllocation(2), "tiny": JobAllocation(1)})
    out = place(alloc, c, {"keep": {"node1": 2}})
    assert out["keep"] == {"node1": 2}
    assert out["tiny"] == {"node0": 1}          # placed before "big"
    assert sum(out["big"].values()) == 4
    with pytest.raises(PlacementError):
        place(Allocation({"x": JobAllocation(9)}), c, {})
