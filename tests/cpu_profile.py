"""Where the suite's CPU goes, per test: an opt-in pytest plugin, and its report.

    DLSCHED_TEST_CPU=/tmp/cpu PYTEST_ADDOPTS="-p tests.cpu_profile" make test
    python -m tests.cpu_profile /tmp/cpu            # per file, then the costliest tests

Each pytest process (every xdist worker) moves itself into its own cgroup-v1 cpuacct group, so a test's CPU is
its whole process tree's: the jobs, services and Ray daemons it starts, orphans too (``RUSAGE_CHILDREN`` counts
only children waited for: ~500 of a full run's ~2 050 CPU-s were in processes pytest never waits for). A test's
row is setup + call + teardown: a module fixture's start is its first test's, its stop its last one's. Needs a
writable ``/sys/fs/cgroup/cpuacct`` (root); without one the plugin says so and records nothing.
"""
from __future__ import annotations

import json
import os
import sys
import time
from collections import defaultdict
from pathlib import Path

import pytest

CGROUP_ROOT = Path("/sys/fs/cgroup/cpuacct")
_group: Path | None = None


def _usage() -> float:
    return int((_group / "cpuacct.usage").read_text()) / 1e9


def pytest_configure(config):
    global _group
    out = os.environ.get("DLSCHED_TEST_CPU")
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if not out or (worker is None and config.getoption("numprocesses", None)):
        return   # not asked, or xdist's controller (it runs no test)
    group = CGROUP_ROOT / f"dlsched-tests-{os.getppid() if worker else os.getpid()}" / (worker or "main")
    try:
        group.mkdir(parents=True, exist_ok=True)
        (group / "cgroup.procs").write_text(str(os.getpid()))
    except OSError as e:
        print(f"tests.cpu_profile: no cpuacct group at {group} ({e}): nothing recorded", file=sys.stderr)
        return
    _group = group
    Path(out).mkdir(parents=True, exist_ok=True)
    config._cpu_profile = open(Path(out) / f"{worker or 'main'}-{os.getpid()}.jsonl", "a", buffering=1)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    if _group is None:
        yield
        return
    cpu, wall = _usage(), time.monotonic()
    yield
    item.config._cpu_profile.write(json.dumps({"test": item.nodeid, "cpu_s": round(_usage() - cpu, 2),
                                               "wall_s": round(time.monotonic() - wall, 2)}) + "\n")


def report(folder: Path, tests: int = 30) -> str:
    rows = [json.loads(line) for f in sorted(folder.glob("*.jsonl")) for line in f.read_text().splitlines()]
    files = defaultdict(lambda: [0.0, 0.0, 0])
    for r in rows:
        f = files[r["test"].split("::")[0]]
        f[0], f[1], f[2] = f[0] + r["cpu_s"], f[1] + r["wall_s"], f[2] + 1
    lines = [f"{sum(f[0] for f in files.values()):.0f} CPU-s in {len(rows)} tests (test wall summed: "
             f"{sum(f[1] for f in files.values()):.0f} s)", "", "   CPU-s  wall-s  tests  file"]
    lines += [f"{c:8.1f} {w:7.0f} {n:6d}  {name}" for name, (c, w, n) in sorted(files.items(), key=lambda kv: -kv[1][0])]
    lines += ["", "   CPU-s  wall-s  test"]
    lines += [f"{r['cpu_s']:8.1f} {r['wall_s']:7.0f}  {r['test']}" for r in sorted(rows, key=lambda r: -r["cpu_s"])[:tests]]
    return "\n".join(lines)


if __name__ == "__main__":
    print(report(Path(sys.argv[1])))
