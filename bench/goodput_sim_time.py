"""Time to simulate one Pollux workload with the goodput policy (issues 4, 15): target <= 10 s
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

TARGET_S = 10.0            # issue 15 (was 60 s in issue 4)
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
    ap.add_argument("--remaining", default="predicted", help="information mode (predicted runs the predictor too)")
    args = ap.parse_args()
    timed = Timed(make_policy(args.policy))
    t, cpu = time.perf_counter(), time.process_time()
    res = run(shared_data() / "pollux" / "workloads" / f"workload-{args.workload}.csv", timed,
              remaining=args.remaining)
    wall, cpu = time.perf_counter() - t, time.process_time() - cpu
    print(f"workload-{args.workload} with {args.policy}, remaining {args.remaining}: {cpu:.1f} s CPU "
          f"(ratio {cpu / TARGET_S:.2f} to the {TARGET_S:.0f} s target), {wall:.1f} s wall (ratio {wall / TARGET_S:.2f}; on "
          f"a shared machine the wall time also counts others' work); peer simulator ~{PEER_S:.0f} s; "
          f"avg JCT {res.avg_jct:.1f} s, {len(res.finished)}/{len(res.jobs)} jobs finished")
    print(f"policy: {len(timed.times)} decisions, {sum(timed.times):.1f} s in total "
          f"({sum(timed.times) / wall:.0%} of the run), median {statistics.median(timed.times) * 1e3:.2f} ms, "
          f"max {max(timed.times) * 1e3:.1f} ms")


if __name__ == "__main__":
    main()
