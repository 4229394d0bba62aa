"""An honest check of ``dlsched predict curve`` on a HOLD-OUT set: "when will my run hit 93 %?"

Run: PYTHONPATH=src python bench/holdout_accuracy.py [--dir bench/curves/holdout] [--cli N]

The curves (``bench/curves/holdout``, made by ``bench/curves/make_holdout_curves.py``) are real runs of models,
data, optimisers, batches, seeds and schedule placements the development set does not have; none of them ever
sets or tunes ``perf/calibration.json`` or the shipped prior. Each run is cut at 10 / 25 / 50 % of its budget and
predicted with exactly what a user has: the prefix (rows with step <= the cut), the schedule SPEC, the budget,
regime ``scratch``, the shipped calibration and prior (no finished runs of the task: no same-task level, no oracle).

* accuracy (``--metric accuracy --target T``): T is a round number the run does reach: the values 90 % and 98 % of
  the way from its first logged accuracy to its final one, each rounded down to 0.01 (what a user states: "0.93").
* loss (``--target-fraction 0.95``): the predictor's own 95 % goal, scored against where the run reached 95 % of
  its true improvement (as ``bench/prediction_accuracy.py`` scores it); wrongly unreachable and ``p_reach`` are
  of that true 95 % value given as a fixed ``--target`` (every run reached it).

Scored per metric and fraction: the final value (truth: mean of the last 3 logged points), median |error| in the
metric's units and relative (for accuracy also relative in error space, 1 - accuracy, the space the models fit),
the 80 % final interval's coverage; steps to the target (truth: where the centred 3-point running median first
reaches it, interpolated; skipped where the prefix's own smoothed log already reached it or fewer than 3 logging
intervals remained): median relative error and the 80 % interval's coverage (a target called unreachable scores
100 % and a miss); wrongly unreachable (a target the run reached called unreachable); ``p_reach`` of the targets
still ahead (all reached). The issue's targets are printed beside the figures. Also listed: a target the prefix
reached given ``p_reach`` < 0.99, one it has not reached said to be at 0 steps, one ahead given ``p_reach`` < 0.1.

Most predictions call ``perf.curve_predict.predict_curve`` directly (fast); ``--cli N`` (default 6) also runs
``dlsched predict curve ... --json`` as a subprocess for N of them and checks the two agree.
"""
from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from dlsched.perf.calibration import load_calibration
from dlsched.perf.curve_predict import MetricSpace, predict_curve
from dlsched.perf.curve_readers import read_curve
from dlsched.perf.first_passage import logged_crossing
from dlsched.perf.schedule import Schedule, parse_schedule

DEFAULT_DIR = Path(__file__).resolve().parent / "curves" / "holdout"
FRACTIONS = (0.10, 0.25, 0.50)
SHARES = (0.90, 0.98)   # accuracy targets: these shares of the way from the first to the final value, rounded down
IMPROVEMENT = 0.95      # loss: --target-fraction
MIN_INTERVALS = 3       # steps scored only with at least this many logging intervals to go (truth's grain)
TARGETS = {"final": "<= 5 %", "steps": "<= 20 %", "cov": "70-90 %", "unreach": "0"}


@dataclass(frozen=True)
class Run:
    file: Path
    task: str
    spec: str
    budget: float
    metric: str          # the CSV column: loss | accuracy
    x: np.ndarray
    y: np.ndarray
    schedule: Schedule

    @property
    def name(self) -> str:
        return f"{self.file.stem}:{self.metric}"


def load_runs(folder: Path) -> list[Run]:
    """Every (run, metric) pair, read as the CLI reads the file (``read_curve``; the SPEC, not the logged LR)."""
    out = []
    for row in pd.read_csv(folder / "index.csv", dtype=str, keep_default_na=False).itertuples():
        budget = float(row.budget)
        for metric in ("accuracy", "loss"):
            c = read_curve(folder / row.file, x="step", y=metric)
            out.append(Run(folder / row.file, row.task, row.schedule, budget, metric, np.asarray(c.x, float),
                           np.asarray(c.y, float), parse_schedule(row.schedule, budget)))
    return out


