"""Decision latency of the elastic DP (issue 4): 1 000 jobs x 1 024 GPUs <= 50 ms, 100 jobs x 64 GPUs <= 2 ms (median).

Two scenarios per size, both exact:
  * fresh      — no job is running yet; the curves are still not concave (the all-reduce cost appears at the second
                 GPU), so 100 x 64 takes the plain DP and 1 000 x 1 024 the envelope + pruned DP;
  * steady     — every job already runs: hysteresis adds a bump at each job's current size; at 1 000 x 1 024 the
                 envelope greedy certifies its own optimum.
For each it prints the solver time on prepared value curves and the full ``decide()`` time (curve building with a
warm memo + solve + allocation objects), medians with their ratio to the target, and the fastest decide() of the
repeats ("decide min": on a machine shared with other jobs the median also measures the contention).
Synthetic jobs: step-time profiles with random compute / all-reduce costs, batch ranges and g_max in 8..64.

    PYTHONPATH=src python bench/elastic_latency.py [--repeats 15] [--clock cpu|wall] [--policy elastic|goodput]
    [--informed]
"""
from __future__ import annotations

import argparse
import os
import statistics
import time
from dataclasses import dataclass

import numpy as np

from dlsched.policy import ClusterView, JobView, make_policy
from dlsched.policy.dp import knapsack_dp, solve
from dlsched.policy.elastic import batch_range


@dataclass(frozen=True)
class StepProfile:
    launch: float
    per_sample: float
    allreduce: float

    def throughput(self, num_gpus, num_nodes, global_batch, gpu_type=None):
        step = self.launch + self.per_sample * global_batch / num_gpus
        if num_gpus > 1:
            step += self.allreduce * (1 + 0.3 * (num_nodes - 1))
        return global_batch / step

    def efficiency(self, global_batch):
        return 1.0


def make_jobs(n: int, total_gpus: int, seed: int, running: bool, informed: bool = False) -> tuple[JobView, ...]:
    """``informed``: running jobs also know their remaining work, run time and restarts (what ``goodput``'s release
    horizon and run-clock restart budget read; without them those do nothing)."""
    rng = np.random.default_rng(seed)
    jobs = []
    per_job = max(1, total_gpus // n)
    for i in range(n):
        b_min = int(rng.choice([32, 64, 128]))
        speed = StepProfile(float(rng.uniform(0.005, 0.02)), float(rng.uniform(2e-4, 2e-3)),
                            float(rng.uniform(0.002, 0.05)))
        extra = dict(placement={"node0": per_job}, current_batch_size=b_min * per_job) if running else {}
        if running and informed:
            extra.update(remaining_samples=float(rng.uniform(1e4, 1e8)), run_time=float(rng.uniform(0, 36_000)),
                         attrs={"restarts": int(rng.integers(0, 20)), "restart_s": 30.0})
        jobs.append(JobView(id=f"j{i}", submit_time=float(i), requested_gpus=2, batch_size=b_min,
                            min_batch_size=b_min, max_batch_size=b_min * 64, max_local_batch=256,
                            max_gpus=int(rng.choice([8, 16, 32, 64])), speed=speed, **extra))
    return tuple(jobs)


def median_ms(fn, repeats: int) -> float:
    return statistics.median(times_ms(fn, repeats))


def times_ms(fn, repeats: int) -> list[float]:
    """Median milliseconds of ``fn``: process CPU time (``--clock cpu``, the default: on a machine shared by many
    users wall time mostly measures the queue for a core) or wall time (``--clock wall``)."""
    fn()
    times = []
    for _ in range(repeats):
        t = CLOCK()
        fn()
        times.append((CLOCK() - t) * 1e3)
    return times


CLOCK = time.process_time


def prepared_curves(policy, jobs, cluster):
    """The exact curves decide() hands to the solver (single GPU type)."""
    t = cluster.gpu_types[0]
    node = max(n.num_gpus for n in cluster.nodes)
    out = []
    for j in jobs:
        rng = batch_range(j, cluster.total_gpus)
        raw = policy.curves.curve(j, rng, t, node)
        ref = raw.values[rng.g_min]
        out.append(policy._curve(j, rng, raw, ref, ref, t, node, t if j.is_running else None, cluster.now))
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=15)
    ap.add_argument("--clock", choices=["cpu", "wall"], default="cpu")
    ap.add_argument("--policy", default="elastic", help="an elastic-DP policy: elastic, goodput, goodput-fair, ...")
    ap.add_argument("--informed", action="store_true",
                    help="steady jobs know remaining work, run time, restarts")
    args = ap.parse_args()
    global CLOCK
    CLOCK = time.process_time if args.clock == "cpu" else time.perf_counter
    print(f"policy {args.policy}; clock: {args.clock} time; load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    print(f"{'size':>16} {'scenario':>8} {'solver':>10} {'solve ms':>9} {'decide ms':>10} {'target':>7} "
          f"{'solve/target':>13} {'decide/target':>14} {'decide min':>11}")
    for n_jobs, nodes, target in ((100, 16, 2.0), (1000, 256, 50.0)):
        cluster = ClusterView.homogeneous(nodes, 4)
        for scenario in ("fresh", "steady"):
            jobs = make_jobs(n_jobs, cluster.total_gpus, seed=1, running=scenario == "steady",
                             informed=args.informed)
            policy = make_policy(args.policy)
            curves = prepared_curves(policy, jobs, cluster)
            method = solve(curves, cluster.total_gpus).method
            t_solve = median_ms(lambda: solve(curves, cluster.total_gpus), args.repeats)
            decides = times_ms(lambda: policy.decide(jobs, cluster), args.repeats)
            t_decide = statistics.median(decides)
            print(f"{n_jobs:>5} x {cluster.total_gpus:>4} GPUs {scenario:>8} {method:>10} {t_solve:9.2f} "
                  f"{t_decide:10.2f} {target:7.1f} {t_solve / target:13.2f} {t_decide / target:14.2f} "
                  f"{min(decides):11.2f}")
        t_dp = median_ms(lambda: knapsack_dp(curves, cluster.total_gpus), args.repeats)
        print(f"{n_jobs:>5} x {cluster.total_gpus:>4} GPUs {'steady':>8} {'plain DP':>10} {t_dp:9.2f} "
              f"{'':>10} {target:7.1f} {t_dp / target:13.2f}")
    cold = make_policy(args.policy)
    jobs = make_jobs(1000, 1024, seed=2, running=False)
    t = time.perf_counter()
    cold.decide(jobs, ClusterView.homogeneous(256, 4))
    print(f"cold first decision (builds 1000 value curves), 1000 x 1024: {(time.perf_counter() - t) * 1e3:.1f} ms")


if __name__ == "__main__":
    main()
