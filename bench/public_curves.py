"""A held-out check of the curve predictor on public training curves (issue 14).

Run: PYTHONPATH=src python bench/public_curves.py [--dir /work/public_curves]

The curves are real, completed runs found in public GitHub repositories (YOLO results.csv, Lightning
metrics.csv, Hugging Face model-card training tables and trainer_state.json files, Keras CSVLogger logs, printed
training logs). They are not committed: the
project keeps what the search tools find for reading only. ``bench/curves/public_sources.csv`` lists where each
one is (repository, path, commit, licence, schedule, budget, metric); the extracted curves live outside the
repository, one CSV per curve (columns x, y and lr where logged) plus the folder's ``manifest.csv``. Without
the folder the bench says so in one line and exits 0.

None of these curves is in the development set, and nothing here feeds back into the predictor: each is
predicted as ``dlsched predict curve FILE --x x --y y --budget B --schedule S --observed-until F*B
--target-fraction 0.95`` would, i.e. the CLI's reader (``perf.curve_readers.read_curve``), its schedule
(the logged LR column for ``lr-column``, else the spec), and ``predict_curve`` with the shipped
``perf/calibration.json`` and the shipped prior for the curve's metric and decay (the general case: no
same-task level), declared ``--regime`` as ``public_sources.csv``'s ``regime`` column says (finetune: the run
started from pretrained weights, as its task note says; a manifest's own ``regime`` column wins). The scoring (truth, the 95 % point, coverage, wrongly unreachable) and Optimus alone are
``bench/prediction_accuracy.py``'s own ``evaluate`` and ``evaluate_optimus``.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent))

from prediction_accuracy import (FRACTIONS, MIN_INTERVALS, evaluate, evaluate_optimus, observed_beyond, pct,  # noqa: E402
                                 reach_report, reach_rows, unshifted)

from dev_set import DevCurve  # noqa: E402  (bench/curves, on the path prediction_accuracy sets)
from dlsched.perf.calibration import load_calibration  # noqa: E402
from dlsched.perf.curve_readers import read_curve  # noqa: E402
from dlsched.perf.schedule import Schedule, parse_schedule  # noqa: E402

DEFAULT_DIR = Path("/work/public_curves")
TARGETS = "targets: final <= 5 %, steps <= 20 %, 80 % coverage 70-90 %, wrongly unreachable 0"


SOURCES = Path(__file__).resolve().parent / "curves" / "public_sources.csv"


def regimes() -> dict[str, str]:
    """file -> the regime a user of that run would declare (``public_sources.csv``)."""
    src = pd.read_csv(SOURCES, dtype=str, keep_default_na=False)
    return dict(zip(src.file, src.regime)) if "regime" in src else {}


def load_curves(folder: Path) -> list[DevCurve]:
    """The manifest's curves, read and scheduled as the CLI does (``commands/predict_curve._schedule``)."""
    out, declared = [], regimes()
    for row in pd.read_csv(folder / "manifest.csv", dtype=str, keep_default_na=False).itertuples():
        logged = row.schedule == "lr-column"
        curve = read_curve(folder / row.file, x="x", y="y", lr_col="lr" if logged else None)
        budget = float(row.budget)
        schedule = Schedule.from_points(curve.lr_x, curve.lr, budget) if logged else parse_schedule(row.schedule, budget)
        out.append(DevCurve(Path(row.file).stem, curve.x, curve.y, row.metric, schedule,
                            {"repo": row.repo, "task": row.task, "schedule": "lr-column" if logged else row.schedule,
                             "regime": getattr(row, "regime", "") or declared.get(row.file) or "scratch"}))
    return out


def yn(hit) -> str:
    return "-" if isinstance(hit, float) and np.isnan(hit) else "y" if hit else "n"


def cov(d: pd.DataFrame, col: str) -> str:
    return pct(d[col].dropna().astype(float).mean())


def report(curves: list[DevCurve]) -> None:
    cal = load_calibration()
    rows = [evaluate(c, f, cal, "shipped") for c in curves for f in FRACTIONS]   # "shipped": the CLI's default prior
    opt = [evaluate_optimus(c, f) for c in curves for f in FRACTIONS]
    law = pd.DataFrame([evaluate(c, f, unshifted(cal), "shipped") for c in curves for f in FRACTIONS])
    df, od = pd.DataFrame(rows), pd.DataFrame(opt)
    print(f"== held-out public curves: {len(curves)} completed runs, predicted as `dlsched predict curve` "
          "(shipped calibration and prior), schedule + budget given")
    print(f"  per curve at {' / '.join(f'{int(100 * f)}' for f in FRACTIONS)} % observed: final error, steps-to-95 % "
          "error, truth in the 80 % band for final/steps (y/n/-), model   | Optimus alone: final / steps")
    for c in curves:
        g, o = df[df.curve == c.name], od[od.curve == c.name]
        cells = "  ".join(f"{pct(r.final_err)} {pct(r.steps_err)} {yn(r.final_cov)}{yn(r.steps_cov)} {r.model[:4]}"
                          + (" UNREACHABLE" if r.unreachable else "") for r in g.itertuples())
        ocells = " ".join(f"{pct(r.final_err)}/{pct(r.steps_err)}" for r in o.itertuples())
        print(f"  {c.name:38s} {c.meta['regime'][:2]} {cells}   | {ocells}")
    beyond = observed_beyond(curves)
    if beyond:   # the predictor needs >= 4 points; the CLI refuses fewer (exit 2), the bench observes 4
        print(f"  observed beyond the row's fraction (4 points minimum): {', '.join(beyond)}")
    print(f"  medians ({TARGETS}); steps scored where >= {MIN_INTERVALS} logging intervals remained")
    for f in FRACTIONS:
        s, o, raw = df[df.observed == f], od[od.observed == f], law[law.observed == f]
        print(f"  after {int(100 * f):2d} %: final {pct(s.final_err.median())}"
              f" [in the metric's own units {pct(s.final_err_own.median()).strip()}]  steps {pct(s.steps_err.median())} "
              f"(n={s.steps_err.notna().sum()}; the true curve's 95 % value as a fixed --target "
              f"{pct(s.fixed_err.median()).strip()}; the law's own crossing {pct(raw.steps_err.median()).strip()}, "
              f"coverage {cov(raw, 'steps_cov').strip()})  80 % coverage final {cov(s, 'final_cov')} steps {cov(s, 'steps_cov')}"
              f"  wrongly unreachable {int(s.unreachable.sum())}"
              f"   | Optimus alone: final {pct(o.final_err.median())}  steps {pct(o.steps_err.median())}"
              f"  coverage {cov(o, 'final_cov')}/{cov(o, 'steps_cov')}  unreachable {int(o.unreachable.sum())}")
    print("  (information: both sides see the same prefix; the schedule-aware side also gets the schedule and budget, "
          "and the shipped calibration and prior from the development set, none of whose curves is here; unreachable "
          "counts are of targets every run did reach)")
    reach_report([r for c in curves for f in FRACTIONS for r in reach_rows(c, f, cal, "shipped")])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dir", type=Path, default=DEFAULT_DIR, help="folder with manifest.csv and the curve CSVs")
    args = ap.parse_args(argv)
    if not (args.dir / "manifest.csv").is_file():
        print(f"public curves: no {args.dir / 'manifest.csv'} (the curves are not committed; "
              "bench/curves/public_sources.csv says where to fetch them)")
        return 0
    report(load_curves(args.dir))
    return 0


if __name__ == "__main__":
    sys.exit(main())
