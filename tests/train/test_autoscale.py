import pytest

from dlsched.train.autoscale import (LinearUtility, ScheduleConfig, StepUtility, StragglerDetector, next_worker_count,
                                     passes_efficiency, passes_utility, scaling_efficiency)


def test_scaling_efficiency_definition():
    # 4 workers at 400/s (r_k = 100/s each); going to 8 gives 640/s: marginal 60/s per worker = 0.6 of average
    assert scaling_efficiency(400, 640, 4, 4) == pytest.approx(0.6)
    assert passes_efficiency(400, 640, 4, 4, threshold=0.1)
    assert not passes_efficiency(400, 420, 4, 4, threshold=0.1)


def test_utility_vs_cost():
    u = LinearUtility(y0=10.0, x0=3600.0)  # worth 10 now, 0 after an hour
    # halving step time on 2x workers saves 900 s = 2.5 utility for 0 extra cost (same worker-seconds)
    assert passes_utility(u, 0, 1000, 1.8, 4, 0.9, 8, price=1 / 3600)
    # no speed-up: pure extra cost
    assert not passes_utility(u, 0, 1000, 1.8, 4, 1.8, 8, price=1 / 3600)
    step = StepUtility(values=(10.0, 5.0), ends=(100.0, 200.0))
    assert (step(50), step(150), step(250)) == (10.0, 5.0, -10.0)
    with pytest.raises(ValueError):
        StepUtility(values=(5.0, 10.0), ends=(100.0, 200.0))


def test_schedule_scales_out_then_settles_at_first_failing_pair():
    cfg = ScheduleConfig(spawn_size=4, max_workers=16, threshold=0.1, min_consecutive_passes=1,
                         min_batches_for_staying=0)
    assert next_worker_count({4: (400, 200)}, cfg) == 8
    assert next_worker_count({4: (400, 200), 8: (760, 200)}, cfg) == 12
    # 8 -> 12 barely helps: stay at 8
    assert next_worker_count({4: (400, 200), 8: (760, 200), 12: (770, 200)}, cfg) == 8
    # nothing helped from the smallest count: scale in below it
    assert next_worker_count({8: (800, 200), 12: (805, 200)}, ScheduleConfig(min_consecutive_passes=1)) == 4
    # the paper's default (3 consecutive passes needed) scales in when an early pair fails
    assert next_worker_count({4: (400, 200), 8: (760, 200), 12: (770, 200)}, ScheduleConfig(spawn_size=2)) == 2
    # too few batches measured at the next count: go there first before settling
    few = ScheduleConfig(spawn_size=4, min_consecutive_passes=1, min_batches_for_staying=100)
    assert next_worker_count({4: (400, 200), 8: (760, 200), 12: (770, 10)}, few) == 12


def test_straggler_ewma_flags_persistently_slow_worker_not_master():
    det = StragglerDetector()
    flagged = []
    for _ in range(40):
        flagged = det.update({0: 100.0, 1: 100.0, 2: 50.0, 3: 95.0})
    assert flagged == [2]
    det2 = StragglerDetector()
    assert det2.update({0: 10.0, 1: 100.0, 2: 100.0}) == []  # master never flagged
    once = StragglerDetector()
    once.update({0: 100.0, 1: 100.0, 2: 100.0})
    assert once.update({0: 100.0, 1: 100.0, 2: 10.0}) == []  # one slow step is smoothed away (EWMA 0.91)
