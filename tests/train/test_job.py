"""``train/job.py``: a make_job factory's job is checked as it is built, one line naming the field and value."""
import re
from pathlib import Path

import pytest

from dlsched.errors import UserError
from dlsched.train.job import build_job

MLP = str(Path(__file__).resolve().parents[2] / "examples" / "mlp.py") + ":make_job"


@pytest.mark.parametrize("params, line", [
    ({"epochs": -1}, "epochs must be >= 1, got -1"),   # trained an epoch, then "finished" with a negative total
    ({"epochs": 0}, "epochs must be >= 1, got 0"),
    ({"batch_size": 0}, "batch_size must be >= 1, got 0"),
])
def test_a_job_with_no_epochs_or_no_batch_is_refused_naming_the_field(params, line):
    with pytest.raises(UserError) as e:
        build_job(MLP, {"num_samples": 64, **params})
    assert str(e.value) == f"--entry {MLP!r}: {line}"


def test_a_job_with_a_target_loss_still_builds():
    job = build_job(MLP, {"num_samples": 64, "target_loss": 0.5})
    assert job.epochs == 1 and job.target_loss == 0.5


def test_a_make_job_that_raises_on_its_params_is_one_line_naming_them_and_its_line(tmp_path):
    """Seen: `dlsched train ... --param num_samples=-5` printed a 15-line traceback through the runtime's frames."""
    with pytest.raises(UserError) as e:
        build_job(MLP, {"num_samples": -5})
    assert str(e.value).startswith(f"--entry {MLP!r}: make_job(num_samples=-5) raised RuntimeError: ")
    # where in the job file, not in torch's frames
    assert re.search(rf" \({re.escape(MLP.removesuffix(':make_job'))}:\d+\)$", str(e.value)), str(e.value)
