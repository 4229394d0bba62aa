from dlsched.policy.base import ClusterView, JobView, make_policy
from tests.sim.helpers import jcts, job


def test_fifo_head_of_line_blocking_hand_computed():
    # 1 node x 2 GPUs, decisions every 10 s. A takes both GPUs 10..110; B and C wait behind it.
    jobs = [job("A", 0, 2, 100), job("B", 0, 1, 20), job("C", 5, 1, 10)]
    assert jcts(jobs, "fifo") == {"A": 110, "B": 130, "C": 115}


def test_fifo_is_non_preemptive_and_strict():
    p = make_policy("fifo")
    c = ClusterView.homogeneous(1, 2)
    running = JobView("late", submit_time=9, requested_gpus=1, placement={"node0": 1})
    head = JobView("head", submit_time=0, requested_gpus=2)
    small = JobView("small", submit_time=5, requested_gpus=1)
    a = p.decide((head, running, small), c)
    assert a.gpus("late") == 1 and a.gpus("head") == 0 and a.gpus("small") == 0   # strict: small may not pass
    b = make_policy("fifo", backfill=True).decide((head, running, small), c)
    assert b.gpus("small") == 1
