"""Hostile requests against a real service process: how fast each is refused, and how fast /healthz answers
meanwhile. Targets (issue 11): every refusal a 4xx within 1 s, /healthz under 100 ms throughout.

The service runs as its own process (``dlsched serve``, auth on, the default); a second connection polls
/healthz for the whole run. Each attack is sent ``--rounds`` times. Before the fix a 419-byte alias bomb
froze /healthz for 4.4 s and a 467-byte one answered 500 after 42 s; a 60 KB nested document segfaulted it.
"""
from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx
import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from dlsched.service.server import free_port, wait_for_http  # noqa: E402

YAML, JSON = "application/yaml", "application/json"
BOMB = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{c}: &{c} [{', '.join(['*' + p] * 9)}]\n" for p, c in zip("abcdefgh", "bcdefghi"))
ATTACKS = [   # (name, method, path, content type, body)
    ("os:system entry", "POST", "/jobs", YAML, "name: x\nentry: os:system\nparams: {command: 'id > /tmp/F'}\n"),
    ("absolute path entry", "POST", "/jobs", YAML, "name: x\nentry: /tmp/evil.py:make_job\n"),
    ("../ traversal entry", "POST", "/jobs", YAML, "name: x\nentry: ../evil.py:make_job\n"),
    ("cross-origin text/plain", "POST", "/jobs", "text/plain", "name: x\nentry: x.py:make_job\n"),
    ("alias bomb", "POST", "/jobs", YAML, BOMB),
    ("nesting 30000 deep (60 KB)", "POST", "/jobs", YAML, "a: " + "[" * 30000 + "]" * 30000),
    ("params nested 1000 deep (JSON)", "POST", "/jobs", JSON,
     '{"name": "x", "entry": "x.py:make_job", "params": ' + '{"a": ' * 1000 + "1" + "}" * 1001),
    ("duplicate keys", "POST", "/jobs", YAML, "name: x\nentry: x.py:make_job\ngpus: 1\ngpus: 4\n"),
    ("job id 2^63", "GET", "/jobs/9223372036854775808", None, None),
    ("/events?after=10^30", "GET", "/events?after=" + "1" * 31, None, None),
    ("1 MiB + 1 body", "POST", "/jobs", YAML, "#" * ((1 << 20) + 1)),
]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=20)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        cluster = Path(d) / "cluster.yaml"
        cluster.write_text("nodes: [{name: n0, gpus: 1}]\npolicy: fifo\ninterval_s: 3600\n")
        port = free_port()
        env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
        srv = subprocess.Popen([sys.executable, "-m", "dlsched.cli", "serve", "--cluster", str(cluster),
                                "--state-dir", str(Path(d) / "state"), "--port", str(port), "--runtime", "true"],
                               env=env, cwd=d, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        url = f"http://127.0.0.1:{port}"
        health, done = [], threading.Event()
        try:
            if not wait_for_http(f"{url}/healthz", 60, srv):
                raise SystemExit("service did not start")
            auth = {"Authorization": f"Bearer {(Path(d) / 'state' / 'token').read_text().strip()}"}

            def probe():
                with httpx.Client(base_url=url, timeout=30) as h:
                    while not done.is_set():
                        t = time.perf_counter()
                        h.get("/healthz").raise_for_status()
                        health.append(time.perf_counter() - t)
                        time.sleep(0.005)

            prober = threading.Thread(target=probe)
            prober.start()
            rows = []
            with httpx.Client(base_url=url, headers=auth, timeout=60) as c:
                for name, method, path, ctype, body in ATTACKS:
                    took, codes = [], set()
                    for _ in range(a.rounds):
                        headers = {"content-type": ctype} if ctype else {}
                        if ctype == "text/plain":
                            headers["origin"] = "http://evil.example"
                        t = time.perf_counter()
                        r = c.request(method, path, content=body, headers=headers)
                        took.append(time.perf_counter() - t)
                        codes.add(r.status_code)
                    rows.append((name, sorted(codes), max(took)))
            done.set()
            prober.join()
            alive = srv.poll() is None
        finally:
            done.set()
            srv.send_signal(signal.SIGTERM)
            srv.wait(timeout=30)
    print(f"{len(ATTACKS)} attacks x {a.rounds} rounds against a real service process (auth on):")
    for name, codes, worst in rows:
        print(f"  {name:<32} HTTP {','.join(map(str, codes)):<8} slowest {worst * 1e3:7.1f} ms  (target < 1000 ms)")
    h = np.array(health) * 1e3
    print(f"/healthz meanwhile: {len(h)} probes, p50 {np.percentile(h, 50):.1f} ms, p99 {np.percentile(h, 99):.1f} ms, "
          f"max {h.max():.1f} ms (target < 100 ms); service alive after: {alive}")
    ok = all(400 <= c < 500 for _, codes, _ in rows for c in codes) and alive
    print("all refused with a 4xx" if ok else "NOT all refused with a 4xx")


if __name__ == "__main__":
    main()
