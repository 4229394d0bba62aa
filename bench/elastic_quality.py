"""Schedule quality of the elastic policies on the Pollux workloads (issue 4), side by side in one run.

For each workload (shared/data/pollux/workloads/workload-<n>.csv, 160 jobs, 16 nodes x 4 GPUs, 60 s interval, the
Pollux artifact's semantics as implemented in dlsched.sim) it simulates elastic, elastic-gpu-only, goodput,
tiresias and optimus and prints the average JCT, jobs completed within the submission window (the last arrival,
~7.7 h — the paper's "jobs completed in a horizon"; a causal simulator finishes the same jobs by then whether or
not it stops there) and wall time. Targets printed beside the figures:
  * the best of ours beats Pollux's published mean avg JCT, 2751 s (shared/data/pollux/reference-results.md; the
    per-workload Pollux values from that file are printed too);
  * elastic beats elastic-gpu-only by a clear factor (the paper reports up to 10x avg JCT and 2x jobs completed).

    PYTHONPATH=src python bench/elastic_quality.py [--workloads 1 2 3 4] [--policies ...] [--remaining none]

Pollux's figures are printed beside ours only in the predicted and none modes (Pollux had no oracle).
"""
from __future__ import annotations

import argparse
import time

import numpy as np

from dlsched.sim import run
from quality_args import check_quality_args, workload_path

POLLUX_PUBLISHED_MEAN = 2751.1                      # reference-results.md, over the artifact's 8 workloads
POLLUX_PER_WORKLOAD = {1: 2088.77, 2: 3322.94, 3: 2188.49, 4: 2720.98}   # same file
OURS = ("elastic", "elastic-gpu-only", "goodput")


def _check_args(ap: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """The options only this bench has (quality_args checks the shared ones)."""
    check_quality_args(ap, args, "--remaining", [args.remaining])
    if args.nodes < 12:   # the workloads hold 48-GPU jobs: fewer 4-GPU nodes cannot run them
        ap.error(f"--nodes: {args.nodes} 4-GPU nodes cannot hold the workloads' 48-GPU jobs (at least 12)")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--workloads", type=int, nargs="+", default=[1, 2, 3, 4])
    ap.add_argument("--policies", nargs="+", default=[*OURS, "tiresias", "optimus"])
    ap.add_argument("--remaining", default="predicted",
                    help="what policies are told of remaining work: predicted (default) | none | oracle | "
                         "noise:SIGMA. Pollux had no oracle: its figures are compared only in predicted and none")
    ap.add_argument("--nodes", type=int, default=16,
                    help="4-GPU nodes (16 = the artifact's 64 GPUs; 12, the fewest that fit the workloads' 48-GPU "
                         "jobs, = a more loaded cluster; Pollux's published figures are for 16 only)")
    args = ap.parse_args()
    _check_args(ap, args)
    jct: dict[str, dict[int, float]] = {p: {} for p in args.policies}
    done: dict[str, dict[int, int]] = {p: {} for p in args.policies}
    print(f"{args.nodes} nodes x 4 GPUs, remaining work: {args.remaining}")
    print(f"{'workload':>8} {'policy':>17} {'avg JCT s':>10} {'done@window':>12} {'restarts':>9} {'wall s':>7}")
    for w in args.workloads:
        for p in args.policies:
            t = time.perf_counter()
            res = run(workload_path(w), p, remaining=args.remaining, nodes=args.nodes)
            wall = time.perf_counter() - t
            window = float(res.jobs.submit.max())
            jct[p][w] = res.avg_jct
            done[p][w] = int((res.jobs.finish <= window).sum())
            print(f"{w:>8} {p:>17} {res.avg_jct:10.1f} {done[p][w]:>12} {int(res.jobs.restarts.sum()):>9} "
                  f"{wall:7.1f}", flush=True)
        if args.remaining in ("predicted", "none"):
            print(f"{w:>8} {'pollux (published)':>17} {POLLUX_PER_WORKLOAD.get(w, float('nan')):10.1f}")
    print()
    print(f"{'policy':>17} {'mean avg JCT s':>15} {'mean done@window':>17}")
    for p in args.policies:
        print(f"{p:>17} {np.mean(list(jct[p].values())):15.1f} {np.mean(list(done[p].values())):17.1f}")
    pollux_here = np.mean([POLLUX_PER_WORKLOAD[w] for w in args.workloads if w in POLLUX_PER_WORKLOAD])
    ours = [p for p in OURS if p in jct]
    if ours and args.nodes == 16 and args.remaining in ("predicted", "none"):
        best = min(ours, key=lambda p: np.mean(list(jct[p].values())))
        best_mean = np.mean(list(jct[best].values()))
        print(f"best of ours: {best} {best_mean:.1f} s vs Pollux published mean {POLLUX_PUBLISHED_MEAN} s "
              f"(ratio {best_mean / POLLUX_PUBLISHED_MEAN:.3f}; target < 1) and vs Pollux on these workloads "
              f"{pollux_here:.1f} s (ratio {best_mean / pollux_here:.3f})")
    if "elastic" in jct and "elastic-gpu-only" in jct:
        for w in args.workloads:
            factor = jct["elastic-gpu-only"][w] / jct["elastic"][w]
            print(f"workload {w}: elastic-gpu-only / elastic avg JCT = {factor:.2f}x, "
                  f"jobs done in window elastic / gpu-only = {done['elastic'][w]} / {done['elastic-gpu-only'][w]}")
        ratio = np.mean(list(jct["elastic-gpu-only"].values())) / np.mean(list(jct["elastic"].values()))
        print(f"elastic vs elastic-gpu-only (mean avg JCT): {ratio:.2f}x better (paper: up to 10x)")


if __name__ == "__main__":
    main()
