"""Run-to-run noise of a policy on Pollux workloads 1-4 (16 x 4 GPUs), and a paired comparison of two settings.

The perturbation is the phase of the 60 s decision clock against the arrivals: seed s > 0 shifts every submit
time by the same offset d drawn uniformly from [0, 60) s (``numpy.random.default_rng(s)``); seed 0 is d = 0, the
published setting and ``bench/policy_quality.py``'s figures. Jobs, their order, their gaps and every JCT's origin
(its own submit time) are unchanged; what moves is which decision first sees each job (the simulator decides at
t = 60 k) and everything that follows. A real scheduler's clock has no reason to be in phase with its arrivals,
so a difference smaller than the spread over d is not one a reader could reproduce. Seed 0 is printed and kept
out of the statistics (the settings compared were chosen on it).

Per seed: mean avg JCT x Pollux's published figures over the workloads (``bench/policy_quality.py``'s figure),
the per-workload ratios, the largest finish-time fairness rho max and p99 JCT over the workloads. Per setting and
mode: the mean over seeds and its standard error (sd / sqrt n). Paired (same seed, same mode): the candidate minus
the base, how many seeds the candidate wins, mean difference and its standard error.

Run: PYTHONPATH=src python bench/policy_seeds.py --procs 2 [--policy goodput] [--seeds 0 1 2 3 4 5]
[--modes predicted none] [--candidate '{"release_horizon": true}'] [--candidate-modes predicted] [--json OUT]
(one simulation per seed x setting x mode x workload: about 20 s each); ``--load A.json B.json`` reports stored
runs pooled, without simulating.
"""
from __future__ import annotations

import argparse
import json
import math
import sys
from concurrent.futures import ProcessPoolExecutor

import numpy as np

from policy_quality import GPUS_PER_NODE, NODES, PEER, _alone
from quality_args import workload_path

INTERVAL = 60.0


def phase(seed: int) -> float:
    """The submit-time offset of ``seed``: 0 for seed 0, else uniform in [0, INTERVAL)."""
    return 0.0 if seed == 0 else float(np.random.default_rng(seed).uniform(0.0, INTERVAL))


def _one(args: tuple[str, str, int, int, str]) -> dict:
    import dataclasses

    from dlsched.sim import run
    from dlsched.sim.workload import read_workload

    policy, mode, w, seed, policy_args = args
    d = phase(seed)
    jobs = [dataclasses.replace(j, submit_time=j.submit_time + d) for j in read_workload(workload_path(w)).jobs]
    r = run(jobs, policy, nodes=NODES, gpus_per_node=GPUS_PER_NODE, interval=INTERVAL, remaining=mode,
            restart_penalty=30.0, policy_args=json.loads(policy_args))
    return dict(r.summary(), jct=r.jct())


def _stats(xs: list[float]) -> tuple[float, float]:
    """Mean and its standard error (sample sd / sqrt n; 0 for one value)."""
    a = np.asarray(xs, dtype=float)
    return float(a.mean()), float(a.std(ddof=1) / math.sqrt(len(a))) if len(a) > 1 else 0.0


def _simulate(args, settings: dict, seeds: list[int]) -> dict:
    """Run every seed x setting x mode x workload; per (setting, mode, seed) the figures over the workloads."""
    runs = [(name, m, s, w) for s in seeds for name, (_, modes) in settings.items() for m in modes
            for w in args.workloads]      # seed by seed: the progress lines pair up early
    tasks = [(args.policy, m, w, s, json.dumps(settings[name][0])) for name, m, s, w in runs]
    with ProcessPoolExecutor(args.procs) as pool:
        alone = dict(zip(args.workloads, pool.map(_alone, args.workloads)))   # JCT alone: phase-free
        out = {}
        for run_, r in zip(runs, pool.map(_one, tasks)):
            out[run_] = r
            print(f"  {' '.join(map(str, run_))}: x Pollux {r['avg_jct'] / PEER['pollux'][0][run_[3] - 1]:.4f}",
                  file=sys.stderr, flush=True)
    peer = PEER["pollux"][0]
    rows = {}
    for name, (pa, modes) in settings.items():
        for m in modes:
            for s in seeds:
                ratios, rho_max, p99 = [], [], []
                for w in args.workloads:
                    r = out[name, m, s, w]
                    ratios.append(r["avg_jct"] / peer[w - 1])
                    rho_max.append(max(j / alone[w][i] for i, j in r["jct"].items()))
                    p99.append(r["p99_jct"])
                rows[name, m, s] = {"policy": args.policy, "policy_args": pa, "workloads": args.workloads,
                                    "mean_x_pollux": float(np.mean(ratios)), "x_pollux": ratios,
                                    "rho_max": rho_max, "p99_jct": p99}
    return rows


