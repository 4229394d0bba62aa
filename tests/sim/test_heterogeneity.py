"""GPU types end to end: speed factors in the trace speed model, type-aware placement, a better JCT."""
import pytest

from dlsched.errors import UserError

from dlsched.policy.base import ClusterView, NodeView, make_policy
from dlsched.sim import SimConfig, Simulator, WorkloadJob, run
from dlsched.perf.pollux import load_app
from dlsched.sim.throughput import TraceThroughput, speed_factor
from dlsched.sim.type_blind import TypeBlind

# bert gains 3x on the fast type, ncf only 1.2x; the traces' own GPU is the slow type.
SPEEDS = {"fast/bert": 3.0, "fast/ncf": 1.2}
CLUSTER = ClusterView((NodeView("fast0", 1, "fast"), NodeView("slow0", 1, "slow")))
JOBS = [WorkloadJob("ncf", 0, 1, app="ncf", batch_size=256), WorkloadJob("bert", 0, 1, app="bert", batch_size=12)]


def test_speed_factor_lookup():
    speeds = {"k80": 0.5, "k80/bert": 0.25}
    assert speed_factor(speeds, "k80", "bert") == 0.25 and speed_factor(speeds, "k80", "ncf") == 0.5
    assert speed_factor(speeds, "v100", "bert") == 1.0 and speed_factor(speeds, None, "bert") == 1.0


def test_trace_throughput_applies_the_type_speed(data_dir):
    speed = TraceThroughput(load_app("bert"), 0, 1, tuple(SPEEDS.items()))
    assert speed.throughput(1, 1, 12, "fast") == pytest.approx(3.0 * speed.throughput(1, 1, 12, "slow"))
    assert speed.throughput(1, 1, 12) == speed.throughput(1, 1, 12, "slow") > 0


@pytest.mark.parametrize("policy", ["elastic", "goodput"])
def test_largest_speedup_gets_the_fast_type_and_jct_improves(data_dir, policy):
    sim = Simulator(JOBS, make_policy(policy), CLUSTER, SimConfig(gpu_speed=SPEEDS))
    alloc = sim.policy.decide(tuple(sim._make_view(j) for j in sim.jobs), CLUSTER)
    assert alloc.jobs["bert"].gpu_type == "fast" and alloc.jobs["ncf"].gpu_type == "slow"
    aware = run(JOBS, policy, CLUSTER, gpu_speed=SPEEDS)
    blind = run(JOBS, TypeBlind(make_policy(policy)), CLUSTER, gpu_speed=SPEEDS)
    # Type-blind placement puts the first job (ncf) on the first node (fast); bert crawls on the slow one.
    assert aware.jct()["bert"] < 0.5 * blind.jct()["bert"]
    assert aware.avg_jct < 0.6 * blind.avg_jct


@pytest.mark.parametrize("key", ["fats", "fast/berty", "fast/"])
def test_unknown_speed_entry_is_an_error(key):
    with pytest.raises(UserError, match=f"gpu_speed: entry {key}=2.0 needs a GPU type of the cluster"):
        Simulator(JOBS[:1], make_policy("tiresias"), CLUSTER, SimConfig(gpu_speed={key: 2.0}))
