"""Do the policies generalise beyond Pollux workloads 1-4 (the ones they were developed on)? Fresh scenarios built
only from real data, every policy side by side in one run per scenario, each in the information modes its peer had.

Scenarios (``--scenarios``; ``--list`` prints them):

* ``mix-S`` (S = seed): 160 jobs drawn with replacement from the 640 (application, GPUs, batch) rows of Pollux
  workloads 1-4, arriving as 160 consecutive Philly submissions from a seeded start, their gaps scaled so the
  window spans 8 h as the Pollux workloads do (real burstiness, the Pollux rate); 16 x 4 GPUs.
  ``mix-S-hot``: the same jobs in 4 h (twice the rate).
* ``wlW-8x4`` / ``wlW-32x4``: Pollux workload W on half / double the cluster (twice / half the load).
* ``wlW-hetero``: workload W on 12 x 4 T4 + 4 x 4 H100, the H100's speed per application measured
  (``sim/measured_speeds.py``; rho there is against the job alone at T4 speed).
* ``wlW-int30`` / ``wlW-int180``: scheduling every 30 s / 180 s; ``wlW-rp120`` / ``wlW-rp5``: a restart costs
  120 s / 5 s (the published runs: 60 s and 30 s).
* ``phillyK``: 800 Philly jobs from row K (``bench/philly_slices.py``'s slicing), 4 x 8 GPUs. Duration-only jobs:
  no policy is told remaining work in any mode, so only ``none`` runs.

Information: elastic policies run in ``predicted`` (the job's own observations through the online predictor) and
``none``; Tiresias and FIFO never read remaining work (one run each). No oracle. Ratios: avg JCT / ``goodput``'s
(our Pollux-style policy) in the same mode, / Tiresias', / FIFO's. Each run stops at a 120-day horizon: a job not
finished by then is counted (a stall or starvation), never waited for.

Target (issue 15's claims, carried over): the policy that meets the Pollux targets on workloads 1-4 (``goodput``)
is at most Tiresias' avg JCT in every scenario, every job finishes, and no policy is worse than FIFO.

Run: PYTHONPATH=src python bench/generalization.py [--scenarios mix-1 wl2-8x4 ...] [--policies ...] [--procs N]
(default: six scenarios, 56 simulations, about 20 minutes on 2 busy cores; ``--list`` names them).
"""
from __future__ import annotations

import argparse
import functools
import os
import re
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace

import numpy as np

from dlsched.paths import shared_data
from dlsched.policy.base import ClusterView, NodeView
from philly_slices import _slice as philly_slice

POLICIES = ("goodput", "goodput-fair", "elastic", "saxena", "tiresias", "fifo")
MODES = ("predicted", "none")
INFORMATION_FREE = {"tiresias", "fifo"}
DEFAULT = ("mix-1", "mix-2-hot", "wl2-8x4", "wl4-32x4", "wl3-rp120", "philly0")
HORIZON = 120 * 86400.0
SPAN = 8 * 3600.0        # the Pollux workloads' arrival window


@functools.lru_cache(maxsize=None)
def _pollux_rows() -> tuple:
    from dlsched.sim.workload import read_workload

    return tuple(j for w in (1, 2, 3, 4)
                 for j in read_workload(shared_data() / "pollux" / "workloads" / f"workload-{w}.csv").jobs)


@functools.lru_cache(maxsize=None)
def _philly():
    from dlsched.sim.workload import read_philly

    return read_philly(shared_data() / "philly" / "philly.csv").jobs      # in submission order


def _mix(seed: int, rate: float) -> list:
    from dlsched.sim.workload import WorkloadJob

    rng = np.random.default_rng(seed)
    rows, arrivals = _pollux_rows(), _philly()
    start = int(rng.integers(0, len(arrivals) - 160))
    t = np.array([j.submit_time for j in arrivals[start:start + 160]])
    t = (t - t[0]) * (SPAN / rate) / max(t[-1] - t[0], 1.0)
    picks = rng.integers(0, len(rows), 160)
    return [WorkloadJob(f"{rows[k].app}-{i}", float(round(ti)), rows[k].requested_gpus, app=rows[k].app,
                        batch_size=rows[k].batch_size) for i, (k, ti) in enumerate(zip(picks, t))]


