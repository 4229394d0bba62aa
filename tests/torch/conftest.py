"""The plain 1-worker, 2-epoch run of user_script.py without accumulation that the resize, sigkill and accumulation
tests compare against. It is read only, so it is trained once per test process (each xdist worker that runs one
of its users: under ``--dist loadfile`` this file's and test_elastic_script.py's may land on two)."""
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