def stated_targets(r: Run) -> list[float]:
    """Accuracy: the values SHARES of the way from the first logged value to the final (last-3 mean), each rounded
    down to 0.01 (what a user states: "0.93"), distinct. Loss: the true curve's 95 % value (first value less 95 %
    of the true improvement)."""
    final = float(np.mean(r.y[-3:]))
    if r.metric == "accuracy":
        return sorted({math.floor(100 * (r.y[0] + s * (final - r.y[0])) + 1e-9) / 100 for s in SHARES})
    return [float(r.y[0] - IMPROVEMENT * (r.y[0] - final))]


def score(r: Run, frac: float, cal) -> tuple[dict, list[dict]]:
    """(the final value's row, one row per target) of the prediction from ``frac`` of ``r``."""
    n = int(np.searchsorted(r.x, frac * r.budget, side="right"))   # the CLI's --observed-until: x <= S
    xp, yp = r.x[:n], r.y[:n]
    x_now = float(xp[-1])
    space = MetricSpace.of(r.metric, r.y)
    down = lambda v: float(space.down(np.array([v]))[0])  # noqa: E731  (lower-is-better)
    final_true = float(np.mean(r.y[-3:]))
    grain = float(np.median(np.diff(r.x)))
    kw = dict(metric=r.metric, prior="shipped", calibration=cal, regime="scratch")
    base = {"run": r.name, "task": r.task, "metric": r.metric, "observed": frac, "x_now": x_now}
    targets = []
    for target in stated_targets(r):
        fixed = predict_curve(xp, yp, r.schedule, target=target, **kw)
        # the prediction whose steps are scored: accuracy's stated target, loss' --target-fraction goal (its truth
        # the true 95 % point, as bench/prediction_accuracy.py scores it)
        p = fixed if r.metric == "accuracy" else predict_curve(xp, yp, r.schedule, target_fraction=IMPROVEMENT, **kw)
        t = {**base, "target": target, "unreachable": fixed.steps_to_target is None, "p_reach": fixed.p_reach,
             "steps_pred": p.steps_to_target, "steps_true": math.nan, "steps_err": math.nan, "steps_cov": math.nan,
             "skip": "", "seen": False}
        cross = logged_crossing(r.x, space.down(r.y), down(target))     # the whole run's (the truth)
        seen = logged_crossing(xp, space.down(yp), down(target))        # what the user's prefix shows
        if cross is None:
            t["skip"] = "never reached"
        elif seen is not None:
            t["skip"], t["seen"] = "reached in the prefix", True
        elif cross - x_now < MIN_INTERVALS * grain:
            t["skip"] = "< 3 intervals ahead"
        else:
            remaining = t["steps_true"] = cross - x_now
            if p.steps_to_target is not None:
                t["steps_err"] = abs(p.steps_to_target / remaining - 1)
                t["steps_cov"] = p.interval_80[0] <= remaining <= p.interval_80[1]
            else:
                t["steps_err"], t["steps_cov"] = 1.0, False   # unreachable: scored as a total miss
        targets.append(t)
    lo, hi = sorted(p.final_value_interval_80)
    final = {**base, "model": p.model, "bands": p.bands, "final_true": final_true, "final_pred": p.final_value,
             "final_lo": lo, "final_hi": hi, "final_abs": abs(p.final_value - final_true),
             "final_rel": abs(p.final_value / final_true - 1),
             "final_rel_down": abs(down(p.final_value) / down(final_true) - 1), "final_cov": lo <= final_true <= hi}
    return final, targets


