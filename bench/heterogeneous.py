"""Mixed-GPU cluster: what type-aware scheduling buys on a Pollux workload (issue 4, heterogeneity).

Cluster: 8 nodes x 4 V100 + 8 nodes x 4 K80 (64 GPUs), the Pollux workload (shared/data/pollux/workloads/), the
simulator's Pollux semantics. Speeds are relative to the GPU the Pollux traces were measured on (T4). The factors
below are illustrative assumptions, not measurements (no per-type traces are in shared/data): K80 at half the traced
speed; V100 between 1.2x (ncf, embedding-bound) and 3x (imagenet), so jobs differ in what the fast type buys them
(Gavel's premise). Each type-aware policy runs beside the same policy made type-blind (``sim.type_blind``), which
sees one GPU type and lets the driver place — the ratio is the figure; Tiresias (type-blind by design) for scale.

    PYTHONPATH=src python bench/heterogeneous.py [--workload 1] [--policies elastic goodput tiresias]
"""
from __future__ import annotations

import argparse
import time

from dlsched.paths import shared_data
from dlsched.policy.base import ClusterView, NodeView, make_policy
from dlsched.sim import run
from dlsched.sim.type_blind import TypeBlind

SPEEDS = {"k80": 0.5, "v100": 2.0, "v100/imagenet": 3.0, "v100/cifar10": 2.5, "v100/bert": 2.5,
          "v100/deepspeech2": 2.0, "v100/yolov3": 2.0, "v100/ncf": 1.2}
CLUSTER = ClusterView(tuple(NodeView(f"v100-{i}", 4, "v100") for i in range(8))
                      + tuple(NodeView(f"k80-{i}", 4, "k80") for i in range(8)))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--workload", type=int, default=1)
    ap.add_argument("--policies", nargs="+", default=["elastic", "goodput", "tiresias"])
    args = ap.parse_args()
    path = shared_data() / "pollux" / "workloads" / f"workload-{args.workload}.csv"
    print(f"workload-{args.workload}, 8x4 V100 + 8x4 K80, speeds vs traced T4: {SPEEDS}")
    print(f"{'policy':>22} {'avg JCT s':>10} {'p99 JCT s':>10} {'makespan s':>11} {'wall s':>7}")
    avg = {}
    for name in args.policies:
        variants = [make_policy(name)]
        if name != "tiresias":
            variants.append(TypeBlind(make_policy(name)))
        for policy in variants:
            t = time.perf_counter()
            res = run(path, policy, CLUSTER, gpu_speed=SPEEDS)
            s = res.summary()
            avg[policy.name] = s["avg_jct"]
            print(f"{policy.name:>22} {s['avg_jct']:10.1f} {s['p99_jct']:10.1f} {s['makespan']:11.1f} "
                  f"{time.perf_counter() - t:7.1f}", flush=True)
    for name in args.policies:
        if f"{name}-type-blind" in avg:
            print(f"{name}: type-blind / type-aware avg JCT = {avg[f'{name}-type-blind'] / avg[name]:.2f}x "
                  f"(target > 1)")


if __name__ == "__main__":
    main()
