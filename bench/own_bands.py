"""The service's own bands (``service/own_calibration.py``) against the shipped ones, side by side on one stream of jobs.

Run: PYTHONPATH=src python bench/own_bands.py [--orders 5]

Every run of ``bench/curves`` is a service job (its schedule, budget, dataset and regime declared, a target of its
held-out accuracy stated), refitted and its prediction stored at 10, 25, 50 and 75 % of its budget as the live loop
does (``JobModels.refit``, ``Store.add_prediction``), then finished. The jobs arrive in a random order (``--orders``
seeds); two clusters see the same stream: one whose bands become its own once 9 finished jobs have an error at a
fraction, one that keeps the shipped table (``perf/calibration.json``). Both have the same information: the prefixes,
schedules and budgets, and the finished jobs before each one (their fits give both the same priors). Scored: the
jobs after the 9th (where the first cluster's bands may be its own), per fraction, whether the 80 % band of the
final loss and of the final accuracy held the truth (the mean of the run's last 3 values), and the band's median
log width. Each job also states a target loss it reaches (90 % of the way from its first loss to its last): the band
of the step it gets there at, where the service showed one (the crossing predicted ahead), is scored against where
its binned losses' 3-point median got there ("steps"). The target is 70-90 % coverage.
"""
from __future__ import annotations

import argparse
import math
import sys
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd

from dlsched.perf.calibration import OWN_ERRORS_MIN, load_calibration
from dlsched.perf.first_passage import logged_crossing
from dlsched.service.job_models import JobModels
from dlsched.service.refit import binned_curve
from dlsched.service.store import Store
from dlsched.spec import JobSpec

CURVES = Path(__file__).resolve().parent / "curves"
sys.path.insert(0, str(CURVES))
from replay import progress_records  # noqa: E402
FRACTIONS = (0.10, 0.25, 0.50, 0.75)
SCORED = (0.10, 0.25, 0.50)
BATCH = 16
STATED_SHARE = 0.9   # each job's stated target loss, of the way from its first loss to its last


def runs() -> list:
    return [r for r in pd.read_csv(CURVES / "index.csv").itertuples() if not r.overfits]


def run_job(models: JobModels, store: Store, run) -> dict[float, tuple]:
    """{fraction: (loss fit, metric target)} the job was told at each fraction; it then finishes."""
    d = pd.read_csv(CURVES / run.file)
    facts = {"schedule": run.schedule, "dataset": run.task, "regime": run.regime,
             "target": {"metric": "val_accuracy", "value": 0.99, "kind": "accuracy"},
             "target_loss": stated_loss(d)}
    jid = store.submit(JobSpec(name=run.task, command=["python", f"{run.family}.py"], gpus=1, batch_size=BATCH,
                               total_samples=BATCH * int(run.budget), prediction=facts))
    recs = progress_records(d, BATCH, "val_accuracy")
    told, done = {}, 0
    for share in (*FRACTIONS, 1.0):
        seen = [r for r in recs if r["step"] <= share * run.budget]
        store.add_progress(jid, seen[done:], 1, samples=seen[-1]["samples"])
        done = len(seen)
        pred = models.refit(store.get(jid), seen, 2000.0 + share,
                            metric_values=models.metric_values(jid, "val_accuracy", store))
        if pred is None:
            continue
        store.add_prediction(jid, 2000.0 + share, pred.fraction_done, pred.total_samples, pred.remaining_s,
                             pred.predicted_finish, pred.loss_fit)
        if share < 1.0 and pred.loss_fit and "final_80" in pred.loss_fit:
            told[share] = (pred.loss_fit, pred.loss_fit.get("metric_target"))
    models.forget(jid, finished=True)
    return told


def stated_loss(d: pd.DataFrame) -> float:
    """The job's stated target loss: ``STATED_SHARE`` of the way from its first loss to its last 3's median (one it
    reaches; what a user states is a value, not a share)."""
    first, last = float(d.loss.iloc[0]), float(np.median(d.loss.iloc[-3:]))
    return first - STATED_SHARE * (first - last)


