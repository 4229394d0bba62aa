"""What the policy-quality benches (policy_quality.py, elastic_quality.py) share: the Pollux workloads' paths and the
checks of their common options. A bad value is argparse's one error line naming the option (exit 2), before any
simulation or worker process starts: they were tracebacks from the first run or the process pool."""
from __future__ import annotations

import argparse
from pathlib import Path

from dlsched.paths import shared_data


def workload_path(w: int) -> Path:
    """Pollux workload ``w`` (1-4): shared/data/pollux/workloads/workload-<w>.csv."""
    return shared_data() / "pollux" / "workloads" / f"workload-{w}.csv"


def check_quality_args(ap: argparse.ArgumentParser, args: argparse.Namespace, modes_option: str,
                       modes: list[str]) -> None:
    """``--policies`` registered, each of ``modes`` (the values of ``modes_option``) a remaining-work mode, and
    ``--workloads`` ones that exist."""
    from dlsched.errors import UserError
    from dlsched.policy.base import policy_names
    from dlsched.sim.remaining import parse_remaining

    known = policy_names()
    if unknown := [p for p in args.policies if p not in known]:
        ap.error(f"--policies: unknown {', '.join(unknown)}; known: {', '.join(known)}")
    for m in modes:
        try:
            parse_remaining(m)
        except UserError as e:   # "remaining: bad value ...": --remaining names itself, --modes says which it checks
            ap.error(f"--{e}" if modes_option == f"--{str(e).split(':')[0]}" else f"{modes_option}: {e}")
    if missing := [w for w in args.workloads if not workload_path(w).is_file()]:
        ap.error(f"--workloads: no workload {', '.join(map(str, missing))} (there are 1-4)")
