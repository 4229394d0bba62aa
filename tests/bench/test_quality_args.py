"""bench/policy_quality.py and bench/elastic_quality.py: a bad option value is argparse's one error line (exit 2)
naming the option, before any simulation; they were tracebacks from the first run or the process pool."""
import subprocess
import sys

import pytest

from dlsched.paths import REPO_ROOT


def _bench(script, *args):
    return subprocess.run([sys.executable, str(REPO_ROOT / "bench" / script), *args], capture_output=True, text=True,
                          cwd=REPO_ROOT, env={"PYTHONPATH": str(REPO_ROOT / "src"), "PATH": "/usr/bin:/bin"},
                          timeout=60)


@pytest.mark.parametrize("script, args, expected", [
    ("policy_quality.py", ("--modes", "noise:x"), "--modes: remaining: bad value 'noise:x'"),
    ("policy_quality.py", ("--policies", "nope"), "--policies: unknown nope"),
    ("policy_quality.py", ("--workloads", "5"), "--workloads: no workload 5"),
    ("policy_quality.py", ("--procs", "0"), "--procs: 0 is not >= 1"),
    ("policy_quality.py", ("--restart-penalty", "nan"), "--restart-penalty: nan"),
    ("policy_quality.py", ("--policy-args", "[1]"), "--policy-args: '[1]' is not a JSON object"),
    ("elastic_quality.py", ("--remaining", "oracel"), "--remaining: bad value 'oracel'"),
    ("elastic_quality.py", ("--workloads", "0"), "--workloads: no workload 0"),
    ("elastic_quality.py", ("--nodes", "2"), "--nodes: 2 4-GPU nodes cannot hold"),
])
def test_bad_value_is_one_error_line(script, args, expected):
    r = _bench(script, *args)
    assert r.returncode == 2 and "Traceback" not in r.stderr and f"error: {expected}" in r.stderr, r.stderr
    assert r.stdout == ""
