"""Simulator speed: workload-1 (160 Pollux jobs, 16x4 GPUs, 60 s interval) per policy, and the full 82k-job Philly
trace with FIFO and Tiresias on 2 000 GPUs (250 nodes x 8). Prints wall time and peak memory against the targets:
Tiresias on a Pollux workload <= 2 s (the peer's own simulator takes ~17 s), Philly <= 60 s, peak RSS <= 2 GiB.

Run: PYTHONPATH=src python bench/sim_speed.py [--skip-philly]
"""
from __future__ import annotations

import resource
import sys
import time

from dlsched.paths import shared_data
from dlsched.policy.base import ClusterView
from dlsched.sim import read_philly, read_workload, run
from dlsched.perf.profile import POLLUX_APPS
from dlsched.perf.pollux import load_app


def timed(fn):
    """(result, wall seconds); the CPU seconds of the last call are kept in ``timed.cpu`` (fairer on a shared host)."""
    t0, c0 = time.perf_counter(), time.process_time()
    out = fn()
    timed.cpu = time.process_time() - c0
    return out, time.perf_counter() - t0


def main() -> None:
    data = shared_data()
    wl = read_workload(data / "pollux/workloads/workload-1.csv")
    r, cold = timed(lambda: run(wl, "tiresias"))
    print(f"tiresias, cold process (traces loaded on demand): {cold:.2f} s wall, {timed.cpu:.2f} s CPU, avg JCT "
          f"{r.avg_jct:.2f}  target <= 2 s (peer ~17 s): {'MET' if cold <= 2 else 'MISSED'}")
    _, load_s = timed(lambda: [load_app(a).warm() for a in POLLUX_APPS])
    print(f"loading + triangulating the 6 application traces: {load_s:.2f} s wall, {timed.cpu:.2f} s CPU (once per process)")
    print("workload-1, 16x4 GPUs, interval 60 s (warm: traces loaded)")
    for policy in ("fifo", "srtf", "tiresias", "optimus"):
        r, first = timed(lambda: run(wl, policy))
        first_cpu = timed.cpu
        _, second = timed(lambda: run(wl, policy))
        target = "  target <= 2 s (peer ~17 s): " + ("MET" if first <= 2 else "MISSED") if policy == "tiresias" else ""
        print(f"  {policy:9s} first {first:6.2f} s ({first_cpu:5.2f} s CPU)  again {second:6.2f} s ({timed.cpu:5.2f} s CPU)"
              f"  avg JCT {r.avg_jct:9.2f}{target}")
    if "--skip-philly" not in sys.argv:
        philly, read_s = timed(lambda: read_philly(data / "philly/philly.csv"))
        print(f"Philly: {len(philly.jobs)} jobs read in {read_s:.2f} s; 2 000 GPUs (250x8), interval 60 s")
        for policy in ("fifo", "tiresias"):
            r, secs = timed(lambda: run(philly, policy, ClusterView.homogeneous(250, 8)))
            s = r.summary()
            print(f"  {policy:9s} {secs:6.2f} s ({timed.cpu:5.2f} s CPU)  finished {s['finished']}  avg JCT {s['avg_jct']:.0f} s  "
                  f"target <= 60 s: {'MET' if secs <= 60 else 'MISSED'}")
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20   # KiB -> GiB
    print(f"peak RSS {peak:.2f} GiB  target <= 2 GiB: {'MET' if peak <= 2 else 'MISSED'}")


if __name__ == "__main__":
    main()
