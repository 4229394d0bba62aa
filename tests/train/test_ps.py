"""Parameter-server mode with real gloo processes, and Optimus' PAA block assignment."""
from __future__ import annotations

import numpy as np
import pytest

from dlsched.train.ps import paa_assign, run_parameter_server

from .helpers import MLP, finish, start_job, step_losses


def test_paa_balances_sizes_and_slices_big_blocks():
    sizes = [1000, 400, 300, 250, 40, 5, 5]
    chunks = paa_assign(sizes, 2)
    per_server = np.bincount([c.server for c in chunks], weights=[c.end - c.start for c in chunks])
    assert per_server.sum() == sum(sizes) and per_server.max() - per_server.min() <= 0.1 * sum(sizes)
    big = sorted((c.start, c.end) for c in chunks if c.block == 0)
    assert big[0][0] == 0 and big[-1][1] == 1000 and all(e - s <= 1000 for s, e in big)
    for b, size in enumerate(sizes):  # every position of every block placed exactly once
        covered = sorted((c.start, c.end) for c in chunks if c.block == b)
        assert covered[0][0] == 0 and covered[-1][1] == size
        assert all(a[1] == b_[0] for a, b_ in zip(covered, covered[1:]))


@pytest.mark.slow
def test_sync_ps_matches_allreduce_and_async_ps_learns(tmp_path):
    params = {"num_samples": 192, "batch_size": 16}
    ref = start_job(tmp_path / "allreduce", 1, "--param", "num_samples=192", "--param", "batch_size=16")
    sync = run_parameter_server(MLP, params, workers=2, servers=2, sync=True, global_batch=16, out_dir=tmp_path / "s")
    finish(ref)
    assert [r["samples"] for r in sync[0]] == [8] * 12
    np.testing.assert_allclose([r["loss"] for r in sync[0]], step_losses(tmp_path / "allreduce"), rtol=1e-4, atol=1e-5)
    asyn = run_parameter_server(MLP, params, workers=2, servers=1, sync=False, global_batch=16, out_dir=tmp_path / "a")
    assert sum(r["samples"] for w in asyn for r in w) == 192  # exactly-once shares
    losses = [r["loss"] for r in asyn[0]]
    assert np.mean(losses[-3:]) < np.mean(losses[:3])
