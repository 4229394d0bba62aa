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

Then the runs with a recipe's other run (``curves/reruns/``: the same SPEC at 0.8x the budget, another seed: what a
team re-running a recipe has, `--like` or the service's finished jobs of the task): the logged LR so far, then that
run's logged LR stretched to the budget where the log so far follows it (``recipe``), against continued; and every
other recipe of the task's as the wrong one given: how often the log so far passes for it, and what that costs.

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
RECIPE = "the recipe's other run"


def logged_lr(c, folder: Path = HERE) -> tuple[np.ndarray, np.ndarray] | None:
    path = folder / f"{c.name}.csv"
    d = pd.read_csv(path) if path.exists() else None
    return None if d is None or "lr" not in d else (d.step.to_numpy(float), d.lr.to_numpy(float))


def reruns() -> dict[str, Schedule]:
    """Each rerun's logged LR over its own budget, by run name."""
    index = pd.read_csv(HERE / "reruns" / "index.csv")
    out = {}
    for r in index.itertuples():
        d = pd.read_csv(HERE / "reruns" / r.file)
        out[r.file.removesuffix(".csv")] = Schedule.from_points(d.step, d.lr, float(r.budget), spec=RECIPE)
    return out


def final_err(c, frac: float, sched: Schedule, cal, cross_of) -> float:
    run = dataclasses.replace(c, schedule=sched)
    return pa.evaluate(run, frac, cal, cross_of(run))["final_err"]


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
    recipes(logs, df, cal, cross_of)


def recipes(logs: dict, df: pd.DataFrame, cal, cross_of) -> None:
    """The logged LR continued as a recipe's other run where the log so far follows it, and the wrong recipe."""
    others = reruns()
    rows, wrong = [], []
    for name, recipe in others.items():
        c, (x, lr) = logs[name]
        task = name.partition("-")[0]
        for frac in pa.FRACTIONS:
            seen = x <= c.x[pa.prefix(c, frac) - 1]
            sched, found = logged_lr_schedule(x[seen], lr[seen], c.schedule.budget, recipe)
            row = df[(df.curve == name) & (df.observed == frac)].iloc[0].to_dict()
            row["recipe"] = final_err(c, frac, sched, cal, cross_of) if found and found.spec == RECIPE \
                else row["continued"]
            row["matched"] = bool(found and found.spec == RECIPE)
            row["recipe_lr"] = float(np.max(np.abs(sched.lr(x[~seen]) / sched.lr(x).max() - lr[~seen] / lr.max()),
                                            initial=0.0))
            rows.append(row)
            for other, theirs in others.items():   # another recipe of the task's, given as this run's
                if other != name and other.startswith(task + "-"):
                    s2, f2 = logged_lr_schedule(x[seen], lr[seen], c.schedule.budget, theirs)
                    if f2 is not None and f2.spec == RECIPE:
                        wrong.append({"observed": frac, "curve": name, "given": other, "continued": row["continued"],
                                      "wrong": final_err(c, frac, s2, cal, cross_of),
                                      "same_future": float(np.max(np.abs(s2.lr(x[~seen]) - sched.lr(x[~seen])))
                                                           / lr.max()) < 0.01})
    d, w = pd.DataFrame(rows), pd.DataFrame(wrong)
    print(f"== a recipe's other run (curves/reruns/: {len(others)} runs, 0.8x the budget, another seed): the log so "
          "far, then that run's logged LR stretched to the budget, where the log follows it")
    print("  median final error: whole log / recipe / continued / held / SPEC, and the LR ahead (share of the peak)")
    for frac, g in d.groupby("observed"):
        keys = ("whole", "recipe", "continued", "held", "spec")
        gain = g.continued - g.recipe
        print(f"  after {frac:.0%}: {int(g.matched.sum())} of {len(g)} logs follow their recipe: final "
              + " / ".join(pa.pct(g[k].median()) for k in keys) + "   LR ahead "
              + " / ".join(f"{g[k + '_lr'].median():.3f}" for k in keys)
              + f"   run by run against continued: better on {int((gain > 1e-4).sum())}, worse on "
              f"{int((gain < -1e-4).sum())}" + (f" (by at most {pa.pct(-gain.min())}: "
                                                f"{', '.join(g[gain < -1e-4].curve)})" if (gain < -1e-4).any() else ""))
    n_other = sum(1 for a in others for b in others if a != b and a.partition("-")[0] == b.partition("-")[0])
    print(f"  another recipe of the task's given instead ({n_other} pairs per fraction): taken where the log so far "
          "passes for it")
    for frac in pa.FRACTIONS:
        g = w[w.observed == frac] if len(w) else w
        g = g[~g.same_future] if len(g) else g
        cost = g.wrong - g.continued if len(g) else pd.Series(dtype=float)
        print(f"  after {frac:.0%}: taken {len(g)} times with another LR ahead"
              + (f": median final error then {pa.pct(g.wrong.median())} against continued "
                 f"{pa.pct(g.continued.median())}; worse on {int((cost > 1e-4).sum())}, better on "
                 f"{int((cost < -1e-4).sum())} (worst by {pa.pct(max(cost.max(), 0.0))}: "
                 f"{g.loc[cost.idxmax(), 'curve']} given {g.loc[cost.idxmax(), 'given']})" if len(g) else ""))


if __name__ == "__main__":
    main()
