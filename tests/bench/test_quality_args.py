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


@pytest.mark.parametrize("args", [("--policies", "nope"), ("--workloads", "7")])
def test_the_shared_options_are_one_check_in_both_benches(args, monkeypatch, capsys):
    """The two benches each had their own copy of these checks (_check_args); bench/quality_args.py is the one
    both call, so they refuse a bad value in the same words."""
    monkeypatch.syspath_prepend(str(REPO_ROOT / "bench"))
    import argparse

    from quality_args import check_quality_args

    ap = argparse.ArgumentParser(prog="bench")
    ns = argparse.Namespace(policies=["tiresias"], workloads=[1], modes=["predicted"])
    setattr(ns, args[0][2:], [args[1]] if args[0] == "--policies" else [int(args[1])])
    with pytest.raises(SystemExit):
        check_quality_args(ap, ns, "--modes", ns.modes)
    # the list after "known:" is the registry's: this process may hold the service tests' test-only policies
    lines = [r.strip().splitlines()[-1].split(": error: ", 1)[1].split("; known:")[0] for r in
             [capsys.readouterr().err, *(_bench(script, *args).stderr for script in ("policy_quality.py",
                                                                                      "elastic_quality.py"))]]
    assert lines[0] == lines[1] == lines[2] and lines[0].startswith(args[0]), lines


def test_per_app_rows_add_up_to_the_workload():
    """``--per-app`` (where an avg JCT is lost): one row per application of the run, its jobs summing to the
    workload's and its JCT shares to 1."""
    from dlsched.paths import shared_data

    r = _bench("policy_quality.py", "--policies", "fifo", "--modes", "none", "--workloads", "3", "--procs", "1",
               "--per-app")
    assert r.returncode == 0, r.stderr
    rows = [line.split() for line in r.stdout.split("JCT share", 1)[1].strip().splitlines()]
    apps = {}
    for line in (shared_data() / "pollux" / "workloads" / "workload-3.csv").read_text().splitlines()[1:]:
        app = line.split(",")[2]
        apps[app] = apps.get(app, 0) + 1
    assert {row[3]: int(row[4]) for row in rows} == apps
    assert sum(float(row[-1]) for row in rows) == pytest.approx(1.0, abs=0.02)
