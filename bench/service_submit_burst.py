"""500 job submissions in a burst against a real service process: all must be stored; p50/p99 latency printed.

The service runs as its own process (``dlsched serve``, SQLite with synchronous=FULL: a 201 means durable) on a
cluster with no GPU slots, so nothing starts and the figure is the submission path alone. Submissions come from
``--clients`` concurrent HTTP clients.
"""
from __future__ import annotations

import argparse
import os
import signal
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from dlsched.service.server import free_port, wait_for_http  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", type=int, default=500)
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--interval", type=float, default=2.0, help="scheduling interval of the service (s)")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        cluster = Path(d) / "cluster.yaml"
        # one slot: the service refuses at submit time a job asking more GPUs than the cluster has; the
        # runtime exits at once, so what is measured is submission, not training
        cluster.write_text(f"nodes: [{{name: n0, gpus: 1}}]\npolicy: fifo\ninterval_s: {a.interval}\n")
        port = free_port()
        env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
        srv = subprocess.Popen([sys.executable, "-m", "dlsched.cli", "serve", "--cluster", str(cluster),
                                "--state-dir", str(Path(d) / "state"), "--port", str(port), "--runtime", "true"], env=env,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        url = f"http://127.0.0.1:{port}"
        try:
            if not wait_for_http(f"{url}/healthz", 30, srv):
                raise SystemExit("service did not start")
            auth = {"Authorization": f"Bearer {(Path(d) / 'state' / 'token').read_text().strip()}"}  # made 0600 at start
            body = "name: burst-{i}\nentry: examples/mlp.py:make_job\ngpus: 1\nbatch_size: 32\nparams: {{epochs: 1}}\n"

            local = threading.local()    # one keep-alive connection per client thread

            def submit(i: int) -> tuple[float, int]:
                c = getattr(local, "c", None) or setattr(local, "c", httpx.Client(base_url=url, headers=auth, timeout=60)) or local.c
                t = time.perf_counter()
                r = c.post("/jobs", content=body.format(i=i), headers={"content-type": "application/yaml"})
                return time.perf_counter() - t, r.status_code

            t0 = time.perf_counter()
            with ThreadPoolExecutor(a.clients) as pool:
                results = list(pool.map(submit, range(a.jobs)))
            wall = time.perf_counter() - t0
        finally:
            srv.send_signal(signal.SIGTERM)
            srv.wait(timeout=30)
        stored = sqlite3.connect(Path(d) / "state" / "dlsched.db").execute("SELECT COUNT(*) FROM jobs").fetchone()[0]
    lat = np.array([r[0] for r in results]) * 1e3
    ok = sum(r[1] == 201 for r in results)
    print(f"{a.jobs} submissions from {a.clients} concurrent clients in {wall:.2f} s ({a.jobs / wall:.0f}/s)")
    print(f"acknowledged {ok}, stored {stored} -> {'all stored' if stored == ok == a.jobs else 'LOST SUBMISSIONS'}")
    print(f"latency: p50 {np.percentile(lat, 50):.1f} ms, p99 {np.percentile(lat, 99):.1f} ms, max {lat.max():.1f} ms "
          f"(target: all stored; p99 reported)")


if __name__ == "__main__":
    main()
