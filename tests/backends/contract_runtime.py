"""A tiny, honest implementation of the job runtime contract (``dlsched.train``) for backend tests.

It exists so the Ray backend's tests exercise the contract itself - control.json generations,
progress.jsonl, status.json, checkpoint resume, worker processes - in a fraction of a second per
step on a 2-core machine, independently of the real PyTorch runtime (tested on its own branch).
Exactly-once: every step appends the sample ids it consumed to ``samples.log`` and then commits
``ckpt/state.json`` (offset + log length) atomically; a resume truncates the log to the commit.

Usage: python contract_runtime.py --job-dir D --entry X --workers N [--batch-size B]
       [--param n_samples=400] [--param step_s=0.05] [--param abandon_grows=0]

``abandon_grows=K``: the first K grows are given up as a real runtime gives up one whose new workers never
join (a ``resize_abandoned`` event naming the control generation; the old workers train on).
``hold=PATH``: no step while PATH exists (a test keeps the job running across what it does, whatever the load).
``fail=1``: after its last step the job fails (status.json ``failed``, exit 1) instead of finishing.
``stop=1``: after its last step it ends as one stopped from outside does (status.json ``stopped``, exit 143).
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path


def _atomic(path: Path, obj: dict) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(obj))
    os.replace(tmp, path)


def _spawn_workers(n: int) -> list[subprocess.Popen]:
    """Stand-in worker processes: idle, and gone as soon as their coordinator is (no orphans)."""
    watch = f"import os, time\nwhile os.getppid() == {os.getpid()}: time.sleep(0.3)"
    return [subprocess.Popen([sys.executable, "-c", watch]) for _ in range(n)]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--job-dir", required=True)
    ap.add_argument("--entry", required=True)
    ap.add_argument("--workers", type=int, required=True)
    ap.add_argument("--batch-size", type=int)
    ap.add_argument("--reference-batch-size", type=int)  # the contract's: the LR's batch
    ap.add_argument("--param", action="append", default=[])
    a = ap.parse_args()
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})  # started blocked (the contract); its default: exit
    params = dict(p.split("=", 1) for p in a.param)
    n_samples, step_s = int(params.get("n_samples", 400)), float(params.get("step_s", 0.05))
    abandon_grows = int(params.get("abandon_grows", 0))
    hold = Path(params["hold"]) if params.get("hold") else None
    if n_samples < 1:
        print(f"contract runtime: n_samples={n_samples} must be >= 1", file=sys.stderr)
        return 3
    d = Path(a.job_dir)
    (d / "ckpt").mkdir(parents=True, exist_ok=True)
    ckpt, log_path, prog = d / "ckpt" / "state.json", d / "samples.log", d / "progress.jsonl"
    state = json.loads(ckpt.read_text()) if ckpt.exists() else {"offset": 0, "step": 0, "log_bytes": 0}
    with open(log_path, "ab") as f:  # drop what was logged after the last commit
        f.truncate(state["log_bytes"])
    workers, generation = a.workers, 0
    batch = a.batch_size or 8 * workers
    procs = _spawn_workers(workers)
    _atomic(d / "status.json", {"state": "running", "pid": os.getpid(), "workers": workers, "error": None,
                                "worker_pids": [p.pid for p in procs]})
    t_last = time.time()
    while state["offset"] < n_samples:
        try:
            ctl = json.loads((d / "control.json").read_text())
        except (FileNotFoundError, ValueError):
            ctl = {}
        if ctl.get("generation", 0) > generation:
            generation = ctl["generation"]
            if abandon_grows and ctl.get("workers", 0) > workers:
                abandon_grows -= 1
                with open(prog, "a") as f:
                    f.write(json.dumps({"event": "resize_abandoned", "time": time.time(), "control_generation":
                                        generation, "reason": f"new worker {workers} exited with 3"}) + "\n")
                continue
            if ctl.get("workers") and ctl["workers"] != workers:
                workers = ctl["workers"]
                for p in procs:
                    p.kill()
                procs = _spawn_workers(workers)
                with open(prog, "a") as f:
                    f.write(json.dumps({"event": "resized", "time": time.time(), "workers": workers,
                                        "generation": generation}) + "\n")
            batch = ctl.get("batch_size") or batch
            _atomic(d / "status.json", {"state": "running", "pid": os.getpid(), "workers": workers,
                                        "error": None, "worker_pids": [p.pid for p in procs]})
        time.sleep(step_s)
        while hold is not None and hold.exists():
            time.sleep(0.05)
        ids = list(range(state["offset"], min(state["offset"] + batch, n_samples)))
        with open(log_path, "a") as f:
            f.write(" ".join(map(str, ids)) + "\n")
        state = {"offset": ids[-1] + 1, "step": state["step"] + 1, "log_bytes": log_path.stat().st_size}
        _atomic(ckpt, state)
        now = time.time()
        k = state["step"]
        with open(prog, "a") as f:
            f.write(json.dumps({"time": now, "step": k, "epoch": 0, "samples": state["offset"],
                                "loss": 1.0 / (0.05 * k + 1.0) + 0.1, "samples_per_s": len(ids) / max(now - t_last, 1e-6),
                                "workers": workers, "batch_size": batch,
                                "per_worker_samples_per_s": [len(ids) / workers / max(now - t_last, 1e-6)] * workers}) + "\n")
        t_last = now
    for p in procs:
        p.kill()
    if params.get("fail") == "1":
        _atomic(d / "status.json", {"state": "failed", "pid": os.getpid(), "workers": workers,
                                    "error": "contract runtime: failed as asked (fail=1)"})
        return 1
    if params.get("stop") == "1":
        _atomic(d / "status.json", {"state": "stopped", "pid": os.getpid(), "workers": workers, "error": None})
        return 143
    with open(prog, "a") as f:
        f.write(json.dumps({"event": "finished", "time": time.time()}) + "\n")
    _atomic(d / "status.json", {"state": "finished", "pid": os.getpid(), "workers": workers, "error": None})
    return 0


if __name__ == "__main__":
    sys.exit(main())
