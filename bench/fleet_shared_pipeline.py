"""Real run on this machine: 4 small heterogeneous CNNs on the same images, preprocessing the bottleneck.

Side by side in one run: (a) FLEET shared pipeline -- one producer writes each batch once into shared memory, the
4 models train on it in place; (b) 4 independent pipelines -- one producer per model. Prints the aggregate training
throughput ratio (target >= 1.5x) and preprocessing CPU seconds per epoch, shared / independent (target <= 1/3).
"""
from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

import torch

from dlsched.train.flotilla import CTX, Convergence, MemberSpec, run_flotillas, synthetic_images, warm_up_torch

MODELS = Path(__file__).resolve().parents[1] / "examples" / "ensemble" / "models.py"
MEMBERS = [
    MemberSpec("tiny", f"{MODELS}:TinyCNN", {"width": 4}),
    MemberSpec("wide", f"{MODELS}:WideCNN", {"width": 4}),
    MemberSpec("strided", f"{MODELS}:StridedCNN"),
    MemberSpec("mlp", f"{MODELS}:MLPHead"),
]
BATCH, BATCHES = 128, int(sys.argv[1]) if len(sys.argv) > 1 else 240
REPEATS = 3   # alternate shared / independent and keep each one's best: the 2 cores are shared with other users


def run(groups, data, val) -> tuple[float, float, float]:
    conv = Convergence(patience=10**6, max_epochs=10**6)   # measure throughput only: nobody converges
    with tempfile.TemporaryDirectory() as d:
        t0 = time.perf_counter()
        _, runs = run_flotillas(groups, data, val, BATCH, conv, Path(d), CTX.Queue(), max_batches=BATCHES)
        wall = time.perf_counter() - t0
    samples = BATCH * BATCHES * sum(len(g) for g in groups)
    epochs = BATCH * BATCHES / len(data[0])            # epochs of data every model consumed
    return samples / wall, sum(r.producer_cpu_s for r in runs) / epochs, wall


def main() -> None:
    torch.set_num_threads(1)
    warm_up_torch()   # one-off torch import cost, paid before either side is timed
    data, val = synthetic_images(4096, seed=0), synthetic_images(256, seed=1)
    shared, indep = [], []
    for _ in range(REPEATS):
        shared.append(run([MEMBERS], data, val))
        indep.append(run([[m] for m in MEMBERS], data, val))
        print(f"  shared {shared[-1][0]:.0f} samples/s ({shared[-1][2]:.1f} s), independent {indep[-1][0]:.0f} samples/s ({indep[-1][2]:.1f} s)")
    shared_tput, shared_cpu, ws = max(shared)
    indep_tput, indep_cpu, wi = max(indep)
    print(f"{len(MEMBERS)} models x {BATCHES} batches of {BATCH}; best of {REPEATS}: wall shared {ws:.1f} s, independent {wi:.1f} s")
    print(f"throughput: shared {shared_tput:.0f} samples/s, independent {indep_tput:.0f} samples/s -> "
          f"{shared_tput / indep_tput:.2f}x (target >= 1.5x)")
    print(f"preprocessing CPU s/epoch: shared {shared_cpu:.2f}, independent {indep_cpu:.2f} -> "
          f"{shared_cpu / indep_cpu:.2f} of independent (target <= 0.33)")


if __name__ == "__main__":
    main()
