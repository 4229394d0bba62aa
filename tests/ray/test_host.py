"""The guard process the Ray backend starts each runtime under (``python -m dlsched.ray.host --guard -- CMD``)."""
import signal
import subprocess
import sys

import psutil
import pytest

from tests.waiting import process_alive, wait_until


def _guarded(code: str) -> int:
    return subprocess.run([sys.executable, "-m", "dlsched.ray.host", "--guard", "--", sys.executable, "-c", code],
                          timeout=60).returncode


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGSEGV])
def test_a_runtime_killed_by_a_signal_is_one_for_the_guards_parent_too(sig):
    # the backend resumes a killed runtime (returncode < 0) and fails one that exited non-zero; exit(-9) read 247
    assert _guarded(f"import os; os.kill(os.getpid(), {int(sig)})") == -sig


def test_a_runtimes_exit_code_passes_through():
    assert _guarded("raise SystemExit(3)") == 3


def test_a_runtime_dies_with_its_guard_even_when_the_guard_is_sigkilled(tmp_path):
    """An actor's core worker that exits on its raylet's death SIGKILLs its children: the guard. The runtime, in its own
    session, must not outlive it (a lost node's coordinator held its job folder for minutes and fenced the resume)."""
    pid_file = tmp_path / "runtime.pid"
    code = f"import os, time, pathlib; pathlib.Path({str(pid_file)!r}).write_text(str(os.getpid())); time.sleep(600)"
    guard = subprocess.Popen([sys.executable, "-m", "dlsched.ray.host", "--guard", "--", sys.executable, "-c", code])
    try:
        runtime = int(wait_until(lambda: pid_file.exists() and pid_file.read_text(), 60, "the runtime's pid"))
        assert psutil.Process(runtime).ppid() == guard.pid
        guard.kill()
        guard.wait(timeout=60)
        wait_until(lambda: not process_alive(runtime), 30, "the runtime to die with its guard")
    finally:
        guard.kill()


def test_a_stopped_guard_waits_for_its_runtimes_checkpoint_past_three_seconds(tmp_path):
    """A requested stop (SIGTERM) gives the runtime the grace its stopper allows (the backend's STOP_GRACE_S, by
    SIGKILLing the guard when it is over): the guard's own 3 s killed a runtime still checkpointing."""
    ready, done = tmp_path / "ready", tmp_path / "checkpointed"
    code = (f"import pathlib, signal, sys, time\n"
            f"def bye(*_):\n    time.sleep(5); pathlib.Path({str(done)!r}).touch(); sys.exit(143)\n"
            f"signal.signal(signal.SIGTERM, bye)\nsignal.pthread_sigmask(signal.SIG_UNBLOCK, {{signal.SIGTERM}})\n"
            f"pathlib.Path({str(ready)!r}).touch()\ntime.sleep(600)")   # as the runtime: unblocked once handled
    guard = subprocess.Popen([sys.executable, "-m", "dlsched.ray.host", "--guard", "--", sys.executable, "-c", code])
    try:
        wait_until(ready.exists, 60, "the runtime's start")
        guard.send_signal(signal.SIGTERM)
        assert guard.wait(timeout=120) == 143
        assert done.exists()
    finally:
        guard.kill()


def test_a_hosted_process_ends_with_its_actor_though_not_its_child():
    """A worker forked from its node's server (``dlsched.ray.node_forkserver``) is that server's child, not its actor's:
    it ends when the actor's process does, and at once when that has already ended."""
    actor = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    code = "import sys, time; from dlsched.ray.host import exit_with; exit_with(int(sys.argv[1])); time.sleep(600)"
    hosted = subprocess.Popen([sys.executable, "-c", code, str(actor.pid)])
    try:
        with pytest.raises(subprocess.TimeoutExpired):   # its actor lives: so does it
            hosted.wait(timeout=3)
        actor.kill()
        actor.wait()
        assert hosted.wait(timeout=60) == 3
        assert subprocess.run([sys.executable, "-c", code, str(actor.pid)], timeout=60).returncode == 3
    finally:
        actor.kill()
        hosted.kill()
