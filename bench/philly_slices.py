"""Philly slices: `goodput` against Tiresias without remaining-work information, side by side in one run.

Three 800-job slices of shared/data/philly/philly.csv (800 rows in file order from rows 0 / 20 000 / 50 000,
submitted in time order, times re-based to the slice's first), 4 x 8 GPUs, 60 s interval, 30 s restart, durations capped at 3 days,
requests capped at 32 GPUs. Philly jobs are duration-only: no policy can be told remaining work, so both run in
``none`` (Tiresias never reads it). rho = JCT / JCT alone at the request on the same cluster.

Run: PYTHONPATH=src python bench/philly_slices.py [--policies goodput tiresias] [--starts 0 20000 50000]
[--policy-args JSON] [--restart-penalty S] [--procs N]
(``--policy-args`` goes to `goodput` only; ``--restart-penalty 0`` is an ablation: how much restarts cost.)
"""
from __future__ import annotations

import argparse
import json
import os
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace

import numpy as np

from dlsched.paths import shared_data
from dlsched.policy.base import ClusterView

SLICE, NODES, GPUS_PER_NODE = 800, 4, 8
MAX_DURATION, MAX_GPUS = 3 * 86400.0, 32


def _slice(start: int):
    from dlsched.sim.workload import read_philly

    rows = sorted(read_philly(shared_data() / "philly" / "philly.csv").jobs, key=lambda j: int(j.id.split("-")[1]))
    jobs = sorted(rows[start:start + SLICE], key=lambda j: j.submit_time)
    t0 = jobs[0].submit_time
    return [replace(j, submit_time=j.submit_time - t0, duration=min(j.duration, MAX_DURATION),
                    requested_gpus=min(j.requested_gpus, MAX_GPUS)) for j in jobs]


def _one(args: tuple[str, int, str, float]) -> tuple[str, int, dict]:
    from dlsched.sim import run
    from dlsched.sim.fairness import isolated_jcts

    policy, start, policy_args, restart = args
    jobs = _slice(start)
    cluster = ClusterView.homogeneous(NODES, GPUS_PER_NODE)
    r = run(jobs, policy, cluster, remaining="none", restart_penalty=restart,
            policy_args=json.loads(policy_args) if policy == "goodput" else {})
    alone = isolated_jcts(jobs, cluster)
    s = r.summary()
    s["rho"] = np.array([j / alone[i] for i, j in r.jct().items()])
    return policy, start, s


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--policies", nargs="+", default=["goodput", "tiresias"])
    ap.add_argument("--starts", type=int, nargs="+", default=[0, 20_000, 50_000])
    ap.add_argument("--policy-args", default="{}")
    ap.add_argument("--restart-penalty", type=float, default=30.0)
    ap.add_argument("--procs", type=int, default=os.cpu_count() or 1)
    args = ap.parse_args()
    tasks = [(p, s, args.policy_args, args.restart_penalty) for p in args.policies for s in args.starts]
    with ProcessPoolExecutor(args.procs) as pool:
        results = {(p, s): r for p, s, r in pool.map(_one, tasks)}
    print(f"Philly {SLICE}-job slices, {NODES} x {GPUS_PER_NODE} GPUs, durations <= 3 days, requests <= {MAX_GPUS}, "
          f"{args.restart_penalty:g} s restart, remaining none (neither side is told remaining work); "
          f"goodput args {args.policy_args}")
    print(f"{'policy':10} {'start':>6} {'avg JCT':>8} {'p99':>8} {'rho max':>8} {'rho mean':>8} {'restarts':>8} {'x tiresias':>10}")
    for p in args.policies:
        for s in args.starts:
            r = results[p, s]
            ref = results.get(("tiresias", s))
            ratio = f"{r['avg_jct'] / ref['avg_jct']:.2f}" if ref else "-"
            print(f"{p:10} {s:>6} {r['avg_jct']:8.0f} {r['p99_jct']:8.0f} {r['rho'].max():8.1f} "
                  f"{r['rho'].mean():8.2f} {r['restarts']:8d} {ratio:>10}")


if __name__ == "__main__":
    main()