def scenario(name: str) -> dict:
    """jobs, cluster, interval, restart penalty, gpu_speed, modes and a one-line description of ``name``."""
    from dlsched.sim.measured_speeds import measured_gpu_speeds
    from dlsched.sim.workload import read_workload

    s = dict(cluster=ClusterView.homogeneous(16, 4), interval=60.0, restart=30.0, speeds={}, modes=MODES)
    if m := re.fullmatch(r"mix-(\d+)(-hot)?", name):
        rate = 2.0 if m[2] else 1.0
        return dict(s, jobs=_mix(int(m[1]), rate), what=f"160 Pollux-mix jobs (seed {m[1]}), Philly arrival "
                    f"pattern over {SPAN / rate / 3600:g} h, 16 x 4 GPUs")
    if m := re.fullmatch(r"philly(\d+)", name):
        return dict(s, jobs=philly_slice(int(m[1])), cluster=ClusterView.homogeneous(4, 8), modes=("none",),
                    what=f"800 Philly jobs from row {m[1]}, 4 x 8 GPUs, duration-only (no remaining work in any mode)")
    m = re.fullmatch(r"wl([1-4])-(8x4|32x4|hetero|int(\d+)|rp(\d+))", name)
    if not m:
        raise SystemExit(f"--scenarios: unknown {name!r} (--list)")
    jobs = read_workload(shared_data() / "pollux" / "workloads" / f"workload-{m[1]}.csv").jobs
    kind, what = m[2], f"Pollux workload {m[1]}"
    if kind in ("8x4", "32x4"):
        n = int(kind.split("x")[0])
        capped = [replace(j, requested_gpus=min(j.requested_gpus, 4 * n)) for j in jobs]
        over = sum(j.requested_gpus > 4 * n for j in jobs)
        return dict(s, jobs=capped, cluster=ClusterView.homogeneous(n, 4),
                    what=f"{what}, {kind} GPUs" + (f" ({over} request(s) capped at {4 * n} GPUs)" if over else ""))
    if kind == "hetero":
        speeds, measured = measured_gpu_speeds("h100")
        cluster = ClusterView(tuple(NodeView(f"t4-{i}", 4, "t4") for i in range(12))
                              + tuple(NodeView(f"h100-{i}", 4, "h100") for i in range(4)))
        return dict(s, jobs=jobs, cluster=cluster, speeds=speeds,
                    what=f"{what}, 12 x 4 T4 + 4 x 4 H100 (H100 speed measured for {', '.join(measured)}, "
                         f"the geometric mean assumed for the rest)")
    if m[3]:
        return dict(s, jobs=jobs, interval=float(m[3]), what=f"{what}, 16 x 4 GPUs, {m[3]} s interval")
    return dict(s, jobs=jobs, restart=float(m[4]), what=f"{what}, 16 x 4 GPUs, {m[4]} s restart")


def _alone(name: str) -> dict[str, float]:
    from dlsched.sim.fairness import isolated_jcts

    s = scenario(name)
    return isolated_jcts(s["jobs"], s["cluster"], s["interval"], s["restart"])


