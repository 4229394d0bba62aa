from dlsched.train.coordinator import planned_samples
from dlsched.train.job import build_job

from .helpers import MLP


def test_planned_samples_is_per_epoch_times_epochs_unless_a_convergence_rule_may_end_sooner():
    assert planned_samples(build_job(MLP, {"num_samples": 96, "epochs": 3})) == 288
    assert planned_samples(build_job(MLP, {"num_samples": 96, "epochs": 3, "target_loss": 0.5})) is None


def test_the_spec_lr_is_the_lr_at_the_spec_batch_not_the_job_default_batch(tmp_path):
    # mlp's default batch is 16: lr 0.05 given at batch 64 once ran at 0.05 * 64 / 16 = 0.2
    from dlsched.train.coordinator import Coordinator, Options

    opts = Options(job_dir=tmp_path, entry=MLP, workers=1, batch_size=64, reference_batch=64, params={"lr": 0.05})
    coordinator = Coordinator(opts)
    try:
        assert coordinator._initial_state().ramp.lr(0) == 0.05
        moved = Coordinator(Options(job_dir=tmp_path / "b", entry=MLP, workers=1, batch_size=128, reference_batch=64,
                                    params={"lr": 0.05}))
        assert moved._initial_state().ramp.lr(0) == 0.1  # a scheduler-chosen batch scales from the spec's
    finally:
        coordinator.progress.close()
