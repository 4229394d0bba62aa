"""The job folder's lock (``train/fence.py``): one holder, passed from backend to coordinator, released by death."""
import os
import subprocess
import sys

from dlsched.train import fence, run
from tests.waiting import wait_until


def test_one_holder_at_a_time_and_death_releases_it(tmp_path):
    fd = fence.acquire(tmp_path)
    assert fd is not None and fence.is_held(tmp_path)
    assert fence.acquire(tmp_path) is None and fence.claim(tmp_path, wait_s=0.1) is None
    os.close(fd)
    assert not fence.is_held(tmp_path)
    # a child holding the lock it was handed (as the local backend starts a coordinator), then SIGKILLed
    fd = fence.acquire(tmp_path)
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", str(tmp_path)], pass_fds=(fd,))
    os.close(fd)
    try:
        assert fence.is_held(tmp_path)                      # the parent let go; the child holds it
        assert fence.holder(tmp_path, timeout_s=10).pid == child.pid
    finally:
        child.kill()
        child.wait()
    assert not fence.is_held(tmp_path) and fence.holder(tmp_path, timeout_s=1) is None


def test_claim_takes_the_passed_lock(tmp_path, monkeypatch):
    fd = fence.acquire(tmp_path)
    monkeypatch.setenv(fence.FD_ENV, str(fd))
    assert fence.claim(tmp_path) == fd and not os.get_inheritable(fd)
    assert fence.FD_ENV not in os.environ
    os.close(fd)


def test_a_second_coordinator_leaves_a_held_folder_untouched(tmp_path, monkeypatch, capsys):
    fd = fence.acquire(tmp_path)
    monkeypatch.setattr(fence, "CLAIM_WAIT_S", 0.1)
    try:
        before = sorted(p.name for p in tmp_path.iterdir())
        assert run.main(["--job-dir", str(tmp_path), "--entry", "examples/mlp.py:make_job", "--workers", "1"]) \
            == fence.EXIT_FENCED
        err = capsys.readouterr().err
        assert "another coordinator holds this job folder" in err and f"held by pid {os.getpid()} (parent" in err, err
        assert sorted(p.name for p in tmp_path.iterdir()) == before == ["coordinator.lock"]
    finally:
        os.close(fd)


CLAIM_AND_FORK = """
import multiprocessing as mp, sys, time
from dlsched.train import fence
assert fence.claim(sys.argv[1]) is not None
child = mp.get_context("fork").Process(target=time.sleep, args=(60,), daemon=True)
child.start()
print(child.pid, flush=True)
time.sleep(60)
"""


def test_a_process_the_coordinator_forks_does_not_hold_the_lock(tmp_path):
    """FLEET's members and producers are forked: each held the lock, so after the runtime was SIGKILLed the lock
    stayed held and the service adopted an orphaned member as the job's coordinator."""
    import psutil

    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    coordinator = subprocess.Popen([sys.executable, "-c", CLAIM_AND_FORK, str(tmp_path)], stdout=subprocess.PIPE,
                                   text=True, env=env)
    forked = None
    try:
        forked = psutil.Process(int(coordinator.stdout.readline()))
        lock = str(fence.lock_path(tmp_path).resolve())
        # the child closes it as it starts running (right after the fork: the pid may be printed before)
        wait_until(lambda: not [f for f in forked.open_files() if f.path == lock], 30)
        coordinator.kill()
        coordinator.wait()
        assert forked.is_running() and not fence.is_held(tmp_path)   # the coordinator's death freed the folder
    finally:
        coordinator.kill()
        coordinator.wait()
        if forked is not None:
            forked.kill()
