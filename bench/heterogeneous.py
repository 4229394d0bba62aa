"""Mixed-GPU cluster with measured speeds: what type-aware scheduling buys on a Pollux workload (issues 4, 15).

Cluster: 12 nodes x 4 T4 (the GPU the Pollux traces were measured on, speed 1) + 4 nodes x 4 H100 (64 GPUs).
H100 speed per application from measurements (``sim/measured_speeds.py``): h100/throughput.csv over the traced
single-T4 samples/s for cifar10 (ResNet-18) and imagenet (ResNet-50); the four apps without an H100 measurement
get the geometric mean of those two (printed as "assumed"). Each type-aware policy runs beside the same policy made
type-blind (``sim.type_blind``: one GPU type, the driver places; the simulator still runs each job at its real
type's speed), in one run, both with the same remaining-work information (--remaining, default predicted);
Tiresias (type-blind by design) for scale.

    PYTHONPATH=src python bench/heterogeneous.py [--workload 1] [--policies elastic goodput tiresias]
"""
from __future__ import annotations

import argparse
import time

from dlsched.paths import shared_data
from dlsched.policy.base import ClusterView, NodeView, make_policy
from dlsched.sim import run
from dlsched.sim.measured_speeds import measured_gpu_speeds
from dlsched.sim.type_blind import TypeBlind

CLUSTER = ClusterView(tuple(NodeView(f"t4-{i}", 4, "t4") for i in range(12))
                      + tuple(NodeView(f"h100-{i}", 4, "h100") for i in range(4)))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--workload", type=int, default=1)
    ap.add_argument("--policies", nargs="+", default=["elastic", "goodput", "tiresias"])
    ap.add_argument("--remaining", default="predicted")
    args = ap.parse_args()
    path = shared_data() / "pollux" / "workloads" / f"workload-{args.workload}.csv"
    speeds, measured = measured_gpu_speeds("h100")
    shown = ", ".join(f"{k}={v:.1f}{'' if k.split('/')[1] in measured else ' (assumed)'}" for k, v in speeds.items())
    print(f"workload-{args.workload}, 12x4 T4 + 4x4 H100, remaining work: {args.remaining}; H100 speed vs traced "
          f"T4: {shown}")
    print(f"{'policy':>22} {'avg JCT s':>10} {'p99 JCT s':>10} {'makespan s':>11} {'wall s':>7}")
    avg = {}
    for name in args.policies:
        variants = [make_policy(name)]
        if name != "tiresias":
            variants.append(TypeBlind(make_policy(name)))
        for policy in variants:
            t = time.perf_counter()
            res = run(path, policy, CLUSTER, gpu_speed=speeds, remaining=args.remaining)
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
