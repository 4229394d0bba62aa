"""A run still training: its log's LR ends where the log does. What `dlsched predict curve` makes of the rest of it
(`perf/lr_continuation.py`), against the schedule given as a SPEC, on the development runs that log their LR.

For each run cut at 10 / 25 / 50 % of its budget, four schedules for the same prefix and the same prior:
* whole log: the LR the run logged to its end (the future LR known: the ceiling of a continuation);
* continued: the logged LR so far, then the family its logged decay follows (the default since this bench);
* held: the logged LR so far, then its last value (the default before);
* SPEC: the run's schedule as the user would type it (`--schedule`, the other benches' input): its warm-up is the
  SPEC's round number, not the logged one, which moves a 10 % prefix's fit window by a point.
Scored: the median error of the predicted final value, and the largest error of the LR ahead (share of the peak).
Information: each side sees the same prefix, budget and prior (α/drop from the other tasks' finished fits, no level;
bands from the shipped calibration); only where the schedule comes from differs.

Run: PYTHONPATH=src python bench/live_lr.py
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
from dev_set import HERE, dev_curves  # noqa: E402

from dlsched.perf.calibration import load_calibration  # noqa: E402
from dlsched.perf.lr_continuation import logged_lr_schedule  # noqa: E402
from dlsched.perf.schedule import Schedule  # noqa: E402


COLUMNS = ("whole", "continued", "held", "spec")


def logged_lr(c) -> tuple[np.ndarray, np.ndarray] | None:
    path = HERE / f"{c.name}.csv"
    d = pd.read_csv(path) if path.exists() else None
    return None if d is None or "lr" not in d else (d.step.to_numpy(float), d.lr.to_numpy(float))


def main() -> None:
    logs = {c.name: (c, log) for c in dev_curves() if (log := logged_lr(c)) is not None}
    curves = [c for c, _ in logs.values()]
    cal, cross_of = load_calibration(), pa.cross_task_prior(curves)
    rows = []
    for c, (x, lr) in logs.values():
        for frac in pa.FRACTIONS:
            n = pa.prefix(c, frac)
            seen = x <= c.x[n - 1]
            continued, found = logged_lr_schedule(x[seen], lr[seen], c.schedule.budget)
            held = Schedule.from_points(x[seen], lr[seen], c.schedule.budget)
            whole = Schedule.from_points(x, lr, c.schedule.budget)
            row = {"curve": c.name, "observed": frac, "continued_as": found.spec if found else "held"}
            for name, sched in (("whole", whole), ("continued", continued), ("held", held), ("spec", c.schedule)):
                run = dataclasses.replace(c, schedule=sched)
                row[name] = pa.evaluate(run, frac, cal, cross_of(run))["final_err"]
                row[f"{name}_lr"] = float(np.max(np.abs(sched.lr(x[~seen]) / sched.lr(x).max()
                                                        - lr[~seen] / lr.max()), initial=0.0))
            rows.append(row)
    df = pd.DataFrame(rows)
    print(f"== a run still training: its logged LR continued, {len(curves)} development runs that log it")
    print("  median final-value error, and the largest error of the LR ahead (share of the peak), by where the "
          "schedule comes from: whole log (the future LR known) / continued / held / SPEC")
    for frac, g in df.groupby("observed"):
        fam = g[g.continued_as != "held"]
        print(f"  after {frac:.0%}: all {len(g)} runs: final " + " / ".join(pa.pct(g[k].median()) for k in COLUMNS)
              + "   LR ahead " + " / ".join(f"{g[k + '_lr'].median():.3f}" for k in COLUMNS))
        print(f"             the {len(fam)} continued as a family: final "
              + " / ".join(pa.pct(fam[k].median()) for k in COLUMNS)
              + "   LR ahead " + " / ".join(f"{fam[k + '_lr'].median():.3f}" for k in COLUMNS)
              + "   (target: continued = whole log, LR ahead <= 0.01)")
        gain = fam.held - fam.continued
        print(f"             run by run, continued against held: better on {int((gain > 1e-4).sum())}, worse on "
              f"{int((gain < -1e-4).sum())} (by at most {pa.pct(max(-gain.min(), 0.0))} of the final, "
              f"{', '.join(fam[gain < -1e-4].curve)})")
    print("  (the rest are held because their log shows no decay yet, too little of one to tell its family, or one "
          "no family follows: step cuts)")
    for name, g in df.groupby("curve", sort=False):
        print(f"    {name:20s} " + "  ".join(f"{r.continued_as:32s}" for r in g.itertuples()))


if __name__ == "__main__":
    main()
