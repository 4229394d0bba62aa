"""Optimus' PS speed models against real parameter-server runs on this machine (CPU, gloo).

For each (p, w) of a small grid, real runs of ``dlsched.train.ps_runner`` (p server + w worker processes)
measure training speed in steps/s from the workers' median step time after the first committed round
(start-up and warm-up excluded; the faster of ``--repeats`` runs counts):
  sync:  global batch M fixed, f = optimizer steps/s                     (Optimus Eq. 4)
  async: local batch m fixed per worker, f = worker steps/s summed      (Optimus Eq. 3)
The models are fitted by NNLS (``perf.speed.fit_optimus_sync/async``) on a training subset of the grid and
predict the held-back configurations; the figure is the relative error |pred − measured| / measured there.
Target (Optimus Fig. 8, algorithms.md §1.3): < 10 % with about 10 samples. Information: the fit sees only
the training configurations' measurements; the held-back ones are measured in the same run.

Host caveat: 2 CPU cores shared with other work, so p + w processes contend for cores, and the load of
neighbours varies during the run: the error includes that noise.
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))

from dlsched.perf.speed import fit_optimus_async, fit_optimus_sync  # noqa: E402
from dlsched.train.ps import SyncMode  # noqa: E402
from dlsched.train.ps_runner import PSOptions, PSRunner  # noqa: E402

MLP = f"{REPO / 'examples' / 'mlp.py'}:make_job"
TRAIN = [(1, 1), (1, 2), (2, 1), (2, 3), (3, 2), (1, 4), (3, 4)]
HELD = [(1, 3), (2, 2), (2, 4), (3, 1), (3, 3)]
GLOBAL_BATCH = 32  # sync M
LOCAL_BATCH = 16   # async m


def measure(p: int, w: int, mode: str, rounds: int, hidden: int) -> float:
    """Steps/s of one real run from the workers' median step times after the first round (a median, since
    neighbours' bursts on this shared host would swamp a mean)."""
    batch = GLOBAL_BATCH if mode == "sync" else LOCAL_BATCH * w
    per_round = 4
    samples = batch * per_round * (rounds + 1)
    with tempfile.TemporaryDirectory(prefix="ps-speed-") as d:
        opts = PSOptions(Path(d), MLP, {"num_samples": samples, "hidden": hidden, "dim": 64}, workers=w, servers=p,
                         mode=SyncMode.parse(mode), batch_size=batch, ckpt_every=per_round)
        if PSRunner(opts).run() != 0:
            raise RuntimeError(f"run p={p} w={w} {mode} failed")
        step_s = [np.median([r["time"] for r in map(json.loads, f.read_text().splitlines()) if r["round"] > 0])
                  for f in sorted((Path(d) / "ps" / "records").glob("gen-0000-worker-*.jsonl"))]
    # sync: every worker takes part in every step; async: each worker steps on its own, so speeds add up
    return 1.0 / float(np.median(step_s)) if mode == "sync" else float(sum(1.0 / t for t in step_s))


def best_of(repeats: int, *args) -> float:
    return max(measure(*args) for _ in range(repeats))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3, help="measured rounds per configuration")
    ap.add_argument("--repeats", type=int, default=2, help="runs per configuration; the fastest counts")
    ap.add_argument("--hidden", type=int, default=512, help="MLP width (parameters ~ hidden^2)")
    ap.add_argument("--json", type=Path, help="also write the measurements here")
    a = ap.parse_args()
    out = {}
    t0 = time.time()
    for mode in ("sync", "async"):
        speeds = {pw: best_of(a.repeats, *pw, mode, a.rounds, a.hidden) for pw in TRAIN + HELD}
        tr = np.array(TRAIN)
        f_tr = np.array([speeds[pw] for pw in TRAIN])
        model = (fit_optimus_sync(tr[:, 0], tr[:, 1], f_tr, GLOBAL_BATCH) if mode == "sync"
                 else fit_optimus_async(tr[:, 0], tr[:, 1], f_tr))
        print(f"\n{mode}: theta = {tuple(round(x, 5) for x in model.theta)} (fitted on {len(TRAIN)} configurations)")
        print(f"{'p':>3} {'w':>3} {'measured steps/s':>17} {'predicted':>10} {'error':>8}  set")
        errs = []
        for pw in TRAIN + HELD:
            pred = float(model.speed(*pw))
            err = abs(pred / speeds[pw] - 1)
            if pw in HELD:
                errs.append(err)
            print(f"{pw[0]:>3} {pw[1]:>3} {speeds[pw]:>17.2f} {pred:>10.2f} {100 * err:>7.1f}%  "
                  f"{'held back' if pw in HELD else 'fit'}")
        print(f"{mode}: held-back relative error median {100 * np.median(errs):.1f} %, max {100 * max(errs):.1f} % "
              f"(target: < 10 %, Optimus Fig. 8)")
        out[mode] = {"theta": model.theta, "speeds": {f"{p},{w}": s for (p, w), s in speeds.items()},
                     "held_back_median_error": float(np.median(errs)), "held_back_max_error": float(max(errs))}
    print(f"\n({time.time() - t0:.0f} s; MLP hidden={a.hidden}, sync M={GLOBAL_BATCH}, async m={LOCAL_BATCH}; "
          "2 shared CPU cores, no GPU was lent)")
    if a.json:
        a.json.write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
