"""An ensemble as a job kind of the shared simulator: the policy sizes its share, its demand follows its members."""
import pytest

from dlsched.policy.base import ClusterView, make_policy
from dlsched.policy.fleet import ModelProfile
from dlsched.sim.engine import SimConfig, Simulator
from dlsched.sim.ensemble_job import EnsembleWork
from dlsched.sim.fleet import Member
from dlsched.sim.workload import WorkloadJob


def _members(works):
    # one GPU each at 100 samples/s: FLEET runs them as one flotilla, one GPU per still-training member
    return tuple(Member(ModelProfile(f"m{i}", (100.0,)), w) for i, w in enumerate(works))


def _run(jobs, policy):
    seen = []
    sim = Simulator(jobs, make_policy(policy), ClusterView.homogeneous(1, 4), SimConfig(interval=60.0, restart_penalty=0.0),
                    on_progress=lambda t, done, total: seen.append((t, *(j.ngpus for j in sim.jobs))))
    return sim.run().jobs.set_index("id"), seen


def test_the_policy_shrinks_the_ensemble_as_its_members_converge():
    # Two members need 120 s, two 600 s; a 2-GPU job waits behind the ensemble under FIFO.
    ens = WorkloadJob("ens", 0.0, 4, ensemble=EnsembleWork(_members([12_000, 12_000, 60_000, 60_000]), restart_s=0.0))
    other = WorkloadJob("other", 0.0, 2, duration=600.0)
    res, seen = _run([ens, other], "fifo")
    by_t = {t: (e, o) for t, e, o in seen}
    assert by_t[60.0] == by_t[120.0] == (4, 0)      # all four members train; FIFO holds the other job back
    assert by_t[180.0] == (2, 2)                    # two converged at 180 s: demand 2, the freed GPUs go to it
    assert res.loc["other", "start"] == 180.0
    assert res.loc["ens", "finish"] == pytest.approx(660.0)   # the slow pair never moved: 60 s + 600 s


def test_an_elastic_policy_grows_the_ensemble_when_another_job_ends():
    ens = WorkloadJob("ens", 0.0, 4, ensemble=EnsembleWork(_members([60_000] * 4), restart_s=0.0))
    other = WorkloadJob("other", 0.0, 2, duration=120.0)
    res, seen = _run([other, ens], "elastic")
    first = next(e for t, o, e in seen if e)
    assert 0 < first < 4 and res.loc["other", "finish"] < res.loc["ens", "finish"]
    assert any(e == 4 and t > res.loc["other", "finish"] for t, o, e in seen)
