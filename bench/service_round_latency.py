"""Scheduling round latency of the live loop with 1 000 queued jobs (target <= 100 ms, backend actions excluded).

Measures ``LiveLoop.round()`` minus the backend's own time: reading the store, building the JobView snapshots,
the policy's decision, placement, the action diff and the store writes of the resulting transitions. The
backend records and starts nothing (``backends/recording.py``). Policy: ``--policy`` (default fifo).
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from dlsched.backends.recording import RecordingBackend  # noqa: E402
from dlsched.service.loop import LiveLoop  # noqa: E402
from dlsched.service.store import Store  # noqa: E402
from dlsched.spec import load_cluster_spec, load_job_spec  # noqa: E402

TARGET_MS = 100.0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", type=int, default=1000)
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--policy", default="fifo")
    a = ap.parse_args()
    policy = a.policy
    with tempfile.TemporaryDirectory() as d:
        store = Store(Path(d) / "s.db")
        specs = [load_job_spec(f"name: j{i}\nentry: x.py:make_job\ngpus: {1 + i % 4}\nmax_gpus: {4 + i % 4}\n"
                               f"batch_size: 64\nmin_batch_size: 32\nmax_batch_size: 512")
                 for i in range(a.jobs)]
        store.submit_many(specs, now=0.0)
        cluster = load_cluster_spec("nodes: [" + ", ".join(f"{{name: n{i}, gpus: 8}}" for i in range(16)) +
                                    f"]\npolicy: {policy}")
        loop = LiveLoop(store, RecordingBackend(), cluster, d)
        decide_ms, round_ms, predict_ms = [], [], []
        for r in range(a.rounds):
            t = time.perf_counter()
            stats = loop.round()
            round_ms.append(1e3 * (time.perf_counter() - t))
            decide_ms.append(1e3 * stats.decide_s)
            predict_ms.append(1e3 * stats.predict_s)
        active = stats.active_jobs
    p50, p99 = np.percentile(round_ms[1:], [50, 99])
    print(f"policy {policy}, {active} active jobs ({a.jobs} submitted), 128 GPUs on 16 nodes, {a.rounds} rounds")
    print(f"rounds with {active} queued/running jobs: p50 {p50:.1f} ms, p99 {p99:.1f} ms "
          f"(decide step: snapshots + policy + placement + diff, p50 {np.median(decide_ms[1:]):.1f} ms)")
    print(f"writing predictions within the round: max {max(predict_ms):.1f} ms (included above; the policy "
          f"forecast runs on its own thread, see bench/forecast_time.py)")
    print(f"first round after a (re)start: {round_ms[0]:.1f} ms (cold: parses every stored spec once, starts the jobs)")
    print(f"target: round <= {TARGET_MS:.0f} ms -> {'MET' if p99 <= TARGET_MS else 'MISSED'} (p99 {p99:.1f} ms)")


if __name__ == "__main__":
    main()
