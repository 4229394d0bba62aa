"""The same runs predicted as the accuracy a researcher watches, not the loss the development set scores.

Run: PYTHONPATH=src python bench/declared_accuracy.py

Every run of ``bench/curves`` (``make_dev_curves.py``) logs held-out accuracy beside its loss; ``prediction_accuracy``
scores the loss of all but the digits fine-tunes. Here each run is cut after 10 / 25 / 50 % of its budget and
predicted as ``dlsched predict curve --metric accuracy --schedule SPEC --budget N --regime R`` does (shipped prior,
``perf/calibration.json``, with the run's own task's fits left out: ``Calibration.without_task``; the table holds
the fits of every development curve ``prediction_accuracy`` scores), against the mean of its last 3 logged
accuracies: the final's error in accuracy units (as ``final_value`` reports it) and as an error rate (the space the
models fit), and whether the 80 % band holds the truth. The accuracy's bands are the shipped table's for its kind
(``Calibration.error_kind``) rebuilt without the run (``prediction_accuracy.loco_calibrations``: the shipped one holds
the run's own errors). Beside it, the same run's loss predicted the same way: the information both sides have is the same (the
prefix, the schedule and the budget; neither the run's own end).

Then what the service does once jobs stating such a target have finished (``service.job_models.curve_prior``): each run
predicted with a prior from the other runs' finished accuracy fits (leave-one-out: never the run's own; the same
task's finals carried to its schedule), and with those of other tasks only (no level: a new kind of job).

The issue's target (median final error <= 5 %) is printed beside each figure.
"""
from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from dlsched.perf.annealing import fit_annealing
from dlsched.perf.calibration import Calibration, load_calibration
from dlsched.perf.curve_predict import MetricSpace, predict_curve
from dlsched.perf.prior import FinishedFit, finished_fit, metric_kind, prior_from_fits
from dlsched.perf.schedule import parse_schedule

sys.path.insert(0, str(Path(__file__).resolve().parent))
import prediction_accuracy as pa  # noqa: E402
from dev_set import dev_curves  # noqa: E402  (bench/curves, on the path prediction_accuracy sets)

CURVES = Path(__file__).resolve().parent / "curves"
FRACTIONS = (0.10, 0.25, 0.50)


def runs() -> list:
    """The index rows of the runs that log accuracy and do not over-fit by design."""
    return [r for r in pd.read_csv(CURVES / "index.csv").itertuples()
            if "accuracy" in pd.read_csv(CURVES / r.file, nrows=0).columns and not r.overfits]


def meta(r) -> dict:
    """Run ``r``'s metadata as a service job stating an accuracy target has it (``metric_target.target_meta``)."""
    return {"family": r.family, "dataset": r.task, "metric": "accuracy", "kind": "accuracy", "regime": r.regime}


def accuracy_fits(rs: list) -> dict[str, FinishedFit]:
    """Each run's accuracy fit on all its points and where it ended, as a finished job leaves them."""
    fits = {}
    for r in rs:
        d = pd.read_csv(CURVES / r.file)
        y = d.accuracy.to_numpy(float)
        down = MetricSpace.of("accuracy", y).down(y)
        curve = fit_annealing(d.step.to_numpy(float), down, parse_schedule(r.schedule, float(r.budget)), None)
        fits[r.file] = finished_fit(curve, meta(r), float(np.mean(down[-3:])))
    return fits


def accuracy_bands() -> dict[str, Calibration]:
    """Each run's accuracy bands from the other accuracy and error curves only, by its index file name."""
    curves = dev_curves(with_accuracy=True)
    cals = pa.loco_calibrations([c for c in curves if metric_kind(c.metric) == "error"], pa.loco_prior(curves),
                                pa.cross_task_prior(curves), pa.loco_prior(curves, carry=False))[0]
    return {f"{name.removesuffix('-accuracy')}.csv": cal for name, cal in cals.items()}


