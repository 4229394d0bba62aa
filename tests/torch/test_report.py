"""``dlsched.torch.report``: what a training script passes it."""
from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest
import torch

import dlsched.torch as dt
from dlsched.errors import UserError
from dlsched.torch import _number
from tests.train.helpers import REPO


def test_numbers_of_every_kind_are_floats():
    assert [_number("m", v) for v in (1, 0.5, np.float32(0.25), np.int64(3), torch.tensor(2.0),
                                      torch.tensor([4.0]), torch.tensor(1.5, requires_grad=True), True)] == \
           [1.0, 0.5, 0.25, 3.0, 2.0, 4.0, 1.5, 1.0]


@pytest.mark.parametrize("value, shown", [
    ("abc", "acc='abc'"), (None, "acc=None"), ([1.0], r"acc=\[1.0\]"), (torch.zeros(2), r"acc=a tensor of shape \(2,\)"),
])
def test_anything_else_is_one_line_naming_the_metric_and_value(value, shown):
    with pytest.raises(UserError, match=f"report: {shown} is not a number"):
        dt.report(acc=value)   # raised before any session: this process joins no job


def test_a_script_stops_with_that_line_last(tmp_path):
    """It was ``ValueError: could not convert string to float`` (or ``a Tensor with 2 elements cannot be
    converted to Scalar``), naming neither the metric nor the value."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("DLSCHED")}
    env["PYTHONPATH"] = str(REPO / "src")
    code = "import dlsched.torch as dt; dt.init(); dt.report(val_acc='0.9')"
    r = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 1
    assert r.stderr.strip().splitlines()[-1].endswith("UserError: report: val_acc='0.9' is not a number (give a float, "
                                                      "an int, a numpy scalar or a one-element tensor)")
