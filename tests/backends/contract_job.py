"""A tiny job runtime that follows the job runtime contract (see ``dlsched.train``), for backend/service tests.

It really trains (linear regression by SGD in numpy, which starts in a fraction of the time torch needs) in
ONE process; ``--workers`` only scales
the emulated step time, so tests exercise start/resize/stop/resume/progress without the cost of a real
process group. Params: ``samples`` (dataset size), ``epochs``, ``step_s`` (seconds per step on 1 worker),
``fail_at`` (samples after which it crashes; ``error``: the error it says then), ``kill_at`` (samples after which it SIGKILLs itself, as the
OOM killer would), ``ckpt_every`` (steps), ``flood`` (``metrics`` events written before the first step, as a
script reporting between steps in a loop would) and ``big_event`` (bytes of one event's field, written with them), ``first_step_s`` (seconds its first step takes: a large
model's build or a slow data load), ``exit_s`` (seconds it stays after writing ``finished``, until a SIGTERM: a
runtime's teardown) and ``open_ended`` (no ``total_samples``: a job with a target loss, which may end sooner).
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
from pathlib import Path

import numpy as np


def _atomic(path: Path, obj) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(obj))
    os.replace(tmp, path)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--job-dir", required=True)
    ap.add_argument("--entry", required=True)
    ap.add_argument("--workers", type=int, required=True)
    ap.add_argument("--batch-size", type=int, default=None)
    ap.add_argument("--reference-batch-size", type=int)  # the contract's: the LR's batch
    ap.add_argument("--param", action="append", default=[])
    a = ap.parse_args()
    params = dict(p.split("=", 1) for p in a.param)
    n = int(params.get("samples", 256))
    epochs = int(params.get("epochs", 1))
    step_s = float(params.get("step_s", 0.02))
    fail_at = float(params.get("fail_at", "inf"))
    kill_at = float(params.get("kill_at", "inf"))
    ckpt_every = int(params.get("ckpt_every", 5))
    d = Path(a.job_dir)
    (d / "ckpt").mkdir(parents=True, exist_ok=True)
    workers, batch, generation = a.workers, a.batch_size or 32, -1

    rng = np.random.default_rng(0)
    x = rng.standard_normal((n, 8))
    y = x @ np.arange(1.0, 9.0) + 0.1 * rng.standard_normal(n)
    w = np.zeros(8)
    step, samples = 0, 0
    ck = d / "ckpt" / "latest.json"
    if ck.exists():
        state = json.loads(ck.read_text())
        w, step, samples = np.array(state["w"]), state["step"], state["samples"]
    total = n * epochs
    stop = {"now": False}
    signal.signal(signal.SIGTERM, lambda *_: stop.__setitem__("now", True))
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})  # the contract: started blocked, unblock once handled
    _atomic(d / "status.json", {"state": "running", "pid": os.getpid(), "workers": workers, "error": None})
    log = open(d / "progress.jsonl", "a")

    def emit(rec):
        log.write(json.dumps(rec) + "\n")
        log.flush()

    def checkpoint():
        _atomic(ck, {"w": w.tolist(), "step": step, "samples": samples})
        emit({"event": "checkpoint", "step": step, "time": time.time()})

    for i in range(int(params.get("flood", 0))):
        emit({"event": "metrics", "step": 0, "epoch": 0, "metrics": {"val_loss": 1.0 / (i + 1)}, "time": time.time()})
    if int(params.get("big_event", 0)):
        emit({"event": "epoch_end", "epoch": 0, "mean_loss": 1.5, "notes": "x" * int(params["big_event"])})
    while samples < total and not stop["now"]:
        try:
            ctl = json.loads((d / "control.json").read_text())
        except (OSError, ValueError):
            ctl = {}
        if ctl.get("generation", -1) > generation:
            if generation >= 0 and (ctl["workers"] != workers or (ctl.get("batch_size") or batch) != batch):
                emit({"event": "resized", "time": time.time(), "workers": ctl["workers"], "from": workers})
            generation = ctl["generation"]
            workers, batch = ctl["workers"], ctl.get("batch_size") or batch
        t0 = time.time()
        i = rng.integers(0, n, batch)
        err = x[i] @ w - y[i]
        loss = float(np.mean(err ** 2))
        w -= 0.01 * 2 * x[i].T @ err / batch
        time.sleep(step_s / workers + (float(params.get("first_step_s", 0)) if step == 0 else 0))
        step += 1
        samples = min(total, samples + batch)
        if samples > kill_at:
            os.kill(os.getpid(), signal.SIGKILL)
        if samples > fail_at:
            _atomic(d / "status.json", {"state": "failed", "pid": os.getpid(), "workers": workers,
                                        "error": params.get("error", f"injected failure at {samples} samples")})
            return 3
        dt = time.time() - t0
        emit({"time": time.time(), "step": step, "epoch": samples // n, "samples": samples, "loss": loss,
              "samples_per_s": batch / dt, "workers": workers, "batch_size": batch,
              "per_worker_samples_per_s": [batch / dt / workers] * workers,
              "total_samples": None if params.get("open_ended") else total})
        if step % ckpt_every == 0:
            checkpoint()
    checkpoint()
    if samples >= total:
        emit({"event": "finished", "time": time.time(), "samples": samples})
        _atomic(d / "status.json", {"state": "finished", "pid": os.getpid(), "workers": workers, "error": None})
        end = time.monotonic() + float(params.get("exit_s", 0))
        while time.monotonic() < end and not stop["now"]:   # a real runtime's teardown after its finish
            time.sleep(0.02)
    return 0


if __name__ == "__main__":
    sys.exit(main())
