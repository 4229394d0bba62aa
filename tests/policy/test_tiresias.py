from dlsched.policy.base import ClusterView, JobView, make_policy
from tests.sim.helpers import jcts, job


def test_tiresias_two_queue_las_hand_computed():
    # 1 GPU, threshold 15 GPU-s. A runs 10..30 and is demoted; B runs 30..50 and is demoted; C (Q0) runs 50..60;
    # then Q1 in submission order: A 60..80, B 80..100.
    jobs = [job("A", 0, 1, 40), job("B", 0, 1, 40), job("C", 0, 1, 10)]
    got = jcts(jobs, "tiresias", gpus_per_node=1, policy_args={"thresholds": (15.0,)})
    assert got == {"C": 60, "A": 80, "B": 100}


def test_tiresias_lets_small_jobs_pass_and_keeps_running_nodes():
    p = make_policy("tiresias")
    c = ClusterView.homogeneous(2, 2)
    old = JobView("old", 0, 1, attained_service=10, placement={"node1": 1})
    big = JobView("big", 1, 4)
    small = JobView("small", 2, 2)
    a = p.decide((old, big, small), c)
    assert a.gpus("big") == 0 and dict(a.jobs["old"].nodes) == {"node1": 1}
    assert dict(a.jobs["small"].nodes) == {"node0": 2}   # most free node first
