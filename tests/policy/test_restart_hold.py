"""A running job keeps its allocation until it has trained as long as its last (re)start paused it
(``policy/restart_hold.py``), under the elastic DP and against a newcomer without a speed model.

The live report: 2 nodes x 2 slots, ``policy: elastic``, ``interval_s: 1``; a 1-GPU job was started and stopped four
times in 30 s at the same step (each time before its first step), a 3-GPU job pre-empted twice in its first 30 s.
``test_the_reported_churn_*`` replays it on hand-made jobs with the live service's physics (a change pauses a job
PAUSE s before its first step; a job has no speed model until its first step, so the DP's rigid path places it
first), deterministically."""
from dataclasses import dataclass, replace

import pytest

from dlsched.policy import ClusterView, JobView, NodeView, make_policy
from dlsched.policy.restart_hold import held_here, settling
from dlsched.round import Move, Preempt, Resize, Start, schedule


@dataclass(frozen=True)
class Speed:
    """Samples/s: 100 g^alpha, 15 % less per extra node."""

    alpha: float = 1.0

    def throughput(self, num_gpus, num_nodes, global_batch, gpu_type=None):
        return 100.0 * num_gpus ** self.alpha / (1.0 + 0.15 * (num_nodes - 1))

    def efficiency(self, global_batch):
        return 1.0


def view(i, gpus=0, left=1e6, lo=1, hi=1, changed=None, settled=None, speed=Speed(), submit=0.0, batch=32, **kw):
    attrs = {"restart_s": 2.0} | ({"changed_at": changed, "settled_at": settled} if changed is not None else {})
    return JobView(id=i, submit_time=submit, requested_gpus=lo, batch_size=batch, min_gpus=lo, max_gpus=hi,
                   placement={"n0": gpus} if gpus else {}, current_batch_size=batch, remaining_samples=left,
                   speed=speed, attrs=attrs, **kw)


ONE = ClusterView((NodeView("n0", 1),), 0.0)


def at(now, cluster=ONE):
    return ClusterView(cluster.nodes, now)


def test_settling_until_it_has_trained_as_long_as_its_pause():
    assert not settling(view("a", 1), 100.0)                           # a driver that says nothing holds nothing
    assert not settling(view("a", 0, changed=99.0), 100.0)             # waiting: nothing to hold
    assert settling(view("a", 1, changed=90.0), 1e9)                   # no step since the change: still restarting
    paused = view("a", 1, changed=90.0, settled=93.0)                  # a 3 s pause
    assert [settling(paused, t) for t in (93.0, 95.9, 96.0, 100.0)] == [True, True, False, False]
    assert not settling(view("a", 1, changed=90.0, settled=90.0), 90.0)   # no pause (an ensemble's share)
    assert held_here(paused, 1, 1, 95.0) and not held_here(paused, 2, 2, 95.0)   # an operator's range wins


def test_a_job_that_just_started_is_not_preempted_for_a_more_urgent_one_until_it_has_paid():
    # b is ten times shorter: its urgency weight wins the one GPU from a (long) as soon as a has paid its start
    a_left, b = 1e7, view("b", 0, left=1e6, submit=1.0)
    for now, settled, kept in [(91.0, None, True), (200.0, None, True), (94.0, 93.0, True), (95.9, 93.0, True),
                               (96.0, 93.0, False)]:
        a = view("a", 1, left=a_left, changed=90.0, settled=settled)
        alloc = make_policy("elastic").decide((a, b), at(now))
        assert (alloc.gpus("a"), alloc.gpus("b")) == ((1, 0) if kept else (0, 1)), (now, settled)
    assert make_policy("elastic").decide((view("a", 1, left=a_left), b), at(91.0)).gpus("b") == 1   # no hold: as before


def test_a_held_job_is_neither_grown_nor_shrunk_nor_given_another_batch():
    four = ClusterView((NodeView("n0", 4),), 0.0)
    lone = view("a", 1, lo=1, hi=4, changed=10.0, min_batch_size=16, max_batch_size=256, batch=64)
    held = make_policy("elastic").decide((lone,), at(11.0, four)).jobs["a"]
    assert (held.num_gpus, held.batch_size) == (1, 64)
    unheld = view("a", 1, lo=1, hi=4, min_batch_size=16, max_batch_size=256, batch=64)
    assert make_policy("elastic").decide((unheld,), at(11.0, four)).gpus("a") == 4   # it grows onto the idle GPUs


def test_an_operators_resize_overrides_the_hold():
    four = ClusterView((NodeView("n0", 4),), 0.0)
    asked = view("a", 1, lo=3, hi=3, changed=10.0)                     # `dlsched resize -n 3` narrows the range
    assert make_policy("elastic").decide((asked,), at(11.0, four)).gpus("a") == 3


