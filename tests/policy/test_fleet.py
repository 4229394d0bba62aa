"""FLEET greedy: flotilla creation, node-local first-fit-decreasing, c*, the registry entry."""
import pytest

from dlsched.policy.base import ClusterView, JobView, NodeView, make_policy
from dlsched.policy.fleet import (
    Flotilla, ModelProfile, Preprocessing, assign_gpus, create_flotilla, flotilla_rate, plan_fleet,
)

FAST = ModelProfile("fast", (1000.0, 1900.0, 2700.0, 3400.0))
MID = ModelProfile("mid", (520.0, 1000.0, 1450.0, 1900.0))
SLOW = ModelProfile("slow", (260.0, 500.0, 740.0, 980.0))


def test_literal_anchor_gives_slower_models_more_gpus_to_match_the_fastest():
    assert create_flotilla([FAST, MID, SLOW], free_gpus=16, anchor="fastest") == {"fast": 1, "mid": 2, "slow": 4}


def test_models_that_cannot_reach_the_target_wait_and_packing_is_cheapest_first():
    hopeless = ModelProfile("hopeless", (10.0, 20.0))
    assert create_flotilla([FAST, MID, SLOW, hopeless], free_gpus=3, anchor="fastest") == {"fast": 1, "mid": 2}


def test_best_anchor_raises_the_target_when_gpus_are_plentiful():
    # With one slow model and 4 GPUs the literal rule runs it on 1 GPU; "best" uses all 4.
    assert create_flotilla([SLOW], free_gpus=4, anchor="fastest") == {"slow": 1}
    assert create_flotilla([SLOW], free_gpus=4) == {"slow": 4}


def test_ffd_keeps_multi_gpu_members_inside_one_node_and_packs_small_ones():
    free = {"n0": 4, "n1": 4}
    placed = assign_gpus({"a": 3, "b": 2, "c": 2, "d": 1}, free)
    assert placed == {"a": "n0", "b": "n1", "c": "n1", "d": "n0"}
    assert free == {"n0": 0, "n1": 0}
    # 3 + 3 on two 4-GPU nodes: the second 3 cannot share a node with the first -> it waits.
    free = {"n0": 4, "n1": 2}
    assert assign_gpus({"a": 3, "b": 3}, free) == {"a": "n0"}


def test_c_star_is_the_fewest_cores_meeting_the_slowest_member():
    pre = Preprocessing(images_per_s_per_core=300.0)
    plan = plan_fleet([FAST, MID, SLOW], {"n0": 4, "n1": 4}, cpu_pool=100, pre=pre, anchor="fastest")
    (f,) = plan.flotillas
    slowest = min(p.rate(f.gpus[p.name]) for p in (FAST, MID, SLOW))
    assert f.cores == 4 and pre.rate(f.cores) >= slowest > pre.rate(f.cores - 1)
    # More cores cannot raise R(F) beyond the slowest member.
    profiles = {p.name: p for p in (FAST, MID, SLOW)}
    assert flotilla_rate(profiles, f.gpus, f.cores + 10, pre) == flotilla_rate(profiles, f.gpus, f.cores, pre) == slowest


def test_short_core_pool_caps_the_flotilla_rate():
    plan = plan_fleet([FAST], {"n0": 1}, cpu_pool=1, pre=Preprocessing(200.0))
    assert plan.flotillas[0].rate == 200.0


def test_leftover_gpus_form_a_second_slower_flotilla():
    hopeless = ModelProfile("tiny", (50.0, 90.0))
    plan = plan_fleet([FAST, hopeless], {"n0": 4}, cpu_pool=50, anchor="fastest")
    # ... and, nobody waiting, the 2 spare GPUs raise the first flotilla's rate.
    assert [dict(f.gpus) for f in plan.flotillas] == [{"fast": 3}, {"tiny": 1}]
    assert plan.waiting == ()


def test_incremental_keeps_survivors_in_place():
    running = Flotilla({"fast": 1, "mid": 2, "gone": 1}, {"fast": "n0", "mid": "n0", "gone": "n0"}, cores=3, rate=900.0)
    plan = plan_fleet([FAST, MID, SLOW], {"n0": 4, "n1": 4}, cpu_pool=20, keep=[running])
    kept, new = plan.flotillas
    assert dict(kept.gpus) == {"fast": 1, "mid": 2} and kept.cores == 3
    assert dict(new.gpus) == {"slow": 4} and new.nodes["slow"] == "n1"


def test_registry_policy_places_each_member_on_one_node():
    cluster = ClusterView(tuple(NodeView(f"n{i}", 4, "h100", 16) for i in range(2)))
    jobs = tuple(
        JobView(id=p.name, submit_time=0.0, requested_gpus=1, kind="ensemble", attrs={"fleet_rates": p.rates})
        for p in (FAST, MID, SLOW)
    )
    alloc = make_policy("fleet", anchor="fastest").decide(jobs, cluster)
    assert {j: a.num_gpus for j, a in alloc.jobs.items()} == {"fast": 1, "mid": 2, "slow": 4}
    assert all(len(a.nodes) == 1 for a in alloc.jobs.values())
    with pytest.raises(ValueError, match="anchor"):
        make_policy("fleet", anchor="nope").decide(jobs, cluster)


def test_leftover_gpus_go_to_the_slowest_member_while_that_raises_the_flotilla_rate():
    plan = plan_fleet([FAST, MID], {"n0": 6}, cpu_pool=50, anchor="fastest")
    (f,) = plan.flotillas
    # 1 + 2 GPUs reach the target (1000/s, a tie); the 3 spare: both bottleneck members +1, then mid +1.
    assert dict(f.gpus) == {"fast": 2, "mid": 4}
    assert f.rate == min(FAST.rate(2), MID.rate(4))


def test_leftovers_stop_when_a_bottleneck_member_is_at_its_maximum():
    plan = plan_fleet([SLOW, ModelProfile("cap", (260.0,))], {"n0": 8}, cpu_pool=50, anchor="fastest")
    assert [dict(f.gpus) for f in plan.flotillas] == [{"slow": 1, "cap": 1}]


def test_jobs_without_a_fleet_profile_are_still_scheduled_in_the_shared_simulator():
    from dlsched.sim.engine import run
    from dlsched.sim.workload import WorkloadJob

    jobs = [WorkloadJob(f"j{i}", 60.0 * i, 1 + i % 3, duration=600.0) for i in range(6)]
    res = run(jobs, "fleet", ClusterView.homogeneous(2, 4), interval=60.0, horizon=10_000)
    assert res.jobs.finish.notna().all()
