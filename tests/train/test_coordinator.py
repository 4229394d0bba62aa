from dlsched.train.coordinator import planned_samples
from dlsched.train.job import build_job

from .helpers import MLP


def test_planned_samples_is_per_epoch_times_epochs_unless_a_convergence_rule_may_end_sooner():
    assert planned_samples(build_job(MLP, {"num_samples": 96, "epochs": 3})) == 288
    assert planned_samples(build_job(MLP, {"num_samples": 96, "epochs": 3, "target_loss": 0.5})) is None
