"""Sparse evaluation logs: each dev and public curve thinned to about N evaluations (MLPerf and DAWNBench
evaluate every few epochs), predicted at 10 / 25 / 50 % with the shipped calibration and prior, as the CLI
would. Side by side: the predictor's minimum of 2 points after training starts (a prefix with fewer than 4
takes the calibration's widest band) against waiting for 3 points (the minimum before). Both sides see the
same thinned prefix, schedule and budget. The dev rows use the shipped calibration, whose bands were made from
these curves (dense), with the prior of the other tasks' fits (``Calibration.without_task``): the public rows are
the held-out ones.

    PYTHONPATH=src python bench/sparse_logs.py [--points 12] [--dir /work/public_curves]
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import pandas as pd

sys.path[:0] = [str(Path(__file__).parent), str(Path(__file__).parent / "curves")]
import prediction_accuracy as pa  # noqa: E402
from dev_set import dev_curves  # noqa: E402
from public_curves import load_curves  # noqa: E402

from dlsched.perf.calibration import load_calibration  # noqa: E402

FRACTIONS = (0.1, 0.25, 0.5)
thinned = pa.thinned
LEASTS = (3, 2, 1)


def scores(curves, least: int) -> pd.DataFrame:
    """One row per curve and fraction, observing at least ``least`` points (more than the fraction if needed)."""
    cal, rows = load_calibration(), []
    for c in curves:
        for f in FRACTIONS:
            n = max(least, int(np.searchsorted(c.x, f * c.schedule.budget, side="right")))
            pa.prefix = lambda _c, _f, n=n: n   # the bench's own scoring, on this prefix
            try:
                # the shipped prior without the curve's own task's fits (a dev curve's are in the table)
                r = pa.evaluate(c, f, cal.without_task(c.meta.get("dataset")), "shipped")
            except ValueError:   # fewer than 2 points after training starts
                continue
            rows.append({**r, "beyond": c.x[n - 1] > f * c.schedule.budget * (1 + 1e-9)})
    return pd.DataFrame(rows)


def one_point_held_out(curves) -> str:
    """Coverage of the one-point bands with a task held out of them too (``Calibration.one_point`` pools every task's
    errors, so the dev rows above are in-sample for it): each task's predictions against the 10-90 % percentiles
    of the other tasks' errors."""
    d = pa.one_point_rows(curves, load_calibration())
    parts = []
    for task, mine in d.groupby("task"):
        other = d[d.task != task]
        lo, hi = np.quantile(other.final, [0.1, 0.9])
        s_lo, s_hi = np.quantile(other.steps.dropna(), [0.1, 0.9])
        parts.append(mine.assign(final_in=(mine.final >= lo) & (mine.final <= np.minimum(hi, mine.cap)),
                                 steps_in=mine.steps.between(s_lo, s_hi).where(mine.steps.notna())))
    d = pd.concat(parts)
    lines = []
    for name, g in [("all", d), *d.groupby("kind")]:
        steps = g.steps.dropna()
        lines.append(f"one point [{name}], bands leave-one-task-out ({len(g)} predictions, {g.task.nunique()} tasks): "
                     f"coverage final {100 * g.final_in.mean():.1f} %, steps {100 * g.steps_in.dropna().mean():.1f} % "
                     f"(n={len(steps)}); median error final {100 * np.median(np.abs(np.expm1(g.final))):.1f} %, "
                     f"steps {100 * np.median(np.abs(np.expm1(steps))) if len(steps) else float('nan'):.1f} %")
    return "\n  ".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--points", type=int, default=12, help="evaluations per run after thinning")
    ap.add_argument("--dir", type=Path, default=Path("/work/public_curves"))
    a = ap.parse_args(argv)
    sets = {"dev": dev_curves()}
    if (a.dir / "manifest.csv").exists():
        sets["public (held out)"] = load_curves(a.dir)
    print(f"== sparse logs: every curve thinned to ~{a.points} evaluations; targets: final <= 5 %, steps <= 20 %, "
          "80 % coverage 70-90 %, wrongly unreachable 0")
    print("  (beyond: rows observed past their fraction to reach the minimum; steps scored where >= 3 intervals remain)")
    for name, curves in sets.items():
        curves = [thinned(c, a.points) for c in curves]
        for least in LEASTS:
            d = scores(curves, least)
            for f, g in d.groupby("observed"):
                steps = g.steps_err.dropna()
                print(f"  {name:18s} min {least} points  @{100 * f:3.0f} %: beyond {int(g.beyond.sum()):2d}/{len(g):2d}  "
                      f"final {100 * g.final_err.median():5.1f} %  coverage {100 * g.final_cov.mean():3.0f} %  "
                      f"steps {100 * steps.median() if len(steps) else float('nan'):5.1f} % (n={len(steps)})  "
                      f"unreachable {int(g.unreachable.sum())}")
    print("  " + one_point_held_out(sets["dev"]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
