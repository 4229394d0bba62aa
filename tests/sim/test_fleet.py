"""Ensemble simulation: profiles from the H100 table, the three planners, greedy vs exhaustive optimum."""
import pytest

from dlsched.errors import UserError
from dlsched.policy.base import ClusterView, NodeView
from dlsched.policy.fleet import ModelProfile, Preprocessing
from dlsched.sim.ensemble_job import ensemble_job_specs
from dlsched.sim.fleet import (
    Member, exhaustive_makespan, fleet_planner, h100_profiles, homogeneous_planner, independent_planner,
    seeded_ensemble, simulate_ensemble,
)


def _cluster(nodes=1, gpus=4, cpus=16):
    return ClusterView(tuple(NodeView(f"n{i}", gpus, "h100", cpus) for i in range(nodes)))


def test_h100_profiles_scale_weakly_and_cite_the_table(data_dir):
    prof = h100_profiles(data_dir / "h100" / "throughput.csv")
    r = prof["resnet20/b128/fp32"]
    assert r.rate(1) == pytest.approx(128 / 7.332e-3, rel=1e-3)   # median step 7.332 ms in the table
    assert 1.9 < r.rate(2) / r.rate(1) <= 2.0 and r.rate(4) > r.rate(3)
    assert prof["vgg16/b128/fp32"].rate(4) / prof["vgg16/b128/fp32"].rate(1) < r.rate(4) / r.rate(1)  # bigger all-reduce


def test_bad_profile_row_names_file_row_and_value(tmp_path):
    bad = tmp_path / "t.csv"
    bad.write_text("gpu,model,dataset,batch_size,precision,step_ms_median\nx,resnet20,cifar10,64,fp32,0\n")
    with pytest.raises(UserError, match=r"t.csv: row 2: step_ms_median must be > 0, got 0"):
        h100_profiles(bad)


def test_converged_members_leave_and_the_rest_are_re_formed():
    slowpoke = Member(ModelProfile("slow", (100.0, 190.0)), work=1000.0)
    quick = Member(ModelProfile("quick", (400.0, 800.0)), work=400.0)
    cl = _cluster(gpus=2)
    # Seed rule #2 (most members, then most GPUs): quick alone on both GPUs (800/s) first, slow waits; after quick
    # converges, slow is re-formed onto both GPUs (190/s).
    res = simulate_ensemble([slowpoke, quick], cl, fleet_planner(reform="event"))
    assert res.finish["quick"] == pytest.approx(0.5) and res.makespan == pytest.approx(0.5 + 1000 / 190)
    assert [sorted(g.gpus.items()) for s in res.timeline for g in s.groups] == [[("quick", 2)], [("slow", 2)]]


def test_slide_example_against_the_exhaustive_optimum():
    from tests.policy.test_fleet import SLIDE

    members = [Member(p, work=w) for p, w in zip(SLIDE, (1000.0, 1500.0, 1500.0, 1000.0))]
    cl = _cluster(nodes=2, gpus=2, cpus=64)
    greedy = simulate_ensemble(members, cl, fleet_planner(reform="event"))
    assert sorted(greedy.timeline[0].groups[0].gpus.items()) == [("DNN1", 1), ("DNN4", 3)]
    opt = exhaustive_makespan(members, cl)
    print(f"slide example: greedy/optimum makespan = {greedy.makespan / opt:.3f}")
    assert opt <= greedy.makespan * (1 + 1e-9)


def test_restart_cost_is_paid_by_members_that_move():
    m = [Member(ModelProfile("a", (100.0,)), 100.0), Member(ModelProfile("b", (100.0,)), 200.0)]
    res = simulate_ensemble(m, _cluster(gpus=1), independent_planner, restart_s=5.0)
    assert res.makespan == pytest.approx(5 + 1 + 5 + 2)


def test_baselines_on_a_cpu_bound_pair():
    pre = Preprocessing(images_per_s_per_core=100.0)
    m = [Member(ModelProfile("a", (500.0,)), 1000.0), Member(ModelProfile("b", (500.0,)), 1000.0)]
    cl = _cluster(gpus=2, cpus=4)   # independent: (4-2)//2 = 1 core each -> 100/s; shared pool 2 cores -> 200/s
    assert simulate_ensemble(m, cl, independent_planner, pre).makespan == pytest.approx(10.0)
    assert simulate_ensemble(m, cl, homogeneous_planner, pre).makespan == pytest.approx(5.0)


@pytest.mark.parametrize("nodes,gpus", [(1, 4), (2, 2)])
def test_greedy_is_close_to_the_exhaustive_optimum_on_small_instances(nodes, gpus, data_dir):
    prof = h100_profiles(data_dir / "h100" / "throughput.csv")
    cl = _cluster(nodes=nodes, gpus=gpus, cpus=64)
    ratios = []
    for seed in range(3):
        members = seeded_ensemble(prof, 3, seed=seed, epochs=(5, 40))
        opt = exhaustive_makespan(members, cl)
        greedy = simulate_ensemble(members, cl, fleet_planner(reform="event")).makespan
        assert opt <= greedy * (1 + 1e-9)
        ratios.append(greedy / opt)
    print(f"{nodes}x{gpus} GPUs, 3 members: greedy/optimum = {', '.join(f'{r:.3f}' for r in ratios)}")
    assert max(ratios) <= 1.5
    # (the ratio is printed, not a performance target: bench/fleet_sim.py reports it over more cases)


def test_fleet_beats_both_baselines_on_a_heterogeneous_ensemble(data_dir):
    prof = h100_profiles(data_dir / "h100" / "throughput.csv")
    members = seeded_ensemble(prof, 24, seed=3)
    cl = _cluster(nodes=4, gpus=4, cpus=16)
    fleet = simulate_ensemble(members, cl, fleet_planner(), restart_s=10).makespan
    assert fleet < simulate_ensemble(members, cl, independent_planner, restart_s=10).makespan
    assert fleet < simulate_ensemble(members, cl, homogeneous_planner, restart_s=10).makespan


def test_ensemble_as_jobs_of_the_shared_simulator(data_dir):
    from dlsched.sim.engine import run

    prof = h100_profiles(data_dir / "h100" / "throughput.csv")
    members = seeded_ensemble(prof, 16, seed=4)
    sub = _cluster(nodes=2, gpus=4, cpus=16)   # the ensemble's share of the cluster
    (gang,) = ensemble_job_specs(members, sub, "fleet")
    singles = ensemble_job_specs(members, sub, "separately")
    assert gang.requested_gpus == 8 and len(singles) == 16 and all(j.requested_gpus == 1 for j in singles)
    # Side by side in the shared driver with FIFO on the same 8 GPUs: FLEET's gang job finishes first.
    cl = ClusterView.homogeneous(2, 4)
    fleet_end = run([gang], "fifo", cl, interval=1.0, restart_penalty=0.0).jobs.finish.max()
    sep_end = run(singles, "fifo", cl, interval=1.0, restart_penalty=0.0).jobs.finish.max()
    assert fleet_end < sep_end
    with pytest.raises(ValueError, match="mode"):
        ensemble_job_specs(members, sub, "bogus")
