"""The guard process the Ray backend starts each runtime under (``python -m dlsched.ray.host --guard -- CMD``)."""
import signal
import subprocess
import sys

import pytest


def _guarded(code: str) -> int:
    return subprocess.run([sys.executable, "-m", "dlsched.ray.host", "--guard", "--", sys.executable, "-c", code],
                          timeout=60).returncode


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGSEGV])
def test_a_runtime_killed_by_a_signal_is_one_for_the_guards_parent_too(sig):
    # the backend resumes a killed runtime (returncode < 0) and fails one that exited non-zero; exit(-9) read 247
    assert _guarded(f"import os; os.kill(os.getpid(), {int(sig)})") == -sig


def test_a_runtimes_exit_code_passes_through():
    assert _guarded("raise SystemExit(3)") == 3
