import os
import subprocess
import sys


def test_cli_help_lists_commands():
    out = subprocess.run([sys.executable, "-m", "dlsched.cli", "--help"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "Usage" in out.stdout


def _dlsched(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "dlsched.cli", *args], capture_output=True, text=True, timeout=120)


def test_a_badly_typed_option_is_one_line_naming_the_option_and_the_value():
    for args, option, value in ((["simulate", "-w", "x.csv", "--nodes", "two"], "'--nodes'", "'two'"),
                                (["predict", "curve", "x.csv", "--budget=abc"], "'--budget'", "'abc'"),
                                # an argument's value was left out: "Invalid value for 'job_id': Input should be ..."
                                (["show", "abc"], "'job_id'", "(got 'abc')"),
                                (["cancel", "1", "2x"], "'job_ids'", "(got '2x')")):
        r = _dlsched(*args)
        assert r.returncode == 2 and r.stdout == "", r
        assert r.stderr.count("\n") == 1 and r.stderr.startswith("error: "), r.stderr
        assert option in r.stderr and value in r.stderr, r.stderr


def test_usage_errors_are_one_line_and_help_still_exits_zero():
    for args, words in ((["simulate", "--bogus"], "No such option: --bogus"),
                        (["simulate"], "Missing option '--workload'"),
                        (["nosuch"], "No such command 'nosuch'")):
        r = _dlsched(*args)
        assert r.returncode == 2 and r.stderr.count("\n") == 1 and words in r.stderr, r.stderr
    assert _dlsched("simulate", "--help").returncode == 0
    assert _dlsched("version").returncode == 0


def test_the_command_list_gives_each_summary_as_one_paragraph():
    """`dlsched --help` broke a summary where its docstring's source line ended ("checked here, then by the" / "service.")."""
    out = subprocess.run([sys.executable, "-m", "dlsched.cli", "--help"], capture_output=True, text=True, timeout=120,
                         env={**os.environ, "COLUMNS": "250"})
    assert out.returncode == 0, out.stderr
    assert "checked here, then by the service. Several files are all or none" in out.stdout, out.stdout
