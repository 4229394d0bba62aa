"""All-reduce vs parameter server (sync, SSP, async) on the same models, in one run, real processes (gloo, CPU).

Every run is ``python -m dlsched.train.run`` (the same start command the service uses) with W workers; the
PS runs add P server processes (servers count as resources: reported as "procs"). Per model and mode:
  throughput    samples/s between the first and the last progress record (start-up excluded)
  time-to-loss  seconds from process start until the training loss, averaged over the last 10 global batches
                (a PS round, or 10 all-reduce steps), first reaches the target: the all-reduce run's final
                such average x (1 + TOLERANCE). "never" = not reached in the run.
  final loss    that average at the end of the run.
Models: ``examples/mlp.py`` (small dense MLP) and ``examples/embedding.py`` (a 500k-row embedding table,
2M parameters, each batch touching ~512 rows: the case a parameter server is built for, sparse access).
Information: every side knows only the job and its settings; nothing is tuned per mode.

  moved/step    values a worker pushed per step (it pulls as many): the whole model for a dense PS, only the
                rows its batch read for a sparse one (``--sparse``, train/ps_sparse.py). All-reduce moves the
                whole model's gradient every step (no sparse all-reduce is built).
The PS modes run dense on both models and also sparse on the embedding model (on the MLP, which has no
embedding table, sparse moves everything, as dense does). Host: 2 CPU cores shared with other work; no GPU
was lent.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))

from dlsched.train.progress_log import read_progress  # noqa: E402

TOLERANCE = 0.10
WINDOW = 10  # global batches per loss average (= the PS round)
MODELS = {
    "mlp": ("examples/mlp.py:make_job", {"num_samples": 2048, "hidden": 256, "epochs": 3}, 32),
    "embedding": ("examples/embedding.py:make_job", {"num_samples": 2048, "rows": 500_000, "epochs": 3}, 64),
}
MODES = ("allreduce", "sync", "ssp:2", "async")
SPARSE_MODES = {"embedding": ("sync sparse", "ssp:2 sparse", "async sparse")}


def run(model: str, mode: str, workers: int, servers: int) -> dict:
    entry, params, batch = MODELS[model]
    with tempfile.TemporaryDirectory(prefix="ps-vs-ar-") as d:
        cmd = [sys.executable, "-m", "dlsched.train.run", "--job-dir", d, "--entry", str(REPO / entry),
               "--workers", str(workers), "--batch-size", str(batch), "--threads", "1", "--ckpt-every", str(WINDOW)]
        cmd += [a for k, v in params.items() for a in ("--param", f"{k}={v}")]
        if mode != "allreduce":
            cmd += ["--strategy", "ps", "--servers", str(servers), "--sync", mode.split()[0]]
            cmd += ["--sparse"] if mode.endswith("sparse") else []
        env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
        start = time.time()
        subprocess.run(cmd, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        recs = [r for r in read_progress(Path(d)) if "event" not in r and "loss" in r]
        moved = [json.loads(x)["pushed"] for f in (Path(d) / "ps" / "records").glob("*.jsonl")
                 for x in f.read_text().splitlines()]
    t = np.array([r["time"] for r in recs]) - start
    samples = np.array([r["samples"] for r in recs], float)
    loss = np.array([r["loss"] for r in recs])
    if mode == "allreduce":  # per-step records: average the last WINDOW steps, like a PS round does
        loss = np.convolve(loss, np.ones(WINDOW) / WINDOW, mode="full")[: len(loss)]
        loss[: WINDOW - 1] = np.inf
    return {"t": t, "loss": loss, "throughput": (samples[-1] - samples[0]) / max(t[-1] - t[0], 1e-9),
            "procs": workers + (0 if mode == "allreduce" else servers), "wall": time.time() - start,
            "moved": np.mean(moved) if moved else None}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--servers", type=int, default=1)
    ap.add_argument("--models", nargs="+", default=list(MODELS))
    a = ap.parse_args()
    for model in a.models:
        res = {mode: run(model, mode, a.workers, a.servers) for mode in MODES + SPARSE_MODES.get(model, ())}
        target = res["allreduce"]["loss"][-1] * (1 + TOLERANCE)
        print(f"\n{model}: target loss {target:.4f} (all-reduce's final {WINDOW}-batch average + {100 * TOLERANCE:.0f} %)")
        print(f"{'mode':>13} {'procs':>5} {'samples/s':>10} {'vs all-reduce':>13} {'time-to-loss s':>14} "
              f"{'final loss':>10} {'wall s':>7} {'moved/step':>10}")
        base = res["allreduce"]["throughput"]
        for mode, r in res.items():
            hit = np.flatnonzero(r["loss"] <= target)
            ttl = f"{r['t'][hit[0]]:.1f}" if hit.size else "never"
            moved = "all" if r["moved"] is None else f"{r['moved']:.0f}"
            print(f"{mode:>13} {r['procs']:>5} {r['throughput']:>10.0f} {r['throughput'] / base:>12.2f}x "
                  f"{ttl:>14} {r['loss'][-1]:>10.4f} {r['wall']:>7.1f} {moved:>10}")
        best = max(res, key=lambda m: res[m]["throughput"])
        hits = {m: r["t"][np.flatnonzero(r["loss"] <= target)[0]] for m, r in res.items() if (r["loss"] <= target).any()}
        first = min(hits, key=hits.get) if hits else "none"
        print(f"{model}: fastest is {best}; a PS mode beats all-reduce on throughput: "
              f"{'yes' if best != 'allreduce' else 'no'}; first to the target loss: {first}")
    print(f"\n(workers={a.workers}, servers={a.servers}; 2 shared CPU cores, no GPU was lent)")


if __name__ == "__main__":
    main()