def _one(args: tuple[str, str, str]) -> tuple[tuple[str, str, str], dict]:
    from dlsched.sim import run

    name, policy, mode = args
    s = scenario(name)
    t = time.perf_counter()
    try:
        r = run(s["jobs"], policy, s["cluster"], interval=s["interval"], restart_penalty=s["restart"],
                remaining=mode, gpu_speed=s["speeds"], horizon=HORIZON)
    except Exception as e:   # a crash is a finding: reported in the table, the other runs go on
        return args, {"crash": f"{type(e).__name__}: {e}"}
    out = r.summary()
    out.update(wall_s=time.perf_counter() - t, jct=r.jct(), never_started=int(r.jobs.start.isna().sum()),
               unfinished=int(r.jobs.finish.isna().sum()), max_restarts=int(r.jobs.restarts.max()),
               restart_hours=float(r.jobs.restarts.sum() * s["restart"] / 3600))
    return args, out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--scenarios", nargs="+", default=list(DEFAULT))
    ap.add_argument("--policies", nargs="+", default=list(POLICIES))
    ap.add_argument("--procs", type=int, default=min(2, os.cpu_count() or 1))
    ap.add_argument("--list", action="store_true", help="describe the default scenarios and exit")
    args = ap.parse_args()
    if args.list:
        for n in args.scenarios:
            print(f"{n}: {scenario(n)['what']}")
        return
    descr = {n: scenario(n) for n in args.scenarios}       # unknown names fail here, before any simulation
    tasks = [(n, p, m) for n in args.scenarios for p in args.policies
             for m in (descr[n]["modes"][:1] if p in INFORMATION_FREE else descr[n]["modes"])]
    with ProcessPoolExecutor(args.procs) as pool:
        alone = dict(zip(args.scenarios, pool.map(_alone, args.scenarios)))
        results = {}
        for key, r in pool.map(_one, tasks):
            results[key] = r
            print(f"  {' '.join(key)}: {r.get('crash') or '%.0f s' % r['avg_jct']}", file=sys.stderr, flush=True)
    print("Elastic policies in predicted and none (never an oracle); Tiresias and FIFO read no remaining work (one "
          "run, shown as 'none*'). x gp = avg JCT / goodput's in the same mode; x tir / x fifo = / Tiresias' / "
          "FIFO's. rho = JCT / JCT alone at the request. restart h = restarts x penalty, GPU-less hours of jobs.")
    summary = []
    for n in args.scenarios:
        print(f"\n== {n}: {descr[n]['what']}; {descr[n]['interval']:g} s interval, {descr[n]['restart']:g} s restart")
        print(f"{'policy':13} {'mode':9} {'avg JCT':>8} {'p50':>7} {'p99':>8} {'makespan':>9} {'util':>5} "
              f"{'rho max':>8} {'rho avg':>7} {'restarts':>8} {'max/job':>7} {'restart h':>9} {'unfin':>5} "
              f"{'x gp':>6} {'x tir':>6} {'x fifo':>6} {'wall s':>6}")
        ref = lambda p, m: results.get((n, p, descr[n]["modes"][0] if p in INFORMATION_FREE else m), {})  # noqa: E731
        for p in args.policies:
            for m in descr[n]["modes"][:1] if p in INFORMATION_FREE else descr[n]["modes"]:
                r = results[n, p, m]
                label = "none*" if p in INFORMATION_FREE else m
                if "crash" in r:
                    print(f"{p:13} {label:9} CRASH {r['crash']}")
                    summary.append((n, p, m, "crash"))
                    continue
                rho = np.array([j / alone[n][i] for i, j in r["jct"].items()]) if r["jct"] else np.array([np.nan])
                x = {k: (r["avg_jct"] / ref(k, m)["avg_jct"] if ref(k, m).get("avg_jct") else float("nan"))
                     for k in ("goodput", "tiresias", "fifo")}
                print(f"{p:13} {label:9} {r['avg_jct']:8.0f} {r['p50_jct']:7.0f} {r['p99_jct']:8.0f} "
                      f"{r['makespan']:9.0f} {r['gpu_utilisation']:5.2f} {rho.max():8.2f} {rho.mean():7.2f} "
                      f"{r['restarts']:8d} {r['max_restarts']:7d} {r['restart_hours']:9.1f} {r['unfinished']:5d} "
                      + " ".join(f"{v:6.3f}" if v == v else f"{'-':>6}" for v in x.values()) + f" {r['wall_s']:6.0f}")
                flags = ([f"{r['unfinished']} jobs unfinished at {HORIZON / 86400:g} days"] if r["unfinished"] else []) \
                    + ([f"worse than FIFO ({x['fifo']:.2f}x)"] if x["fifo"] > 1.0 else [])
                summary.append((n, p, m, "; ".join(flags)))
    print("\npathologies (crash, a job unfinished by the horizon, an avg JCT above FIFO's):")
    found = [f"  {n} {p} {m}: {f}" for n, p, m, f in summary if f]
    print("\n".join(found) if found else "  none")
    gp = [(n, m, results[n, "goodput", m]["avg_jct"] / ref_t["avg_jct"]) for n in args.scenarios
          for m in descr[n]["modes"] if "goodput" in args.policies and "tiresias" in args.policies
          and "avg_jct" in results[n, "goodput", m] and "avg_jct" in (ref_t := results[n, "tiresias", descr[n]["modes"][0]])]
    if gp:
        print("target: goodput <= 1.00x Tiresias in every scenario and mode; got "
              + ", ".join(f"{n}/{m} {v:.3f}" for n, m, v in gp))


if __name__ == "__main__":
    main()
