import numpy as np
import pytest

from dlsched.policy.gittins import MIN_FINISHED, band_start, gittins_estimates, gittins_times, kaplan_meier


def test_one_size_known_from_history_gives_the_time_left():
    # every job seen so far ran 100 s: a job at age a has 100 - a left, so the older of two goes first
    points, mass = kaplan_meier(np.full(20, 100.0), np.array([]))
    assert points.tolist() == [100.0] and mass.tolist() == pytest.approx([1.0])
    assert gittins_times(np.array([0.0, 30.0, 90.0]), points, mass) == pytest.approx([100.0, 70.0, 10.0])
    assert np.isnan(gittins_times(np.array([150.0]), points, mass)[0])     # outlived every size: unknown


def test_a_heavy_tail_ranks_least_attained_first():
    # many short jobs and a few long ones: a job that has run past the short ones is likely long (Tiresias' LAS)
    sizes = np.array([10.0] * 80 + [1000.0] * 15 + [10_000.0] * 5)
    points, mass = kaplan_meier(sizes, np.array([]))
    t = gittins_times(np.array([0.0, 20.0, 2000.0]), points, mass)
    assert t[0] < t[1] < t[2]


def test_live_jobs_count_as_censored_sizes():
    # ten finished at 100 s and 300 s; ten still running at 200 s are larger than 200 s, so 300 s weighs
    # 3/4 (not 1/2): the running jobs' mass goes to the sizes seen beyond their age
    points, mass = kaplan_meier(np.array([100.0] * 5 + [300.0] * 5), np.full(10, 200.0))
    assert points.tolist() == [100.0, 300.0] and mass.tolist() == pytest.approx([0.25, 0.75])


def test_estimates_need_enough_finished_jobs():
    ages = {"a": 0.0, "b": 50.0}
    assert gittins_estimates(ages, [100.0] * (MIN_FINISHED - 1)) == {}
    est = gittins_estimates(ages, [100.0] * MIN_FINISHED)
    assert est["b"] < est["a"]


def test_a_job_just_past_every_like_job_seen_is_judged_by_its_band():
    # like jobs finished at 950-1 000 s, two ran 20 000 s; the one at 1 020 s is most likely like the others (only
    # none of them ran that long yet): unbanded, the tail alone judged it and a newcomer pre-empted it
    sizes = [950.0, 1000.0] * 5 + [20_000.0] * 2
    points, mass = kaplan_meier(np.array(sizes), np.array([]))
    unbanded = gittins_times(np.array([1020.0, 0.0]), points, mass)
    assert unbanded[0] > unbanded[1]
    est = gittins_estimates({"old": 1020.0, "new": 0.0}, sizes)
    assert est["old"] < est["new"]
    assert band_start(np.array([0.0, 0.5, 1.0, 3.0, 1020.0])).tolist() == [0.0, 0.0, 1.0, 2.0, 512.0]


def test_each_finished_job_is_sized_once_not_at_every_decision(monkeypatch):
    # the drivers pass up to 1 000 finished jobs at every decision; re-testing each one each time was 11 % of a
    # Philly slice's simulation. The sizes the index sees stay those of the jobs in the window.
    from dataclasses import replace

    import dlsched.policy.gittins as gittins
    from dlsched.policy.base import ClusterView, JobView, NodeView, make_policy
    from dlsched.sim.throughput import LinearThroughput

    calls = []
    real = gittins.sized_by_run_time
    monkeypatch.setattr(gittins, "sized_by_run_time",
                        lambda job: (job.id.startswith("f") and calls.append(job.id)) or real(job))   # finished ones

    def duration_job(i, ran, gpus=1):
        return JobView(id=f"j{i}", submit_time=float(i), requested_gpus=gpus, max_gpus=gpus, run_time=ran,
                       speed=LinearThroughput(gpus))

    finished = tuple(replace(duration_job(k, 1000.0 + k), id=f"f{k}") for k in range(30))
    policy = make_policy("goodput")
    live = (duration_job(0, 0.0), duration_job(1, 0.0))
    cluster = ClusterView((NodeView("node0", 1),), now=9000.0, finished=finished)
    first = [policy.decide(live, cluster).gpus(j.id) for j in live]
    for _ in range(4):
        assert [policy.decide(live, cluster).gpus(j.id) for j in live] == first
    assert sorted(calls) == sorted(f.id for f in finished)
    later = finished[1:] + (replace(duration_job(99, 5000.0, gpus=4), id="f99"),)   # one ended, the oldest left
    policy.decide(live, replace(cluster, finished=later))
    assert len(calls) == 31 and calls[-1] == "f99"
    assert policy._finished_sizes(later) == [policy._age(f) for f in later]
