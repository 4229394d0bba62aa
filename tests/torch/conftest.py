"""The plain 1-worker, 2-epoch run of user_script.py without accumulation that the resize, sigkill and accumulation
tests compare against. It is read only, so it is trained once per test process; its users carry the
``plain_ref`` xdist group so that under ``--dist loadgroup`` they share one worker (and this one run)."""
from __future__ import annotations

import pytest

from tests.torch.test_elastic_script import start_script
from tests.train.helpers import finish


@pytest.fixture(scope="session")
def plain_ref(tmp_path_factory):
    """No checkpoints: a checkpoint is a save only, so a run without them has the same LR sequence and
    validation curve as one with (the runs compared against it resize, or lose a worker, and checkpoint)."""
    ref_dir = tmp_path_factory.mktemp("plain_ref") / "ref"
    finish(start_script(ref_dir, 1, "--epochs", "2", "--ckpt-every", "0"), timeout=300)
    return ref_dir
