"""How hard is the steps-to-95 % score of ``bench/prediction_accuracy.py`` on each dev curve? Two bounds that
need no predictor, per scored row (the run still had >= 3 logging intervals to its 95 % point):

* tolerance: the final-value error, in % of the final value, that alone moves a prediction of *exactly the
  true shape* by 20 % of the remaining steps. The 95 % value is y0 - 0.95·(y0 - final): a final error moves
  it 0.95x as far, and where the curve is flat there that is many steps (the true curve smoothed by a
  5-point running mean, made monotone);
* noise floor: how far the truth's own crossing moves, in % of the remaining, when the same run is logged with
  another draw of its noise (the residuals around its full annealing fit, permuted among the points past the
  first 10 %; misfit counts as noise, so an upper estimate); median over 200 draws.

``bench/steps_diagnosis.py`` sets this beside a perfect predictor's error under the run's local noise alone (a
misfit at an LR cut made pollux-imagenet's figure here 178 % at 50 %; the local noise gives 1 %).

Run: PYTHONPATH=src python bench/steps_floor.py
"""
from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent / "curves"))

import prediction_accuracy as pa  # noqa: E402
from dev_set import dev_curves  # noqa: E402

from dlsched.perf.annealing import fit_annealing  # noqa: E402
from dlsched.perf.curve_predict import MetricSpace  # noqa: E402

DRAWS = 200
STEPS_OK = 0.2


def redrawn_crossings(c, rng) -> np.ndarray:
    """The truth's 95 % crossing of ``c`` under DRAWS redraws of its noise (module doc)."""
    space = MetricSpace.of(c.metric, c.y)
    y = space.down(c.y)
    smooth = fit_annealing(c.x, y, c.schedule, None).value(c.x)
    r = y / smooth - 1
    k = max(1, len(y) // 10)     # the first points stay as logged: y0 sets the 95 % value
    out = []
    for _ in range(DRAWS):
        yy = y.copy()
        yy[k:] = smooth[k:] * (1 + rng.permutation(r[k:]))
        out.append(pa.truth(dataclasses.replace(c, y=space.up(yy))).target_x)
    return np.array(out)


def main() -> None:
    rng = np.random.default_rng(0)
    rows = []
    for c in dev_curves():
        t = pa.truth(c)
        y = MetricSpace.of(c.metric, c.y).down(c.y)
        env = np.minimum.accumulate(pd.Series(y).rolling(5, center=True, min_periods=1).mean().to_numpy())
        redrawn = redrawn_crossings(c, rng)
        for f in pa.FRACTIONS:
            remaining = t.target_x - c.x[pa.prefix(c, f) - 1]
            if remaining < pa.MIN_INTERVALS * t.resolution:
                continue
            early, late = np.interp([t.target_x - STEPS_OK * remaining, t.target_x + STEPS_OK * remaining], c.x, env)
            rows.append({"curve": c.name, "observed": f, "tolerance": (early - late) / 2 / pa.IMPROVEMENT / t.final,
                         "floor": float(np.median(np.abs(redrawn - t.target_x))) / remaining})
    d = pd.DataFrame(rows)
    cells = d.assign(cell=[f"{pa.pct(a)} {pa.pct(b)}" for a, b in zip(d.tolerance, d.floor)])
    print(f"per curve and fraction: final error that alone costs {int(100 * STEPS_OK)} % steps error"
          " / the truth's own crossing under redrawn noise")
    print(cells.pivot(index="curve", columns="observed", values="cell").fillna("").to_string())
    for f in pa.FRACTIONS:
        b = d[d.observed == f]
        print(f"  after {int(100 * f):2d} % (n={len(b)}): median tolerance {pa.pct(b.tolerance.median())} of the final value,"
              f" median noise floor {pa.pct(b.floor.median())} of the remaining")


if __name__ == "__main__":
    main()
