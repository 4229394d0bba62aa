"""GPU-time accounting across rounds: what a running job is charged when the wall clock jumps."""
import pytest

from dlsched.backends.recording import RecordingBackend
from dlsched.service.loop import LiveLoop
from dlsched.service.store import RUNNING, Store
from dlsched.spec import load_job_spec
from tests.service.conftest import cluster, job_yaml


def _two_gpu_job(tmp_path):
    """A loop on its own wall and monotonic clocks (lists to move), with a 2-GPU job started in its first round."""
    wall, mono = [1000.0], [50.0]
    store = Store(tmp_path / "s.db")
    loop = LiveLoop(store, RecordingBackend(), cluster("test-fifo", (2,)), tmp_path, clock=lambda: wall[0],
                    monotonic=lambda: mono[0])
    a = store.submit(load_job_spec(job_yaml("a", gpus=2)), now=wall[0])
    loop.round()
    return store, loop, a, wall, mono


def test_a_wall_clock_stepped_forward_charges_the_time_that_passed_not_the_jump(tmp_path):
    """An NTP step (or a resumed VM) of an hour between two rounds charged every running job an hour of GPU time."""
    store, loop, a, wall, mono = _two_gpu_job(tmp_path)
    assert store.get(a).state == RUNNING
    wall[0] += 10.0
    mono[0] += 10.0
    loop.round()
    assert (store.get(a).run_time, store.get(a).attained_service) == pytest.approx((10.0, 20.0))
    wall[0] += 3600.0 + 10.0      # the clock jumps an hour while 10 s pass
    mono[0] += 10.0
    loop.round()
    assert (store.get(a).run_time, store.get(a).attained_service) == pytest.approx((20.0, 40.0))
    wall[0] += 10.0
    mono[0] += 10.0
    loop.round()
    assert store.get(a).run_time == pytest.approx(30.0) and store.get(a).accounted_until == wall[0]


def test_a_cancelled_job_is_charged_up_to_its_stop_like_a_finished_one(tmp_path):
    """The cancel path ended the job without counting its time since the previous round: a cancelled job's GPU-TIME
    fell short of its RAN (end - start) by up to a round interval (3 s of 69 s seen on a 2 s-round service)."""
    from dlsched.service.store import CANCELLED

    store, loop, a, wall, mono = _two_gpu_job(tmp_path)
    wall[0] += 10.0
    mono[0] += 10.0
    loop.round()
    store.request_cancel(a)
    wall[0] += 7.0
    mono[0] += 7.0
    loop.round()
    job = store.get(a)
    assert job.state == CANCELLED and job.end_time == wall[0]
    assert (job.run_time, job.attained_service) == pytest.approx((17.0, 34.0))
    assert job.run_time == pytest.approx(job.end_time - job.start_time)