def run_rows(r, fits: dict[str, FinishedFit] | None = None, bands: dict[str, Calibration] | None = None,
             without_task: bool = True) -> list[dict]:
    """One row per fraction of run ``r`` (an index row): its accuracy and its loss predicted from the points up to that
    fraction of the budget, as ``--observed-until`` cuts them; with the other runs' ``fits``, its accuracy also with
    a prior from them (``learnt``) and from those of other tasks (``cross``); with ``bands``, its accuracy's bands
    without its own errors; ``without_task=False``: the shipped prior whole, as the CLI has it (module doc)."""
    d = pd.read_csv(CURVES / r.file)
    schedule = parse_schedule(r.schedule, float(r.budget))
    x = d.step.to_numpy(float)
    cal = load_calibration().without_task(r.task) if without_task else load_calibration()
    if bands is not None:
        cal = dataclasses.replace(cal, error_kind=bands[r.file])
    priors = {"": "shipped"}
    if fits is not None:
        shipped, m = cal.curve_prior("accuracy", schedule, r.regime), meta(r) | {"decay": schedule.decay}
        others = [f for name, f in fits.items() if name != r.file]
        priors["learnt_"] = prior_from_fits(others, m, default=shipped, schedule=schedule)
        # other tasks set no level (``perf.prior``)
        priors["cross_"] = prior_from_fits([f for f in others if f.meta["dataset"] != r.task], m, default=shipped)
    out = []
    for f in FRACTIONS:
        n = max(4, int(np.searchsorted(x, f * r.budget, side="right")))
        row = {"curve": r.file.removesuffix(".csv"), "source": r.task, "observed": f}
        for metric, pool, prior in [("loss", "", "shipped")] + [("accuracy", k, p) for k, p in priors.items()]:
            y = d[metric].to_numpy(float)
            true = float(np.mean(y[-3:]))
            p = predict_curve(x[:n], y[:n], schedule, metric=metric, regime=r.regime, prior=prior, calibration=cal)
            lo, hi = p.final_value_interval_80
            row[f"{pool}{metric}_err"] = abs(p.final_value / true - 1)
            row[f"{pool}{metric}_cov"] = lo <= true <= hi
            row[f"{pool}{metric}_predicted"], row[f"{pool}{metric}_true"] = p.final_value, true
            if metric == "accuracy":
                row[f"{pool}error_err"] = abs((1 - p.final_value) / (1 - true) - 1)
        out.append(row)
    return out


def main() -> None:
    fits, bands = accuracy_fits(runs()), accuracy_bands()
    d = pd.DataFrame([row for r in runs() for row in run_rows(r, fits, bands)])
    print(f"== declared accuracy: {d.curve.nunique()} development runs (over-fitting ones left out), shipped prior, "
          "schedule + budget given; final value error, median (target <= 5 %), and 80 % coverage (70-90 %)")
    print("  source      observed  accuracy units  as error rate  coverage |  the same runs' loss  coverage")
    for (source, f), g in d.groupby(["source", "observed"], sort=False):
        print(f"  {source:<11} {int(100 * f):>6} %  {100 * g.accuracy_err.median():12.1f} %  {100 * g.error_err.median():11.1f} %"
              f"  {100 * g.accuracy_cov.mean():6.0f} % | {100 * g.loss_err.median():17.1f} %  {100 * g.loss_cov.mean():6.0f} %")
    for f, g in d.groupby("observed"):
        print(f"  all         {int(100 * f):>6} %  {100 * g.accuracy_err.median():12.1f} %  {100 * g.error_err.median():11.1f} %"
              f"  {100 * g.accuracy_cov.mean():6.0f} % | {100 * g.loss_err.median():17.1f} %  {100 * g.loss_cov.mean():6.0f} %"
              "   (targets: <= 5 %, 70-90 %)")
    print("== the same runs' accuracy once jobs stating such a target finished (the service's prior from them); the "
          "other runs' finished fits, never the run's own")
    print("  source      observed  all other runs (same task's level)  coverage | other tasks only, no level  coverage")
    for key, g in list(d.groupby(["source", "observed"], sort=False)) + [(("all", f), g) for f, g in d.groupby("observed")]:
        print(f"  {key[0]:<11} {int(100 * key[1]):>6} %  {100 * g.learnt_accuracy_err.median():31.1f} %  "
              f"{100 * g.learnt_accuracy_cov.mean():6.0f} % | {100 * g.cross_accuracy_err.median():24.1f} %  "
              f"{100 * g.cross_accuracy_cov.mean():6.0f} %" + ("   (targets: <= 5 %, 70-90 %)" if key[0] == "all" else ""))
    worst = d.sort_values("error_err", ascending=False).head(5)
    print("  largest misses (as error rate): " + "; ".join(
        f"{w.curve} at {int(100 * w.observed)} %: {w.accuracy_predicted:.3f} for {w.accuracy_true:.3f}" for w in worst.itertuples()))


if __name__ == "__main__":
    main()