def _report(rows: dict) -> None:
    """Per-seed rows, the mean over seeds (seed 0 left out) and the paired candidate - base difference."""
    seeds = sorted({s for _, _, s in rows})
    settings = {}
    for name, m, _ in rows:
        settings.setdefault(name, [])
        if m not in settings[name]:
            settings[name].append(m)
    first = next(iter(rows.values()))
    args_of = {name: next(f["policy_args"] for (n, _, _), f in rows.items() if n == name) for name in settings}
    print(f"{first['policy']} on Pollux workloads {first['workloads']}, 16 x 4 GPUs, 30 s restart; "
          + ", ".join(f"{n} {json.dumps(a)}" for n, a in args_of.items())
          + "; seed s: submit times + d, d = " + ", ".join(f"{s}: {phase(s):.1f} s" for s in seeds))
    print(f"{'setting':9} {'mode':9} {'seed':>4} {'mean x P':>8}  {'x Pollux per workload':30}"
          f" {'rho max':>22}  {'p99 JCT':>24}")
    for key in sorted(rows, key=lambda k: (list(settings).index(k[0]), settings[k[0]].index(k[1]), k[2])):
        (name, m, s), f = key, rows[key]
        print(f"{name:9} {m:9} {s:>4} {f['mean_x_pollux']:8.3f}  "
              f"{' / '.join(f'{x:.3f}' for x in f['x_pollux']):30} {' / '.join(f'{x:.2f}' for x in f['rho_max']):>22}  "
              f"{' / '.join(f'{x:.0f}' for x in f['p99_jct']):>24}")
    print()
    print("over seeds > 0 (seed 0, the published phase the settings were chosen on, left out): mean x Pollux +- "
          "standard error; rho max and p99 JCT: mean over seeds of the workload mean")
    for name, modes in settings.items():
        for m in modes:
            seeded = [s for s in seeds if s != 0 and (name, m, s) in rows]
            if not seeded:
                continue
            xs = [rows[name, m, s]["mean_x_pollux"] for s in seeded]
            mu, se = _stats(xs)
            rho = np.mean([np.mean(rows[name, m, s]["rho_max"]) for s in seeded])
            p99 = np.mean([np.mean(rows[name, m, s]["p99_jct"]) for s in seeded])
            print(f"{name:9} {m:9} {mu:.4f} +- {se:.4f} (sd {np.std(xs, ddof=1) if len(xs) > 1 else 0:.4f}, "
                  f"min {min(xs):.3f}, max {max(xs):.3f}, n {len(xs)}); rho max {rho:.2f}; p99 JCT {p99:.0f}")
    for m in settings.get("candidate", []):
        paired = [s for s in seeds if s != 0 and ("base", m, s) in rows and ("candidate", m, s) in rows]
        if not paired:
            continue
        d = [rows["candidate", m, s]["mean_x_pollux"] - rows["base", m, s]["mean_x_pollux"] for s in paired]
        mu, se = _stats(d)
        print(f"paired, {m}, seeds {paired}: candidate - base {' '.join(f'{x:+.4f}' for x in d)}; candidate lower "
              f"in {sum(x < 0 for x in d)}/{len(d)}; mean {mu:+.4f} +- {se:.4f} "
              f"(t = {mu / se if se else float('nan'):.2f})")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--policy", default="goodput")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4, 5])
    ap.add_argument("--modes", nargs="+", default=["predicted", "none"])
    ap.add_argument("--workloads", type=int, nargs="+", default=[1, 2, 3, 4])
    ap.add_argument("--base", default="{}", help="policy args of the base setting (JSON)")
    ap.add_argument("--candidate", default=None, help="policy args of the setting compared with it (JSON)")
    ap.add_argument("--candidate-modes", nargs="+", default=None, help="modes the candidate runs in (--modes)")
    ap.add_argument("--procs", type=int, default=2)
    ap.add_argument("--json", default=None, help="write every run's figures here")
    ap.add_argument("--load", nargs="+", default=None, help="report the runs stored by --json (pooled), simulate none")
    args = ap.parse_args()
    if args.load:
        rows = {}
        for path in args.load:
            with open(path) as fh:
                rows.update({(r["setting"], r["mode"], r["seed"]): r for r in json.load(fh)})
    else:
        settings = {"base": (json.loads(args.base), args.modes)}
        if args.candidate is not None:
            settings["candidate"] = (json.loads(args.candidate), args.candidate_modes or args.modes)
        rows = _simulate(args, settings, args.seeds)
    _report(rows)
    if args.json:
        with open(args.json, "w") as fh:
            json.dump([{"setting": n, "mode": m, "seed": s, **f} for (n, m, s), f in rows.items()], fh, indent=1)


if __name__ == "__main__":
    main()
