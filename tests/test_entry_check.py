"""Submit-time check of a make_job entry's params (``dlsched.entry_check``), on real files, without importing them."""
import pytest

from dlsched.entry_check import check_entry
from dlsched.spec import SpecError

JOB = '''
def make_job(num_samples: int = 512, lr: float = 0.05, target_loss: float | None = None, name: str = "m",
             shuffle: bool = True, extra=None, tags: list[str] | None = None):
    pass
'''


@pytest.mark.parametrize("params, line", [
    ({"num_samples": "abc"}, "field params.num_samples: make_job() takes int, got 'abc'"),
    ({"num_samples": 2.5}, "field params.num_samples: make_job() takes int, got 2.5"),
    ({"num_samples": True}, "field params.num_samples: make_job() takes int, got True"),
    ({"lr": "fast"}, "field params.lr: make_job() takes float, got 'fast'"),
    ({"target_loss": "low"}, "field params.target_loss: make_job() takes float or None, got 'low'"),
    ({"shuffle": 1}, "field params.shuffle: make_job() takes bool, got 1"),
    ({"name": 3}, "field params.name: make_job() takes str, got 3"),
])
def test_a_param_of_the_wrong_simple_type_is_one_line_at_submit(tmp_path, params, line):
    """params {epochs: "abc"} for `epochs: int` was accepted; the job's total_samples became a string, the job
    failed with a TypeError from the runtime, and the service's loop raised on its progress in every round."""
    (tmp_path / "job.py").write_text(JOB)
    with pytest.raises(SpecError) as e:
        check_entry("job.py:make_job", params, tmp_path, "job.yaml")
    assert str(e.value) == f"job.yaml: {line}"


def test_params_that_fit_or_are_not_simply_annotated_pass(tmp_path):
    (tmp_path / "job.py").write_text(JOB)
    check_entry("job.py:make_job", {"num_samples": 64, "lr": 1, "target_loss": None, "name": "x", "shuffle": False,
                                    "extra": "anything", "tags": "not checked"}, tmp_path)
