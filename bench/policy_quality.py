"""Policy quality: avg JCT and makespan per policy on Pollux workloads 1-4 (16x4 GPUs, 60 s interval), next to the
averages the Pollux OSDI'21 artifact's simulator prints (shared/data/pollux/reference-results.md).

Run: PYTHONPATH=src python bench/policy_quality.py [policy ...]
"""
from __future__ import annotations

import sys

from dlsched.paths import shared_data
from dlsched.policy.base import policy_names
from dlsched.sim import run

PEER = {  # shared/data/pollux/reference-results.md
    "tiresias": (2473.65, 5144.96, 3876.26, 3280.26),
    "optimus": (4087.06, 6913.88, 3944.01, 5967.75),
    "pollux": (2088.77, 3322.94, 2188.49, 2720.98),
}


def main() -> None:
    policies = sys.argv[1:] or [p for p in ("fifo", "srtf", "tiresias", "optimus", "elastic", "goodput")
                                if p in policy_names()]
    print(f"{'policy':10s} {'workload':8s} {'avg JCT (s)':>12s} {'makespan (s)':>13s} {'peer avg JCT':>13s} {'diff':>8s}")
    for policy in policies:
        for w in (1, 2, 3, 4):
            try:
                r = run(shared_data() / f"pollux/workloads/workload-{w}.csv", policy)
            except Exception as e:  # a policy still in development must not hide the others' figures
                print(f"{policy:10s} {w:<8d} failed: {type(e).__name__}: {e}")
                break
            s = r.summary()
            peer = PEER.get(policy, (None,) * 4)[w - 1]
            diff = f"{(s['avg_jct'] / peer - 1) * 100:+.2f}%" if peer else ""
            print(f"{policy:10s} {w:<8d} {s['avg_jct']:12.2f} {s['makespan']:13.0f} {peer or '':>13} {diff:>8s}")
    print("target: Tiresias and Optimus+Oracle within 3 % of the peer on every workload")


if __name__ == "__main__":
    main()
