"""The seed's elastic objective (``saxena``: total normalised throughput over GPUs x batch, re-solved on arrival
and departure, no urgency, hysteresis or restart cost) against its own GPU-only baseline (``saxena-gpu-only``: the
same autoscaler, batch fixed at the user's), side by side in one run per condition.

The paper (Saxena et al., MASCOTS'20) reports ~2x more jobs completed and ~10x lower average JCT. Part 1 runs the
Pollux workloads 1-4 (64 GPUs); part 2 sweeps the conditions that decide the gain with ``sim/generator.py`` over
the Pollux applications' measured traces: offered load, the applications' scalability, and the user's batch size
(the smallest traced one leaves GPU-only scaling no room: it can add only batch // min_local_batch GPUs).
Jobs completed by a deadline = finished by the last arrival (the submission window), the paper's metric.
Neither policy reads remaining work, so the information mode does not matter (both: none).

    PYTHONPATH=src python bench/saxena_gain.py [--jobs 40] [--nodes 4] [--skip-pollux] [--procs N]
"""
from __future__ import annotations

import argparse
import itertools
import os
from concurrent.futures import ProcessPoolExecutor

from dlsched.paths import shared_data
from dlsched.policy.base import ClusterView

POLICIES = ("saxena", "saxena-gpu-only")
LOADS = (0.25, 1.0, 2.0)
APPS = {"scalable (cifar10)": ("cifar10",), "mixed (cifar10, ncf, deepspeech2)": ("cifar10", "ncf", "deepspeech2")}
BATCHES = ("initial", "traced")


def _metrics(res) -> tuple[float, int]:
    window = float(res.jobs.submit.max())
    return res.avg_jct, int((res.jobs.finish <= window).sum())


def _pollux(w: int) -> tuple[int, dict]:
    from dlsched.sim import run

    out = {p: _metrics(run(shared_data() / "pollux" / "workloads" / f"workload-{w}.csv", p, remaining="none"))
           for p in POLICIES}
    return w, out


def _synthetic(args) -> tuple[tuple, dict]:
    from dlsched.sim import run
    from dlsched.sim.generator import generate

    (label, apps), load, batch, num_jobs, nodes = args
    cluster = ClusterView.homogeneous(nodes, 4)
    jobs = generate(num_jobs, load, cluster, apps, batch, seed=0)
    return (label, load, batch), {p: _metrics(run(jobs, p, cluster, remaining="none")) for p in POLICIES}


def _row(label: str, r: dict) -> str:
    (ej, ed), (gj, gd) = r["saxena"], r["saxena-gpu-only"]
    return (f"{label:58} {ej:9.0f} {gj:9.0f} {gj / ej:6.2f}x {ed:5d} {gd:5d} "
            f"{(ed / gd if gd else float('inf')):6.2f}x")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", type=int, default=40)
    ap.add_argument("--nodes", type=int, default=4)
    ap.add_argument("--skip-pollux", action="store_true")
    ap.add_argument("--procs", type=int, default=os.cpu_count() or 1)
    args = ap.parse_args()
    head = (f"{'condition':58} {'JCT elas':>9} {'JCT gpu':>9} {'gain':>7} {'done':>5} {'done':>5} {'gain':>7}\n"
            f"{'':58} {'(s)':>9} {'only (s)':>9} {'':>7} {'elas':>5} {'gpu':>5} {'':>7}")
    with ProcessPoolExecutor(args.procs) as pool:
        if not args.skip_pollux:
            print("Part 1: Pollux workloads, 16 x 4 GPUs (paper: ~10x avg JCT, ~2x jobs done)")
            print(head)
            for w, r in pool.map(_pollux, (1, 2, 3, 4)):
                print(_row(f"workload-{w}", r), flush=True)
        print(f"\nPart 2: {args.jobs} single-GPU jobs, {args.nodes} x 4 GPUs, Poisson arrivals (sim/generator.py)")
        print(head)
        grid = list(itertools.product(APPS.items(), LOADS, BATCHES, [args.jobs], [args.nodes]))
        for (label, load, batch), r in pool.map(_synthetic, grid):
            print(_row(f"{label}, load {load}, batch {batch}", r), flush=True)


if __name__ == "__main__":
    main()
