"""Cost of the service's policy forecast (``service/forecast.py``) as the queue grows.

The live service refreshes the forecast every 2 s (at least twice the last one's time) on its own thread within a
2 s budget (``service/loop.py``:
LoopThread, FORECAST_BUDGET_S); jobs it does not reach in that budget show no predicted finish. This prints, per policy and queue size, the wall time of a complete
forecast (every job forecast to finish) and how many of the jobs a 0.2 s budget covers. Jobs: Pollux-workload-like
mix (1-8 GPUs requested, elastic range up to 2x, remaining 10 min - 4 h of work at linear per-GPU speed), half
running, on 16 nodes x 4 GPUs. No target in the issue; it bounds what the dashboard can promise.

    PYTHONPATH=src python bench/forecast_time.py [--jobs 10 100 1000]
"""
from __future__ import annotations

import argparse
import time
from dataclasses import dataclass

import numpy as np

from dlsched.policy.base import ClusterView, JobView, NodeView, make_policy
from dlsched.service.forecast import forecast
from dlsched.service.forecaster import FORECAST_BUDGET_S


@dataclass(frozen=True)
class PerGpu:
    per_gpu: float

    def throughput(self, num_gpus, num_nodes=1, global_batch=0, gpu_type=None):
        return self.per_gpu * num_gpus * (0.9 if num_nodes > 1 else 1.0)

    def efficiency(self, global_batch):
        return 1.0


def jobs(n: int, cluster: ClusterView, seed: int = 0) -> list[JobView]:
    rng = np.random.default_rng(seed)
    free = {node.name: node.num_gpus for node in cluster.nodes}
    out = []
    for i in range(n):
        g = int(rng.choice([1, 1, 2, 2, 4, 8]))
        per_gpu = float(rng.uniform(50, 500))
        left = float(rng.uniform(600, 4 * 3600)) * per_gpu * g
        place = {}
        if i % 2 == 0:
            for node, f in free.items():
                if f >= g:
                    place, free[node] = {node: g}, f - g
                    break
        out.append(JobView(id=str(i), submit_time=float(i), requested_gpus=g, min_gpus=1, max_gpus=2 * g,
                           batch_size=64 * g, min_batch_size=32 * g, max_batch_size=128 * g, max_local_batch=128,
                           remaining_samples=left, speed=PerGpu(per_gpu), placement=place,
                           current_batch_size=64 * g if place else None))
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", type=int, nargs="+", default=[10, 100, 1000])
    ap.add_argument("--policies", nargs="+", default=["fifo", "tiresias", "elastic"])
    a = ap.parse_args()
    cluster = ClusterView(tuple(NodeView(f"n{i}", 4) for i in range(16)), 0.0)
    print(f"{'policy':>9} {'jobs':>5} {'full forecast s':>16} {'decisions':>10} {'finishes known in budget':>25}")
    for policy in a.policies:
        for n in a.jobs:
            views = jobs(n, cluster)
            t = time.perf_counter()
            full = forecast(views, cluster, make_policy(policy), 0.0, step_s=60.0, max_decisions=100_000)
            wall = time.perf_counter() - t
            cut = forecast(views, cluster, make_policy(policy), 0.0, step_s=60.0, budget_s=FORECAST_BUDGET_S)
            known = sum(f is not None for f in cut.finish.values())
            print(f"{policy:>9} {n:>5} {wall:16.2f} {full.decisions:>10} {known:>14} / {n:<5} ({FORECAST_BUDGET_S:g} s)",
                  flush=True)


if __name__ == "__main__":
    main()
