"""Wall time to simulate one Pollux workload with the goodput policy (issue 4): target <= 60 s
(the Pollux artifact's own simulator takes ~43 min per run here, shared/data/pollux/reference-results.md).

Also prints the policy's share of that time and its median decision latency, measured by wrapping decide().

    PYTHONPATH=src python bench/goodput_sim_time.py [--workload 1]
"""
from __future__ import annotations

import argparse
import statistics
import time

from dlsched.paths import shared_data
from dlsched.policy import Policy, make_policy
from dlsched.sim import run

TARGET_S = 60.0
PEER_S = 43 * 60.0


class Timed(Policy):
    """Delegates to a policy and records how long each decision takes."""

    def __init__(self, policy):
        self.policy, self.name, self.times = policy, policy.name, []

    def decide(self, jobs, cluster):
        t = time.perf_counter()
        out = self.policy.decide(jobs, cluster)
        self.times.append(time.perf_counter() - t)
        return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--workload", type=int, default=1)
    ap.add_argument("--policy", default="goodput")
    args = ap.parse_args()
    timed = Timed(make_policy(args.policy))
    t = time.perf_counter()
    res = run(shared_data() / "pollux" / "workloads" / f"workload-{args.workload}.csv", timed)
    wall = time.perf_counter() - t
    print(f"workload-{args.workload} with {args.policy}: {wall:.1f} s wall (target <= {TARGET_S:.0f} s, "
          f"ratio {wall / TARGET_S:.2f}; peer simulator ~{PEER_S:.0f} s, {PEER_S / wall:.0f}x faster), "
          f"avg JCT {res.avg_jct:.1f} s, {len(res.finished)}/{len(res.jobs)} jobs finished")
    print(f"policy: {len(timed.times)} decisions, {sum(timed.times):.1f} s in total "
          f"({sum(timed.times) / wall:.0%} of the run), median {statistics.median(timed.times) * 1e3:.2f} ms, "
          f"max {max(timed.times) * 1e3:.1f} ms")


if __name__ == "__main__":
    main()