def reached_at(d: pd.DataFrame) -> float | None:
    """Where the run's binned losses' 3-point median got to its stated target loss, as the service measures it."""
    return logged_crossing(*binned_curve(d.step.to_numpy(float), d.loss.to_numpy(float)), stated_loss(d))


def scores(told: dict, truth_loss: float, truth_acc: float, truth_step: float | None) -> list[tuple]:
    """(fraction, kind, inside, log width) per band the job was told: of the final loss and accuracy, and of the
    step its stated target loss is reached at (where the service showed a band: the crossing ahead)."""
    out = []
    for f in SCORED:
        if f not in told:
            continue
        loss_fit, target = told[f]
        band = loss_fit.get("target_step_80")
        if band is not None and truth_step is not None and band[0] > loss_fit["observed_until"]:
            seen = loss_fit["observed_until"]
            out.append((f, "steps", band[0] <= truth_step <= band[1], math.log((band[1] - seen) / (band[0] - seen))))
        for kind, band, truth in (("loss", loss_fit["final_80"], truth_loss),
                                  ("accuracy", None if target is None else target["final_80"], truth_acc)):
            if band is None:
                continue
            lo, hi = band
            width = math.log((1 - lo) / (1 - hi)) if kind == "accuracy" else math.log(hi / lo)
            out.append((f, kind, lo <= truth <= hi, width))
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--orders", type=int, default=5)
    args = ap.parse_args()
    shipped = load_calibration()
    rows = []
    for seed in range(args.orders):
        order = list(np.random.default_rng(seed).permutation(len(runs())))
        stream = [runs()[i] for i in order]
        with tempfile.TemporaryDirectory() as tmp:
            clusters = {}
            for arm in ("own", "shipped"):
                store = Store(Path(tmp) / f"{arm}.db")
                models = JobModels(("slot",), store)
                if arm == "shipped":
                    models.bands.of = lambda kind: shipped   # the comparison: never its own
                clusters[arm] = (models, store)
            for n, run in enumerate(stream):
                d = pd.read_csv(CURVES / run.file)
                truth_loss, truth_acc = float(d.loss.iloc[-3:].mean()), float(d.accuracy.iloc[-3:].mean())
                for arm, (models, store) in clusters.items():
                    for f, kind, inside, width in scores(run_job(models, store, run), truth_loss, truth_acc,
                                                         reached_at(d)):
                        rows.append((seed, n, arm, f, kind, inside, width))
            for _, store in clusters.values():
                store.close()
    df = pd.DataFrame(rows, columns=["order", "n", "arm", "fraction", "kind", "inside", "width"])
    later = df[df.n >= OWN_ERRORS_MIN]
    print(f"== own bands vs shipped: {len(runs())} real runs per order, {args.orders} orders; scored: the jobs after "
          f"the {OWN_ERRORS_MIN}th (both clusters see the same jobs, priors and prefixes; the first's bands become its "
          "own)")
    print("   kind      fraction | coverage own  shipped  (70-90 %) | median log width own  shipped |  n")
    for (kind, f), g in later.groupby(["kind", "fraction"]):
        own, ship = g[g.arm == "own"], g[g.arm == "shipped"]
        print(f"   {kind:9s} {f:7.0%}  | {own.inside.mean():12.1%} {ship.inside.mean():8.1%}            | "
              f"{own.width.median():20.3f} {ship.width.median():8.3f} | {len(own):3d}")
    for kind, g in later.groupby("kind"):
        own, ship = g[g.arm == "own"], g[g.arm == "shipped"]
        print(f"   {kind:9s} all      | {own.inside.mean():12.1%} {ship.inside.mean():8.1%}            | "
              f"{own.width.median():20.3f} {ship.width.median():8.3f} | {len(own):3d}")


if __name__ == "__main__":
    main()
