import pytest

from dlsched.errors import UserError
from dlsched.policy.base import ClusterView
from dlsched.sim.generator import generate
from dlsched.perf.pollux import load_app

CLUSTER = ClusterView.homogeneous(1, 4)


def test_load_sets_the_arrival_rate_and_batches_follow_the_choice(data_dir):
    light = generate(6, 0.2, CLUSTER, ("cifar10", "ncf"), "initial", seed=1)
    heavy = generate(6, 2.0, CLUSTER, ("cifar10", "ncf"), "initial", seed=1)
    assert [j.app for j in light] == [j.app for j in heavy]                    # same jobs, same seed
    assert heavy[-1].submit_time == pytest.approx(light[-1].submit_time / 10, rel=0.05, abs=2)
    assert all(j.batch_size == load_app(j.app).init_batch_size and j.requested_gpus == 1 for j in light)
    traced = generate(6, 1.0, CLUSTER, ("cifar10",), "traced", seed=2)
    assert all(b in load_app("cifar10").batch_sizes for b in (j.batch_size for j in traced))


@pytest.mark.parametrize("kw, field", [({"batch": "huge"}, "batch"), ({"apps": ("mnist",)}, "apps"),
                                       ({"load": 0.0}, "load")])
def test_bad_knobs_are_one_clear_error(kw, field):
    args = {"num_jobs": 3, "load": 1.0, "cluster": CLUSTER, "apps": ("cifar10",), "batch": "initial", **kw}
    with pytest.raises(UserError, match=field):
        generate(**args)
