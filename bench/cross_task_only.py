"""The general case of ``bench/prediction_accuracy.py`` alone, in under a minute: each development curve
predicted with the α/drop prior of the *other tasks'* finished fits (no level), intervals calibrated
leave-one-curve-out from the same predictions; the same functions as the full bench, so its figures are
that bench's "cross-task only" rows. For trying a model change side by side with the current one.

Run: PYTHONPATH=src python bench/cross_task_only.py [-v] [--own alpha|drop] [--save ROWS.csv] [--against ROWS.csv]
(-v: the final error per curve and fraction; --own: a diagnostic, not a prediction: that one shape number from
the curve's own full fit, held tight, the other from the other tasks, as the bench's ceiling row does for both;
--save writes the per-row errors, --against compares this run's rows with such a file, row by row)

Why --against: a median over 34 curves (6 at 50 % for the steps) moves by several points when one curve crosses
it (the medians of neighbouring settings of one knob differed by up to 7 points, ``docs/curve-prediction.md``), so a
variant is judged by how many rows it makes better and worse and by the geometric mean of the errors too.
"""
from __future__ import annotations

import dataclasses
import math
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent / "curves"))

import prediction_accuracy as pa  # noqa: E402
from dev_set import dev_curves  # noqa: E402


def own(curves, cross_of, which: str):
    """The cross-task prior with the curve's own full-fit α or drop (``which``) held tight (not a prediction)."""
    fits = pa.full_fits(curves)

    def prior(c):
        f, p = fits[c.name], cross_of(c)
        if which == "alpha":
            return dataclasses.replace(p, alpha=f.alpha, alpha_sigma=0.05)
        return dataclasses.replace(p, drop=f.drop, drop_sigma=0.01) if math.isfinite(f.drop) else p
    return prior


def cross_task_rows(own_shape: str | None = None) -> pd.DataFrame:
    curves = dev_curves()
    cross_of = pa.cross_task_prior(curves)
    if own_shape is not None:
        cross_of = own(curves, cross_of, own_shape)
    blind = pa.calibration_records(curves, cross_of)
    cals = {c.name: pa.calibrate(pa.others(blind, c.name)) for c in curves}
    return pd.DataFrame([pa.evaluate(c, f, cals[c.name], cross_of(c)) for c in curves for f in pa.FRACTIONS])


MOVED = 0.005   # a row counts as better or worse when its error moved by more than half a point


def compare(d: pd.DataFrame, base: pd.DataFrame) -> None:
    """Per fraction and error: rows better / worse than ``base`` (same curve and fraction), and the geometric mean
    of the errors (each floored at 0.1 %, so an exact row does not send it to 0) before -> now."""
    m = d.merge(base, on=["curve", "observed"], suffixes=("", "_base"))
    print(f"against the saved rows ({len(m)} matched): rows better / worse by > {100 * MOVED:.1f} points, "
          "geometric mean of the errors saved -> now")
    for f in pa.FRACTIONS:
        b = m[m.observed == f]
        cells = []
        for col in ("final_err", "steps_err"):
            ok = b[col].notna() & b[col + "_base"].notna()
            now, was = b[col][ok].to_numpy(float), b[col + "_base"][ok].to_numpy(float)
            gm = lambda v: math.exp(float(np.mean(np.log(np.maximum(v, 1e-3))))) if len(v) else math.nan  # noqa: E731
            cells.append(f"{col.split('_')[0]} {int((now < was - MOVED).sum())} better / {int((now > was + MOVED).sum())}"
                         f" worse of {int(ok.sum())}, {pa.pct(gm(was)).strip()} -> {pa.pct(gm(now)).strip()}")
        print(f"  after {int(100 * f):2d} %: " + ";  ".join(cells))


ROWS = ["curve", "observed", "final_err", "steps_err"]


def option(name: str) -> str | None:
    """The value after ``name`` on the command line; None without the option; one error line when it has none."""
    if name not in sys.argv:
        return None
    i = sys.argv.index(name) + 1
    if i >= len(sys.argv):
        raise SystemExit(f"{name} needs a value")
    return sys.argv[i]


def saved_rows(path: str) -> pd.DataFrame:
    """A ``--save`` file, read before the minute of predictions: a wrong path is one line, not a late traceback."""
    try:
        rows = pd.read_csv(path)
    except (OSError, ValueError) as e:
        raise SystemExit(f"--against: cannot read {path!r}: {e}") from None
    if missing := [c for c in ROWS if c not in rows.columns]:
        raise SystemExit(f"--against: {path!r} has no column {', '.join(missing)} (write it with --save)")
    return rows


def main() -> None:
    t0 = time.perf_counter()
    which = option("--own")
    if which not in (None, "alpha", "drop"):
        raise SystemExit(f"--own must be alpha or drop, got {which!r}")
    save, against = option("--save"), option("--against")
    base = None if against is None else saved_rows(against)
    d = cross_task_rows(which)
    if which:
        print(f"diagnostic, not a prediction: each curve's own full-fit {which}, the rest from the other tasks")
    print("cross-task only, per fraction: median final / steps-to-95 % error, steps rows, 80 % coverage final/steps, "
          "wrongly unreachable")
    for f in pa.FRACTIONS:
        b = d[d.observed == f]
        print(f"  after {int(100 * f):2d} %: {pa.pct(b.final_err.median())} / {pa.pct(b.steps_err.median())}"
              f"  n={b.steps_err.notna().sum()}  coverage {pa.pct(b.final_cov.mean())} /"
              f" {pa.pct(b.steps_cov.dropna().astype(float).mean())}  unreachable {int(b.unreachable.sum())}"
              f"  (one logging interval: {pa.pct(b.grain.median())} of the remaining; 95 % value missed by"
              f" {pa.pct(b.goal_miss.median())} of the distance to go, {int(b.said_reached.sum())} said already reached)")
    print(f"  ({time.perf_counter() - t0:.0f} s)")
    if save is not None:
        d[ROWS].to_csv(save, index=False)
    if base is not None:
        compare(d[ROWS], base)
    if "-v" in sys.argv:
        print(d.pivot(index="curve", columns="observed", values="final_err").map(pa.pct).to_string())
        print("steps-to-95 % error / the predicted 95 % value's miss in units of the distance still to go to it:")
        cells = d.assign(cell=[f"{pa.pct(e)}/{pa.pct(g)}" for e, g in zip(d.steps_err, d.goal_miss)])
        print(cells.pivot(index="curve", columns="observed", values="cell").to_string())


if __name__ == "__main__":
    main()