def test_a_newcomer_without_a_speed_model_waits_for_the_held_jobs_gpus():
    """The DP's rigid path placed a job with no speed model yet first, ahead of the running jobs: it took the GPUs
    of jobs that had just started (restarted with no step made)."""
    four = ClusterView((NodeView("n0", 2), NodeView("n1", 2)), 0.0)
    a = replace(view("a", 0, lo=1, hi=3), placement={"n0": 2, "n1": 1},
                attrs={"restart_s": 2.0, "changed_at": 10.0, "settled_at": None})
    new = view("new", 0, lo=2, hi=2, speed=None, submit=5.0)
    assert make_policy("elastic").decide((a, new), at(12.0, four)).gpus("new") == 0
    a_paid = replace(a, attrs={"restart_s": 2.0, "changed_at": 10.0, "settled_at": 13.0})
    alloc = make_policy("elastic").decide((a_paid, new), at(16.0, four))
    assert alloc.gpus("new") == 2 and alloc.gpus("a") <= 2
    # one without a speed model that is itself still starting keeps its GPUs against an older one without
    starting = view("young", 2, lo=2, hi=2, speed=None, submit=9.0, changed=11.0)
    old = view("old", 0, lo=3, hi=3, speed=None, submit=1.0)
    alloc = make_policy("elastic").decide((old, starting), at(12.0, four))
    assert (alloc.gpus("young"), alloc.gpus("old")) == (2, 0)
    alloc = make_policy("elastic").decide((old, view("young", 2, lo=2, hi=2, speed=None, submit=9.0)), at(12.0, four))
    assert (alloc.gpus("young"), alloc.gpus("old")) == (0, 3)         # FIFO, as before, once it has no hold


PAUSE = 3.0


def replay(arrivals, hold: bool, rounds: int = 40) -> list[tuple]:
    """Rounds every second on 2 nodes x 2 GPUs under ``elastic``; a start or resize pauses the job PAUSE s before
    its first step, and it has no speed model before its first step (the live service's view of it). Returns the
    changes: (round, kind, job, seconds it had trained since its last change, or None: no step made)."""
    cluster = ClusterView((NodeView("n0", 2), NodeView("n1", 2)), 0.0)
    policy, jobs, changes = make_policy("elastic"), {}, []
    for t in range(rounds):
        for at_t, name, lo, hi, alpha in arrivals:
            if at_t == t:
                jobs[name] = dict(lo=lo, hi=hi, speed=Speed(alpha), left=2e6, nodes={}, changed=None, first=None,
                                  stepped=False, submit=float(t))
        views = [JobView(id=n, submit_time=j["submit"], requested_gpus=j["lo"], batch_size=32, min_gpus=j["lo"],
                         max_gpus=j["hi"], placement=j["nodes"], current_batch_size=32, remaining_samples=j["left"],
                         speed=j["speed"] if j["stepped"] else None,
                         attrs={"restart_s": 2.0} | ({"changed_at": j["changed"], "settled_at": j["first"]}
                                                     if hold and j["nodes"] else {}))
                 for n, j in jobs.items()]
        for a in schedule(policy, views, ClusterView(cluster.nodes, float(t))).actions:
            j = jobs[a.job_id]
            trained = None if j["first"] is None else t - j["first"]
            if isinstance(a, Preempt):
                changes.append((t, "preempt", a.job_id, trained))
                j["nodes"], j["changed"], j["first"] = {}, None, None
            elif isinstance(a, (Start, Resize, Move)):
                if isinstance(a, (Resize, Move)):
                    changes.append((t, type(a).__name__.lower(), a.job_id, trained))
                j["nodes"], j["changed"], j["first"] = dict(a.nodes), float(t), None
        for j in jobs.values():
            if j["nodes"] and t + 1 >= j["changed"] + PAUSE:
                j["first"] = j["changed"] + PAUSE if j["first"] is None else j["first"]
                j["stepped"] = True
                g = sum(j["nodes"].values())
                j["left"] -= j["speed"].throughput(g, len(j["nodes"]), 32) * min(1.0, t + 1 - j["first"])
    return changes


# job 7 (1 GPU, rigid), el2 (1-3 GPUs, elastic), rigid3 (3 GPUs): (arrival round, name, min, max GPUs, scaling)
REPORTED = [(0, "rigid3", 3, 3, 1.0), (2, "job7", 1, 1, 1.0), (4, "el2", 1, 3, 0.8)]
OTHER_ORDERS = [[(0, "job7", 1, 1, 1.0), (3, "el2", 1, 3, 0.8), (6, "rigid3", 3, 3, 1.0)],
                [(0, "job7", 1, 1, 1.0), (0, "el2", 1, 3, 0.8), (0, "rigid3", 3, 3, 1.0)]]


def test_the_reported_churn_replayed_without_the_hold():
    """What the operator saw, before the hold: job7 stopped before it trained, rigid3 started again a round after
    its pre-emption and pre-empted again before its first step."""
    changes = replay(REPORTED, hold=False)
    assert (5, "preempt", "job7", 0.0) in changes and (7, "preempt", "rigid3", None) in changes, changes
    assert sum(1 for c in changes if c[1] == "preempt" and c[2] == "rigid3") == 2


@pytest.mark.parametrize("arrivals", [REPORTED, *OTHER_ORDERS])
def test_with_the_hold_no_job_is_changed_before_it_has_trained_as_long_as_its_pause(arrivals):
    changes = replay(arrivals, hold=True)
    assert changes, "the DP still moves jobs (it learns their speeds); just not before they have paid"
    assert all(trained is not None and trained >= PAUSE for _, _, _, trained in changes), changes
