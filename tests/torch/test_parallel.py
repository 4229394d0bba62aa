"""``ElasticDataParallel``'s refusals of DDP calls it cannot honour: one line naming the call and what to use."""
from __future__ import annotations

import pytest
from torch import nn

import dlsched.torch as dt
from dlsched.errors import UserError


def test_no_sync_points_to_max_local_batch():
    model = dt.ElasticDataParallel(nn.Linear(4, 1))
    with pytest.raises(UserError, match=r"model.no_sync\(\) is not supported: accumulate with .*max_local_batch"):
        with model.no_sync():
            pass
