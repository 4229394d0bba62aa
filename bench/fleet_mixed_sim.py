"""A 100-model ensemble sharing a 64-GPU cluster (16 x 4 H100, 16 cores a node) with a Pollux workload, simulated.

Side by side in one run, same policy, same Pollux jobs:
(a) FLEET: the ensemble is one job of kind ensemble (``sim/ensemble_job.py``) asking for ``--share`` GPUs; the
    policy sizes its share every round like any job's (elastic policies grow it up to what FLEET can use and shrink
    it; its demand falls as members converge), and FLEET plans flotillas inside that share (shared pipelines on the
    share's cores, re-formation at every convergence and share change, 30 s restarts of members that move);
(b) independent: the same 100 members as 100 one-GPU jobs, each with its own pipeline on its GPU's share of the cores.
Prints the ensemble's makespan and the Pollux jobs' average JCT for both. Rates: shared/data/h100/throughput.csv;
preprocessing: preprocess_cpu.csv. Information (``--remaining``, the same for every job of both runs): what the
policy is told of each job's remaining work -- oracle (default), none; the members' own convergence is simulated
from their oracle work either way.

    .venv/bin/python bench/fleet_mixed_sim.py [--workload 1] [--policy tiresias] [--share 16] [--remaining oracle]
"""
from __future__ import annotations

import argparse
import time

import pandas as pd

from dlsched.paths import shared_data
from dlsched.policy.base import ClusterView, NodeView
from dlsched.policy.fleet import Preprocessing
from dlsched.sim.engine import run
from dlsched.sim.ensemble_job import ensemble_job_specs
from dlsched.sim.fleet import h100_profiles, seeded_ensemble
from dlsched.sim.workload import read_workload

NODES, GPUS, CPUS = 16, 4, 16


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--workload", type=int, default=1)
    ap.add_argument("--policy", default="tiresias")
    ap.add_argument("--share", type=int, default=16, help="GPUs the ensemble's job asks for in (a)")
    ap.add_argument("--remaining", default="oracle", choices=("oracle", "none"))
    ap.add_argument("--models", type=int, default=100)
    ap.add_argument("--submit", type=float, default=0.0, help="seconds into the trace the ensemble is submitted")
    a = ap.parse_args()
    data = shared_data()
    per_core = float(pd.read_csv(data / "h100" / "preprocess_cpu.csv").set_index("pipeline")
                     .loc["cifar_crop_flip_norm", "images_per_s_per_core"])
    pre = Preprocessing(per_core)
    members = seeded_ensemble(h100_profiles(data / "h100" / "throughput.csv", max_gpus=GPUS), a.models, seed=0)
    share = ClusterView(tuple(NodeView(f"s{i}", GPUS, "h100", CPUS) for i in range(a.share // GPUS)))   # the request
    pollux = read_workload(data / "pollux" / "workloads" / f"workload-{a.workload}.csv").jobs
    cluster = ClusterView(tuple(NodeView(f"n{i}", GPUS, "h100", CPUS) for i in range(NODES)))
    print(f"{a.models}-model ensemble + Pollux workload-{a.workload} ({len(pollux)} jobs) on {NODES} x {GPUS} GPUs, "
          f"policy {a.policy}, ensemble submitted at {a.submit:.0f} s, remaining work told to the policy: {a.remaining}")
    out = {}
    for mode in ("fleet", "separately"):
        t0 = time.perf_counter()
        ens = ensemble_job_specs(members, share, mode, prefix="ensemble", submit_time=a.submit, pre=pre)
        res = run(pollux + ens, a.policy, cluster, interval=60.0, restart_penalty=30.0, remaining=a.remaining).jobs
        mine = res["id"].str.startswith("ensemble")
        makespan = res.loc[mine, "finish"].max() - a.submit
        others = (res.loc[~mine, "finish"] - res.loc[~mine, "submit"]).mean()
        held = res.loc[mine, "gpu_seconds"].sum() / makespan   # average GPUs the ensemble held
        out[mode] = (makespan, others)
        label = f"(a) FLEET, one job asking {a.share} GPUs" if mode == "fleet" else f"(b) {a.models} independent 1-GPU jobs"
        # (a): each resize or resume of the ensemble re-plans its flotillas (members that move pay their restart)
        changes = int(res.loc[mine, "restarts"].sum()) if mode == "fleet" else None
        print(f"  {label:<36} ensemble makespan {makespan / 3600:6.2f} h   Pollux jobs' avg JCT {others / 3600:6.3f} h   held {held:4.1f} GPUs on average"
              + (f"   resized or resumed {changes} times" if changes is not None else "")
              + f"   ({time.perf_counter() - t0:.0f} s to simulate)")
    (fm, fo), (sm, so) = out["fleet"], out["separately"]
    print(f"FLEET vs independent jobs: ensemble makespan {sm / fm:.2f}x shorter, other jobs' avg JCT {so / fo:.2f}x "
          f"(>1 = better with FLEET)")


if __name__ == "__main__":
    main()
