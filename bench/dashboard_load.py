"""Dashboard page load with 1 000 jobs in the store (target <= 1 s), in a real headless Chromium.

The store is filled through its own API: 600 finished, 100 running (placements, 60 progress records
and a prediction each, a resize in the allocation history), 300 queued; the cluster is 32 nodes x 8
GPUs. The API runs under uvicorn as in the service. We print (and, for context, a Prometheus scrape of the same store):
* page load: navigation start -> overview fully rendered (cluster, 400-row queue, Gantt of 300 jobs),
  measured by the page itself (``performance.now()`` into ``data-loaded-ms``), median of 3 loads;
* the overview JSON alone (server side), median of 5 requests;
* Chromium's whole process run for one ``--dump-dom`` (start-up included), for context.

Usage: PYTHONPATH=src python bench/dashboard_load.py
"""
from __future__ import annotations

import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx
import uvicorn

from dlsched.service.api import create_app
from dlsched.service.server import free_port, wait_for_http
from dlsched.service.store import Store
from dlsched.spec import ClusterSpec, JobSpec

TARGET_S = 1.0
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-quic",
         "--no-first-run", "--disable-component-update", "--disable-sync"]


def fill(store: Store, cluster: ClusterSpec, now: float) -> None:
    rng = random.Random(0)
    free = {n.name: n.gpus for n in cluster.nodes}
    for i in range(1000):
        gpus = rng.choice([1, 2, 2, 4])
        spec = JobSpec(name=f"job-{i:04d}", entry="examples/mlp.py:make_job", gpus=gpus, total_samples=100_000)
        t_sub = now - 3600 + i * 3
        jid = store.submit(spec, now=t_sub)
        if i < 600:                                      # finished
            store.transition(jid, "running", now=t_sub + 5, num_gpus=gpus, placement={"node00": gpus})
            store.record_allocation(jid, t_sub + 5, gpus, None, {"node00": gpus})
            store.transition(jid, "finished", now=t_sub + 60)
            store.record_allocation(jid, t_sub + 60, 0, None, {})
        elif i < 700:                                    # running, with progress and a prediction
            node = next(n for n, f in free.items() if f >= gpus)
            free[node] -= gpus
            t0 = now - 600 + (i - 600)
            store.transition(jid, "running", now=t0, num_gpus=gpus, placement={node: gpus})
            store.record_allocation(jid, t0, max(1, gpus // 2), None, {node: max(1, gpus // 2)})
            store.record_allocation(jid, t0 + 30, gpus, None, {node: gpus})
            recs = [{"time": t0 + k, "step": k, "epoch": 0, "samples": 256.0 * k, "loss": 1 / (0.01 * k + 0.5) + 0.1,
                     "samples_per_s": 256.0, "workers": gpus, "batch_size": 64} for k in range(1, 61)]
            store.add_progress(jid, recs, 1000, samples=256.0 * 60, last_loss=recs[-1]["loss"], samples_per_s=256.0)
            store.add_prediction(jid, now, 0.15, 100_000, 300.0 + i, now + 300.0 + i,
                                 {"b0": 0.01, "b1": 0.5, "b2": 0.1, "rmse": 0.001})


def webdriver_loads(tmp: Path, url: str, n: int) -> list[float]:
    """Load ``url`` ``n`` times in one chromedriver session (W3C WebDriver over HTTP); seconds each."""
    port = free_port()
    drv = subprocess.Popen(["chromedriver", f"--port={port}"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{port}"
    try:
        if not wait_for_http(f"{base}/status", 10, drv):
            raise SystemExit("chromedriver did not start")
        caps = {"capabilities": {"alwaysMatch": {"goog:chromeOptions": {
            "args": [*FLAGS, "--disable-application-cache", f"--user-data-dir={tmp / 'wd-profile'}"]}}}}
        sid = httpx.post(f"{base}/session", json=caps, timeout=60).json()["value"]["sessionId"]
        out = []
        try:
            for _ in range(n):
                httpx.post(f"{base}/session/{sid}/url", json={"url": "about:blank"}, timeout=60)
                httpx.post(f"{base}/session/{sid}/url", json={"url": url}, timeout=60)
                for _ in range(3000):
                    v = httpx.post(f"{base}/session/{sid}/execute/sync", timeout=30, json={
                        "script": "return document.body.dataset.loadedMs || null", "args": []}).json()["value"]
                    if v:
                        out.append(float(v) / 1000)
                        break
                    time.sleep(0.01)
                else:
                    raise TimeoutError("page never rendered")
        finally:
            httpx.delete(f"{base}/session/{sid}", timeout=30)
        return out
    finally:
        drv.terminate()
        drv.wait()


def main() -> None:
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        sys.exit("chromium not installed: apt-get install -y chromium chromium-driver")
    cluster = ClusterSpec(nodes=[{"name": f"node{i:02d}", "gpus": 8} for i in range(32)], policy="fifo")
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        store = Store(tmp / "dlsched.db")
        t = time.perf_counter()
        fill(store, cluster, time.time())
        print(f"store: {store.count()} jobs, {store.snapshot()} rows (filled in {time.perf_counter() - t:.1f} s)")
        port = free_port()
        server = uvicorn.Server(uvicorn.Config(create_app(store, cluster, tmp), host="127.0.0.1", port=port,
                                               log_level="warning", access_log=False))
        th = threading.Thread(target=server.run, daemon=True)
        th.start()
        while not server.started:
            time.sleep(0.02)
        url = f"http://127.0.0.1:{port}"
        try:
            api = []
            for _ in range(5):
                t = time.perf_counter()
                r = httpx.get(f"{url}/dashboard/api/overview", timeout=30)
                api.append(time.perf_counter() - t)
                r.raise_for_status()
            size = len(r.content)
            scrapes = []   # the same store as Prometheus sees it (service/metrics.py): the first reads every event
            for _ in range(5):
                t = time.perf_counter()
                m = httpx.get(f"{url}/metrics", timeout=30)
                scrapes.append(time.perf_counter() - t)
                m.raise_for_status()
            loads, walls = [], []
            for k in range(3):                          # cold profile each time: no HTTP cache
                t = time.perf_counter()
                out = subprocess.run([chromium, *FLAGS, f"--user-data-dir={tmp / f'profile{k}'}",
                                      "--virtual-time-budget=10000", "--dump-dom", f"{url}/dashboard/"],
                                     capture_output=True, text=True, timeout=120)
                walls.append(time.perf_counter() - t)
                if "load-error" in out.stdout or 'data-loaded-ms="' not in out.stdout:
                    sys.exit(f"page did not render: {out.stdout[:500]} {out.stderr[-500:]}")
                rows = out.stdout.count("<tr data-job=")
            # Real-time load: chromedriver drives a headless Chromium (no virtual time), the page records
            # performance.now() (navigation start -> rendered) once the overview is laid out.
            loads = webdriver_loads(tmp, f"{url}/dashboard/", 5)
        finally:
            server.should_exit = True
            th.join(timeout=10)
    page = statistics.median(loads)
    print(f"overview JSON: median {statistics.median(api) * 1000:.0f} ms over 5 requests ({size / 1024:.0f} KiB)")
    print(f"page load with 1000 jobs (navigation -> rendered, real time via chromedriver, {rows} queue rows): median {page:.3f} s "
          f"(loads {', '.join(f'{x:.3f}' for x in loads)})  target <= {TARGET_S:.1f} s  -> {'MET' if page <= TARGET_S else 'MISSED'}")
    print(f"GET /metrics: first {scrapes[0] * 1000:.0f} ms, then median {statistics.median(scrapes[1:]) * 1000:.0f} ms "
          f"({len(m.content) / 1024:.0f} KiB; Prometheus's default scrape timeout is 10 s)")
    print(f"chromium process incl. start-up, one --dump-dom: median {statistics.median(walls):.2f} s (context only)")


if __name__ == "__main__":
    main()
