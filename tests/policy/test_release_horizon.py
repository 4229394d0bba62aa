import math

import pytest

from dlsched.policy.elastic import time_left
from dlsched.policy.release_horizon import release_horizons
from tests.policy.test_elastic import StepProfile, job, running


def test_release_horizon_waits_for_as_many_gpus_as_it_takes():
    # running jobs predicted to end in 40 s (1 GPU), 100 s (2 GPUs, the victim) and 3600 s (4 GPUs): taking 1 of
    # the victim's GPUs is undone at 40 s, taking 2 only at 3600 s (the 40 s job frees one), 6 never
    speed = StepProfile(allreduce=0.0)

    def run_for(i, g, seconds):
        return running(job(i, speed, remaining_samples=speed.throughput(g, 1, 128) * seconds, max_gpus=g), g, 128)

    jobs = [run_for(0, 1, 40.0), run_for(1, 2, 100.0), run_for(2, 4, 3600.0), job(3, speed)]
    releases = release_horizons(jobs, time_left)                             # W for g = 0 .. held - 1 GPUs kept
    assert set(releases) == {"j0", "j1", "j2"}                  # running jobs only
    assert releases["j1"].tolist() == pytest.approx([3600.0, 40.0])
    assert releases["j2"].tolist() == pytest.approx([math.inf, 100.0, 100.0, 40.0])   # others hold 3 GPUs
    assert releases["j0"].tolist() == pytest.approx([100.0])
    assert release_horizons(jobs[:1], time_left) == {}                # one running job: nothing frees