def cli_check(r: Run, frac: float, cal) -> tuple[bool, str]:
    """``dlsched predict curve`` as a user types it, against ``predict_curve`` on the same prefix."""
    goal = (["--target", repr(stated_targets(r)[0])] if r.metric == "accuracy"
            else ["--target-fraction", str(IMPROVEMENT)])
    cmd = [str(Path(sys.executable).with_name("dlsched")), "predict", "curve", str(r.file), "--x", "step", "--y",
           r.metric, "--budget", f"{r.budget:g}", "--schedule", r.spec, "--observed-until", f"{frac * r.budget:g}",
           *goal, "--metric", r.metric, "--json"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    if proc.returncode not in (0, 3):   # 3: target unreachable, the JSON is still printed
        return False, f"exit {proc.returncode}: {proc.stderr.strip()[-300:]}  ({' '.join(cmd)})"
    got = json.loads(proc.stdout)
    n = int(np.searchsorted(r.x, frac * r.budget, side="right"))
    kw = dict(metric=r.metric, prior="shipped", calibration=cal, regime="scratch")
    kw.update(target=stated_targets(r)[0]) if r.metric == "accuracy" else kw.update(target_fraction=IMPROVEMENT)
    p = predict_curve(r.x[:n], r.y[:n], r.schedule, **kw).as_json()
    keys = ("model", "final_value", "final_value_interval_80", "steps_to_target", "interval_80", "p_reach")
    same = all(np.allclose(np.array(got[k], float), np.array(p[k], float), rtol=1e-9, equal_nan=True)
               if not isinstance(got[k], str) and got[k] is not None and p[k] is not None else got[k] == p[k]
               for k in keys)
    return same, "" if same else f"differ: cli {[got[k] for k in keys]} direct {[p[k] for k in keys]}"


def pct(v) -> str:
    return "   -  " if v is None or (isinstance(v, float) and math.isnan(v)) else f"{100 * v:5.1f}%"


def report(fin: pd.DataFrame, tg: pd.DataFrame) -> None:
    for metric, what in (("accuracy", "stated --target: 90 % and 98 % of the way, rounded down to 0.01"),
                         ("loss", "--target-fraction 0.95 (steps); the true 95 % value as --target (reach)")):
        m, t = fin[fin.metric == metric], tg[tg.metric == metric]
        n_targets = int((t.observed == FRACTIONS[0]).sum())
        print(f"\n== {metric}: {m.run.nunique()} hold-out runs, {n_targets} targets; {what}")
        print(f"  {'obs':>4} {'final |err|':>11} {'rel':>6} {'rel(err)':>8}  {'cov80':>6}  {'steps':>6} {'n':>3}"
              f" {'cov80':>6}  {'unreach':>7}  {'p_reach med/min (n)':>20}  skipped targets")
        for f in FRACTIONS:
            s, ts = m[m.observed == f], t[t.observed == f]
            st = ts[ts.steps_err.notna()]
            reach = ts[ts.skip != "reached in the prefix"].p_reach.dropna()
            skips = {k: v for k, v in ts.skip.value_counts().items() if k}
            unit = f"{s.final_abs.median():.4f}" if metric == "loss" else f"{100 * s.final_abs.median():.2f}pt"
            print(f"  {int(100 * f):3d}% {unit:>11} {pct(s.final_rel.median())} {pct(s.final_rel_down.median()):>8}"
                  f"  {pct(s.final_cov.mean())}  {pct(st.steps_err.median())} {len(st):3d} "
                  f"{pct(st.steps_cov.astype(float).mean()) if len(st) else '   -  '}"
                  f"  {int(ts.unreachable.sum()):4d}/{len(ts)}"
                  f"  {reach.median():8.2f} / {reach.min():.2f} ({len(reach)})  {skips or ''}")
        print(f"  issue targets: final rel {TARGETS['final']}, steps {TARGETS['steps']}, 80 % coverage "
              f"{TARGETS['cov']}, wrongly unreachable {TARGETS['unreach']}  (|err| in the metric's units; rel: "
              "relative in them; rel(err): relative in the lower-is-better value the models fit, 1 - accuracy; "
              "p_reach of targets ahead of the prefix, all reached by the run)")
        print("  per task at 10 / 25 / 50 %: final rel(err) / final cov80 / steps err / steps cov80 (n)")
        for task in m.task.unique():
            cells = []
            for f in FRACTIONS:
                s, ts = m[(m.task == task) & (m.observed == f)], t[(t.task == task) & (t.observed == f)]
                st = ts[ts.steps_err.notna()]
                cells.append(f"{pct(s.final_rel_down.median()).strip()}/{pct(s.final_cov.mean()).strip()}/"
                             f"{pct(st.steps_err.median()).strip()}/"
                             f"{pct(st.steps_cov.astype(float).mean()).strip() if len(st) else '-'} ({len(st)})")
            print(f"    {task:10s} " + "   ".join(cells))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dir", type=Path, default=DEFAULT_DIR, help="folder with index.csv and the run CSVs")
    ap.add_argument("--cli", type=int, default=6, help="predictions also run through the CLI (0: none)")
    ap.add_argument("--rows", type=Path, help="write every scored prediction to this CSV")
    ap.add_argument("-v", "--verbose", action="store_true", help="print every prediction")
    args = ap.parse_args(argv)
    cal = load_calibration()
    runs = load_runs(args.dir)
    finals, targets, errors = [], [], []
    for r in runs:
        for f in FRACTIONS:
            try:
                one, ts = score(r, f, cal)
                finals.append(one)
                targets += ts
            except Exception as e:   # a crash is a finding: report it, go on
                errors.append(f"{r.name} at {int(100 * f)} %: {type(e).__name__}: {e}")
    fin, tg = pd.DataFrame(finals), pd.DataFrame(targets)
    print(f"hold-out: {len(runs) // 2} runs x (accuracy, loss) x {len(FRACTIONS)} fractions from {args.dir}; "
          "information: the prefix, the schedule SPEC, the budget, regime scratch, the shipped calibration and "
          "prior; no finished runs of the task, nothing fitted on these curves")
    if args.verbose:
        with pd.option_context("display.width", 250, "display.max_rows", 500, "display.max_columns", 30):
            print(fin.drop(columns=["task", "metric"]).round(4).to_string(index=False))
            print(tg.drop(columns=["task", "metric"]).round(4).to_string(index=False))
    report(fin, tg)
    # a target the prefix's smoothed log reached is a fact: the predictor should say p_reach 1
    reached = tg[tg.skip == "reached in the prefix"]
    low = reached[reached.p_reach.fillna(0) < 0.99]
    print(f"\n  targets the prefix already reached: {len(reached)}, of them with p_reach < 0.99: {len(low)}"
          + (f" ({', '.join(f'{r.run}@{int(100 * r.observed)}%={r.p_reach:.2f}' for r in low.itertuples())})"
             if len(low) else ""))
    said = tg[~tg.seen.astype(bool) & (tg.steps_pred == 0)]
    print(f"  targets the prefix's smoothed log has not reached, said to be at 0 steps (the text: 'already reached'): "
          f"{len(said)}"
          + (f" ({', '.join(f'{r.run}@{int(100 * r.observed)}% p_reach {r.p_reach:.2f}' for r in said.itertuples())})"
             if len(said) else ""))
    low = tg[~tg.seen.astype(bool) & (tg.p_reach < 0.1)]
    print(f"  targets every run reached, ahead of the prefix, given p_reach < 0.10: {len(low)}"
          + (" (" + ", ".join(f"{r.run}@{int(100 * r.observed)}% {r.target:.4g}: {r.p_reach:.2f}"
                              for r in low.itertuples()) + ")"
             if len(low) else ""))
    if errors:
        print("  CRASHED: " + "; ".join(errors))
    if args.cli:   # at 25 % observed
        picks = [r for r in runs if r.file.stem.endswith("-cosine")][:args.cli]   # each task, both metrics
        results = [(r, f, *cli_check(r, f, cal)) for r in picks for f in (0.25,)]
        ok = sum(s for _, _, s, _ in results)
        print(f"  CLI (`dlsched predict curve ... --json` via subprocess) agrees with predict_curve: "
              f"{ok}/{len(results)}")
        for r, f, s, why in results:
            if not s:
                print(f"    {r.name} at {int(100 * f)} %: {why}")
    if args.rows:
        fin.merge(tg, on=["run", "task", "metric", "observed", "x_now"]).to_csv(args.rows, index=False)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
