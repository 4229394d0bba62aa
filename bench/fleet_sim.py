"""FLEET in simulation: a 100-model ensemble on 16 nodes x 4 GPUs with rates from the H100 table.

Prints FLEET's end-to-end speed-up over (a) each model trained separately (one GPU, own pipeline) and
(b) homogeneous data sharing (one group, one GPU per model), all three simulated side by side in this run,
against the paper's 1.12-1.92x and 1.23-1.97x; then the greedy's gap to the exhaustive optimum on small instances.
Rates: /work/shared/data/h100/throughput.csv (batch 64..512, fp32 and bf16); preprocessing: preprocess_cpu.csv.
"""
from __future__ import annotations

import statistics
import time

from dlsched.paths import shared_data
from dlsched.policy.base import ClusterView, NodeView
from dlsched.policy.fleet import Preprocessing
from dlsched.sim.fleet import (
    exhaustive_makespan, fleet_planner, h100_profiles, homogeneous_planner, independent_planner, seeded_ensemble,
    simulate_ensemble,
)

RESTART_S = 30.0   # checkpoint reload + process restart when a member moves


def cluster(nodes: int, gpus: int, cpus: int) -> ClusterView:
    return ClusterView(tuple(NodeView(f"n{i}", gpus, "h100", cpus) for i in range(nodes)))


def main() -> None:
    data = shared_data() / "h100"
    per_core = float(__import__("pandas").read_csv(data / "preprocess_cpu.csv").set_index("pipeline").loc["cifar_crop_flip_norm", "images_per_s_per_core"])
    pre = Preprocessing(per_core)
    prof = {k: v for k, v in h100_profiles(data / "throughput.csv").items() if int(k.split("/b")[1].split("/")[0]) in (64, 128, 256, 512)}
    print(f"{len(prof)} profiled variants; preprocessing {per_core:.0f} images/s/core; restart {RESTART_S:.0f} s")
    planners = {"fleet(seed)": fleet_planner(), "fleet(any anchor)": fleet_planner(anchor="any"),
                "separately": independent_planner, "homogeneous": homogeneous_planner}
    print(f"{'cores/node':>10} {'seed':>4} " + " ".join(f"{k:>20}" for k in planners) + "   vs-separately  vs-homogeneous")
    ratios = {}
    for cpus in (16, 32):
        for seed in range(3):
            members = seeded_ensemble(prof, 100, seed=seed)
            cl = cluster(16, 4, cpus)
            t = {k: simulate_ensemble(members, cl, p, pre, RESTART_S).makespan for k, p in planners.items()}
            a, b = t["separately"] / t["fleet(seed)"], t["homogeneous"] / t["fleet(seed)"]
            ratios.setdefault(cpus, []).append((a, b))
            print(f"{cpus:>10} {seed:>4} " + " ".join(f"{v / 3600:>19.2f}h" for v in t.values()) + f"   {a:>12.2f}x  {b:>13.2f}x")
    for cpus, rs in ratios.items():
        print(f"FLEET speed-up, {cpus} cores/node: vs separately {statistics.mean(r[0] for r in rs):.2f}x "
              f"(target 1.12-1.92x), vs homogeneous sharing {statistics.mean(r[1] for r in rs):.2f}x (target 1.23-1.97x)")

    gaps, t0 = [], time.perf_counter()
    for seed in range(8):
        members = seeded_ensemble(prof, 4, seed=100 + seed, epochs=(5, 40))
        cl = cluster(1, 4, 64)
        opt = exhaustive_makespan(members, cl, pre)
        greedy = simulate_ensemble(members, cl, fleet_planner(reform="event"), pre).makespan
        lit = simulate_ensemble(members, cl, fleet_planner(anchor="any", reform="event"), pre).makespan
        gaps.append((greedy / opt - 1, lit / opt - 1))
    print(f"greedy vs exhaustive optimum, 8 instances of 4 models on 1 node x 4 GPUs ({time.perf_counter() - t0:.0f} s): "
          f"seed greedy: greedy/optimum mean {1 + statistics.mean(g[0] for g in gaps):.3f} (max {1 + max(g[0] for g in gaps):.3f}); "
          f"any anchor: gap mean {100 * statistics.mean(g[1] for g in gaps):.1f}% (max {100 * max(g[1] for g in gaps):.1f}%)")


if __name__ == "__main__":
    main()
