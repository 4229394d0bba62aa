"""SIGKILL a real service (``dlsched serve``, SQLite) again and again while clients submit jobs and its rounds start
and end them; restart it each time; then check that nothing was lost or run twice. Targets: every acknowledged (201)
submission stored, no submission stored twice, no job started from the queue twice, never two coordinators of one
job alive at once (sampled every 0.2 s; a coordinator's own workers and helpers are not counted).

A submission whose connection the kill cut is "perhaps carried out" (``docs/security.md``): it may be stored without a
201, so stored >= acknowledged. Example: ``python bench/kill_during_submissions.py --kills 3``.
"""
from __future__ import annotations

import argparse
import collections
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx
import psutil

ROOT = Path(__file__).resolve().parents[1]
ACTIVE = ("queued", "running", "rescaling")


class Serve:
    """``dlsched serve`` as its own process, killed and restarted on one state folder."""

    def __init__(self, state: Path, port: int):
        self.state, self.url, self.port = state, f"http://127.0.0.1:{port}", port
        (state.parent / "cluster.yaml").write_text("nodes: [{name: n0, gpus: 3}]\npolicy: fifo\ninterval_s: 0.5\n")
        self.proc = None

    def start(self) -> None:
        log = open(self.state.parent / "serve.log", "a")
        self.proc = subprocess.Popen([sys.executable, "-m", "dlsched.cli", "serve", "-c", str(self.state.parent /
                                      "cluster.yaml"), "--port", str(self.port), "--workdir", str(ROOT),
                                      "--state-dir", str(self.state)], cwd=ROOT, stdout=log, stderr=log,
                                     start_new_session=True)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            try:
                if httpx.get(self.url + "/healthz", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                time.sleep(0.1)
        raise SystemExit("the service did not start: see " + str(self.state.parent / "serve.log"))

    def kill(self) -> None:
        os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait()

    def headers(self) -> dict:
        return {"Authorization": "Bearer " + (self.state / "token").read_text().strip()}


def coordinator_roots(state: Path) -> collections.Counter:
    """Job folder -> live coordinators: runtime processes naming it not forked from one naming it."""
    procs = {p.pid: p for p in psutil.process_iter(["cmdline", "ppid"])}
    out = collections.Counter()
    for p in procs.values():
        cl = p.info["cmdline"] or []
        if "dlsched.train.run" in cl and "--job-dir" in cl:
            folder, parent = cl[cl.index("--job-dir") + 1], procs.get(p.info["ppid"])
            if folder.startswith(str(state)) and not (parent and folder in (parent.info["cmdline"] or [])):
                out[folder] += 1
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--kills", type=int, default=3)
    ap.add_argument("--submitters", type=int, default=6)
    ap.add_argument("--port", type=int, default=18717)
    args = ap.parse_args()
    state = Path(tempfile.mkdtemp(prefix="dlsched-kill-")) / "state"
    svc = Serve(state, args.port)
    svc.start()
    acked, errors, lock = [], collections.Counter(), threading.Lock()
    stop_submitting, stop_watching, doubles = threading.Event(), threading.Event(), []

    def submitter(k: int) -> None:
        i = 0
        with httpx.Client(timeout=45) as c:
            while not stop_submitting.is_set():
                i += 1
                spec = {"name": f"c{k}-{i}", "entry": "examples/mlp.py:make_job",
                        "params": {"epochs": 1, "num_samples": 64}}
                try:
                    r = c.post(svc.url + "/jobs", json=spec, headers=svc.headers())
                except httpx.HTTPError as e:   # the service killed: refused, or cut mid-request
                    with lock:
                        errors[type(e).__name__] += 1
                    time.sleep(0.2)
                    continue
                with lock:
                    if r.status_code == 201:
                        acked.append(r.json()["id"])
                    else:
                        errors[r.status_code] += 1

    def watch() -> None:
        while not stop_watching.is_set():
            doubles.extend({d: n} for d, n in coordinator_roots(state).items() if n > 1)
            time.sleep(0.2)

    submitters = [threading.Thread(target=submitter, args=(k,), daemon=True) for k in range(args.submitters)]
    watcher = threading.Thread(target=watch, daemon=True)
    for t in [*submitters, watcher]:
        t.start()
    for kill in range(args.kills):
        time.sleep(4 + kill)   # at different moments of the rounds
        svc.kill()
        time.sleep(0.5)
        svc.start()
    stop_submitting.set()
    for t in submitters:
        t.join()
    with httpx.Client(timeout=30, headers=svc.headers()) as c:
        deadline = time.monotonic() + 1800
        while True:
            jobs = c.get(svc.url + "/jobs", params={"limit": 5000}).json()
            if not any(j["state"] in ACTIVE for j in jobs) or time.monotonic() > deadline:
                break
            time.sleep(2)
        twice = [j["id"] for j in jobs if sum(e["kind"] == "running" and e["detail"].get("from") == "queued"
                                                for e in c.get(svc.url + f"/jobs/{j['id']}/events").json()) > 1]
    stop_watching.set()
    watcher.join()
    svc.proc.send_signal(signal.SIGTERM)
    svc.proc.wait()
    names = collections.Counter(j["name"] for j in jobs)
    print(f"{args.kills} SIGKILLs, {args.submitters} clients: {len(acked)} acknowledged, {len(jobs)} stored, "
          f"{dict(collections.Counter(j['state'] for j in jobs))}; client errors {dict(errors)}")
    print(f"acknowledged but not stored: {len(set(acked) - {j['id'] for j in jobs})} (target 0)")
    print(f"a submission stored twice: {sum(n > 1 for n in names.values())} (target 0)")
    print(f"a job started from the queue twice: {len(twice)} (target 0)")
    print(f"moments with two coordinators of one job: {len(doubles)} (target 0)")
    print(f"still active after 30 min: {sum(j['state'] in ACTIVE for j in jobs)} (target 0)")


if __name__ == "__main__":
    main()
