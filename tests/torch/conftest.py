"""The plain 1-worker, 2-epoch run of user_script.py without accumulation that the resize, sigkill and accumulation
tests compare against. It is read only, so it is trained once per session: under ``--dist loadfile`` this file's and
test_elastic_script.py's users land on two xdist workers, and the first to ask trains it for both (a lock in the
workers' shared temporary folder; the other waits on it)."""
from __future__ import annotations

import fcntl
import os
import shutil

import pytest

from tests.torch.test_elastic_script import start_script
from tests.train.helpers import finish


@pytest.fixture(scope="session")
def plain_ref(tmp_path_factory):
    """No checkpoints: a checkpoint is a save only, so a run without them has the same LR sequence and
    validation curve as one with (the runs compared against it resize, or lose a worker, and checkpoint)."""
    base = tmp_path_factory.getbasetemp()
    shared = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base   # xdist: pytest-N/, the workers' parent
    folder, ref_dir = shared / "plain_ref", shared / "plain_ref" / "ref"
    with open(shared / "plain_ref.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)   # released when the file closes, or its process ends
        if not (folder / "trained").exists():   # none yet, or a worker's run that failed: trained (again) here
            shutil.rmtree(folder, ignore_errors=True)
            folder.mkdir()
            finish(start_script(ref_dir, 1, "--epochs", "2", "--ckpt-every", "0"), timeout=300)
            (folder / "trained").touch()
    return ref_dir
