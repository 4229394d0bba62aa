"""Why the steps-to-95 % error of ``bench/prediction_accuracy.py`` is what it is, per scored row (the run still had
>= 3 logging intervals to its 95 % point). For each row, beside the score:

* gap: how far the run still was from its 95 % value, in % of the final value (the distance a prediction must
  place correctly; the 95 % value is y0 - 0.95·(y0 - final), so a final error e moves it by 0.95·e);
* final: the predictor's final-value error, and tolerance: the final error that alone costs 20 % steps error on
  this row (``steps_floor``: the true curve's own slope there);
* told the final: the steps error of the same predictor given the true final value as a tight level prior
  (information it cannot have: it isolates the shape and the crossing from the level);
* noise: the error of a *perfect* predictor, i.e. the median |crossing − median crossing| over re-logged copies
  of the run, as a share of the remaining. The run's expected curve is its 5-point running mean; its noise the
  robust (1.4826·MAD) scatter of the second differences /√1.5, which neither a misfit nor one LR cut inflates
  (``steps_floor`` permutes the residuals of the annealing fit instead: misfit counts as noise there, an upper
  estimate; printed beside);
* reached: the predictor put its own 95 % value at or above the value now (0 steps: an error of exactly 100 %).

Then, per fraction, the selection the score makes: the median log(true / predicted remaining improvement, from
the value now to the final one) over every curve, and over the scored rows only. A row is scored only while the
run is still >= 3 intervals from its 95 % point, i.e. where its improvement went on longer than most: an
unbiased predictor under-predicts exactly there.

Run: PYTHONPATH=src python bench/steps_diagnosis.py
"""
from __future__ import annotations

import dataclasses
import math
import sys
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent / "curves"))

import prediction_accuracy as pa  # noqa: E402
import steps_floor as sf  # noqa: E402
from dev_set import dev_curves  # noqa: E402

from dlsched.perf.curve_predict import MetricSpace  # noqa: E402

DRAWS = 200


def perfect_predictor_error(c, rng) -> float:
    """Median |crossing − median crossing| over DRAWS re-loggings of ``c`` (module doc), in units of x."""
    space = MetricSpace.of(c.metric, c.y)
    y = space.down(c.y)
    smooth = pd.Series(y).rolling(5, center=True, min_periods=1).mean().to_numpy()
    second = (y[1:-1] - (y[:-2] + y[2:]) / 2) / smooth[1:-1]
    sigma = 1.4826 * float(np.median(np.abs(second - np.median(second)))) / math.sqrt(1.5)
    k = max(1, len(y) // 10)     # the first points stay as logged: y0 sets the 95 % value
    cross = []
    for _ in range(DRAWS):
        yy = y.copy()
        yy[k:] = smooth[k:] * (1 + sigma * rng.standard_normal(len(y) - k))
        cross.append(pa.truth(dataclasses.replace(c, y=space.up(yy))).target_x)
    cross = np.array(cross)
    return float(np.median(np.abs(cross - np.median(cross))))


def main() -> None:
    curves = dev_curves()
    prior_of, cross_of = pa.loco_prior(curves), pa.cross_task_prior(curves)
    cals, *_ = pa.loco_calibrations(curves, prior_of, cross_of, pa.loco_prior(curves, carry=False))
    rng = np.random.default_rng(0)
    rows, every = [], []
    for c in curves:
        t = pa.truth(c)
        y = MetricSpace.of(c.metric, c.y).down(c.y)
        env = np.minimum.accumulate(pd.Series(y).rolling(5, center=True, min_periods=1).mean().to_numpy())
        perfect, permuted = None, None
        for f in pa.FRACTIONS:
            n = pa.prefix(c, f)
            remaining = t.target_x - c.x[n - 1]
            r = pa.evaluate(c, f, cals[c.name], prior_of(c))
            every.append((f, r["reach_log"], remaining >= pa.MIN_INTERVALS * t.resolution))
            if remaining < pa.MIN_INTERVALS * t.resolution:
                continue
            if perfect is None:
                perfect = perfect_predictor_error(c, rng)
                permuted = sf.redrawn_crossings(c, rng)
            told = pa.evaluate(c, f, cals[c.name], dataclasses.replace(prior_of(c), final=t.final, final_sigma=1e-4))
            early, late = np.interp([t.target_x - sf.STEPS_OK * remaining, t.target_x + sf.STEPS_OK * remaining], c.x, env)
            now = float(np.median(y[n - 3:n]))
            rows.append({"curve": c.name, "observed": f, "steps": r["steps_err"], "told": told["steps_err"],
                         "final": r["final_err"], "tolerance": (early - late) / 2 / pa.IMPROVEMENT / t.final,
                         "gap": (now - t.target) / t.final, "noise": perfect / remaining,
                         "permuted": float(np.median(np.abs(permuted - t.target_x))) / remaining,
                         "intervals": remaining / t.resolution, "reached": r["said_reached"]})
    d = pd.DataFrame(rows)
    cols = ("steps", "told", "final", "tolerance", "gap", "noise", "permuted")
    print("steps-to-95 % per scored row (schedule-aware predictor, same-task prior, leave-one-curve-out bands):")
    print(f"  {'curve':20s} {'obs':>4s} {'left':>5s} " + " ".join(f"{h:>9s}" for h in cols) + "  reached")
    for r in d.itertuples():
        print(f"  {r.curve:20s} {int(100 * r.observed):3d}% {r.intervals:5.1f} "
              + " ".join(f"{pa.pct(getattr(r, h)):>9s}" for h in cols) + f"  {'yes' if r.reached else ''}")
    print("  (left: logging intervals to the true 95 % point; steps / told: steps error without / with the true final;"
          " final vs tolerance: final error and the final error that alone costs 20 % steps; gap: value now − 95 % value,"
          " % of the final; noise: a perfect predictor's error; permuted: steps_floor's upper estimate)")
    for f in pa.FRACTIONS:
        b = d[d.observed == f]
        print(f"  after {int(100 * f):2d} % (n={len(b)}): median steps {pa.pct(b.steps.median())}, told the final "
              f"{pa.pct(b.told.median())}; final {pa.pct(b.final.median())} vs tolerance {pa.pct(b.tolerance.median())};"
              f" gap {pa.pct(b.gap.median())}; perfect predictor {pa.pct(b.noise.median())}"
              f" (permuted {pa.pct(b.permuted.median())}); said reached {int(b.reached.sum())}")
    e = pd.DataFrame(every, columns=["observed", "reach_log", "scored"])
    print("  selection: median log(true / predicted remaining improvement), every curve vs the scored rows only")
    for f, b in e.groupby("observed"):
        print(f"  after {int(100 * f):2d} %: every curve {b.reach_log.median():+.2f} (n={b.reach_log.notna().sum()}),"
              f" scored rows {b[b.scored].reach_log.median():+.2f} (n={int(b.scored.sum())})")


if __name__ == "__main__":
    main()
