"""How well does the convergence model predict the remaining steps, and the speed model the step time?

Run: PYTHONPATH=src python bench/prediction_accuracy.py

Convergence. Curves: the seed log (``gpu-training/resnet50-p100-v2_per_epoch_from_log.csv``, train loss vs
cumulative steps) and the six Pollux apps (``pollux/traces/<app>/validation-<M0>.csv`` at the initial batch
M0, truncated at the artifact's max_epochs): the "loss" is the validation error (1 − accuracy / F1 / hit
rate) or the metric itself where it falls (deepspeech2 WER, yolov3 loss); x = iterations at M0.
Ground truth: the job really ends at the last epoch of its trace. The owner's threshold δ is the one that
makes the Optimus rule stop there according to the *reference* fit (the default, unweighted fit of the full
curve; fixed, so a fit variant under test never defines its own truth): ``LossCurve.delta_stopping_at``,
the decrease of the epoch that would start at the last step (``converged_step`` stops *before* an epoch that
gains < δ, so the reference fit predicts its own stop exactly — checked and printed). δ is carried in raw
loss units, so the partial fit's own normalisation cannot shift it. We fit only the first 10/25/50 % of
the epochs (at least 3 points), predict the stop step with that δ, and report
|predicted − actual remaining| / actual remaining. (bert has 2 epochs: too few points to fit -> skipped.)
Also printed: the same miss relative to the *total* steps (Optimus Fig. 6's metric); a target loss instead
of δ (the best loss the trace reaches), which is harder: near the asymptote a small loss error is a large
step error (inf = the partial fit never reaches it); and, for comparison with earlier runs, the δ-rule with
the old δ (decrease of the epoch that *ended* at the last step), which stops one epoch early by construction
(a built-in 1/remaining-epochs error, 14 % for ncf at 25 %).
Fit variants (recency weights, leave-one-curve-out): ``bench/convergence_variants.py``.

Speed. For each Pollux app (scalability.csv + placements.csv rows), fit the all-reduce model on 6 designed
samples (see ``design_samples``), on 6 random rows (mean of 5 draws) and on a random half, and predict every
other measured step; and the H100 compute model on 6 of the batch sizes of each model/dataset/precision,
predicting the rest. Targets (issue 2): remaining-steps error ≤ 10 % after 25 %; speed median error ≤ 5 % with ≤ 6 samples.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from dlsched.perf.convergence import LossCurve, fit_curve
from dlsched.perf.profile import POLLUX_APPS, h100_throughput, pollux_app, seed_log
from dlsched.perf.speed import fit_compute, fit_step_time, profiling_rows

FRACTIONS = (0.10, 0.25, 0.50)


def curves() -> dict[str, pd.DataFrame]:
    out = {}
    log = seed_log()
    out["seed-resnet50"] = pd.DataFrame({"step": log.steps_cum_assumed, "loss": log.train_loss})
    for app in POLLUX_APPS:
        out[app] = pollux_app(app).loss_curve()
    return out


@dataclass(frozen=True)
class StopTruth:
    """A curve, where its job really stops (its last step) and the owner's δ, in raw loss units."""

    steps: np.ndarray
    losses: np.ndarray
    steps_per_epoch: float
    delta_raw: float
    delta_raw_old: float  # decrease of the last observed epoch: stops one epoch early (kept for comparison)


def reference_fit(steps, losses) -> LossCurve:
    """The fit under test by default, and always the one that defines the ground truth."""
    return fit_curve(steps, losses).curve


def stop_truth(curve: pd.DataFrame) -> StopTruth:
    k, l = curve.step.to_numpy(float), curve.loss.to_numpy(float)
    E = float(np.median(np.diff(k)))
    full = reference_fit(k, l)
    return StopTruth(k, l, E, full.delta_stopping_at(k[-1], E) * full.scale,
                     float(full.loss(k[-1] - E) - full.loss(k[-1])) * full.scale)


def convergence_errors(curve: pd.DataFrame, frac: float, fit=reference_fit) -> tuple[float, float, float, float]:
    """Signed relative error (negative = stops too early) of the remaining steps predicted after ``frac`` of the
    epochs by ``fit(steps, losses) -> LossCurve``: (δ-rule vs remaining, target loss vs remaining,
    δ-rule vs total steps, old off-by-one δ vs remaining)."""
    t = stop_truth(curve)
    k, l, E = t.steps, t.losses, t.steps_per_epoch
    n = max(3, int(round(frac * len(k))))
    part = fit(k[:n], l[:n])
    actual = k[-1] - k[n - 1]
    by_delta = part.remaining_steps(k[n - 1], delta=t.delta_raw / part.scale, steps_per_epoch=E)
    by_old = part.remaining_steps(k[n - 1], delta=t.delta_raw_old / part.scale, steps_per_epoch=E)
    by_target = part.remaining_steps(k[n - 1], target_loss=l.min() / part.scale)
    return ((by_delta - actual) / actual, (by_target - actual) / actual, (by_delta - actual) / k[-1],
            (by_old - actual) / actual)


def reference_self_check(curve: pd.DataFrame) -> float:
    """Largest |error| of the reference fit predicting its own stop from 10/25/50 %: 0 when δ is coherent."""
    t = stop_truth(curve)
    full = reference_fit(t.steps, t.losses)
    errs = []
    for f in FRACTIONS:
        k_now = t.steps[max(3, int(round(f * len(t.steps)))) - 1]
        pred = full.remaining_steps(k_now, delta=t.delta_raw / full.scale, steps_per_epoch=t.steps_per_epoch)
        errs.append(abs(pred - (t.steps[-1] - k_now)) / (t.steps[-1] - k_now))
    return max(errs)


def design_samples(d: pd.DataFrame) -> pd.DataFrame:
    """The recommended profiling plan (``speed.PROFILING_PLAN``, where the why is): 1 GPU at the smallest local
    batch, one full node at the largest, then 3 nodes x 8 GPUs (middle batch), 4 x 16 (smallest), 8 x 32
    (largest) and 16 x 32 (smallest)."""
    return d.loc[profiling_rows(d)]


def speed_error(train: pd.DataFrame, test: pd.DataFrame) -> float:
    p = fit_step_time(train.num_replicas, train.num_nodes, train.local_bsz, train.step_time, train.sync_time)
    pred = p.step_time(test.num_replicas.to_numpy(), test.num_nodes.to_numpy(), test.local_bsz.to_numpy())
    return float(np.median(np.abs(pred / test.step_time.to_numpy() - 1)))


def repeat_scatter(d: pd.DataFrame) -> float:
    """Median |row / mean of the other measurements of the same (nodes, replicas, local batch) − 1|: the noise no
    model of those three inputs can remove (placements differ in GPUs per node; runs differ)."""
    g = d.groupby(["num_nodes", "num_replicas", "local_bsz"]).step_time
    count, total = g.transform("size"), g.transform("sum")
    rep = count > 1
    others = (total[rep] - d.step_time[rep]) / (count[rep] - 1)
    return float(np.median(np.abs(d.step_time[rep] / others - 1)))


def h100_errors(fit_on_all: bool = False) -> list[float]:
    """Per model/precision: median error on the batch sizes outside 6 evenly spread ones, fitted on those 6
    (or, ``fit_on_all``, on every batch size: the best this family does on the same points)."""
    out = []
    for _, g in h100_throughput().groupby(["model", "dataset", "precision"]):
        g = g.sort_values("batch_size")
        idx = np.unique(np.linspace(0, len(g) - 1, 6).round().astype(int))
        tr, te = (g if fit_on_all else g.iloc[idx]), g.drop(index=g.index[idx])
        if te.empty:
            continue
        c = fit_compute(tr.batch_size, tr.step_time)
        out.append(float(np.median(np.abs(c(te.batch_size.to_numpy()) / te.step_time.to_numpy() - 1))))
    return out


def speed_report() -> None:
    print("== speed: all-reduce step-time model, median |rel. error| on the rows not fitted (target <= 5 % with <= 6 samples)")
    print(f"  {'app':12s} {'6 designed':>11s} {'6 random (5 draws)':>19s} {'random half':>12s}"
          f" {'| floor: all rows':>17s} {'repeat scatter':>15s} {'full-node 2x2':>14s}")
    res = []
    for app in POLLUX_APPS:
        d = pollux_app(app).step_samples()
        tr = design_samples(d)
        designed = speed_error(tr, d.drop(index=tr.index))
        rnd = float(np.mean([speed_error(t, d.drop(index=t.index)) for t in (d.sample(6, random_state=s) for s in range(5))]))
        idx = np.random.default_rng(0).permutation(len(d))
        half = speed_error(d.iloc[idx[: len(d) // 2]], d.iloc[idx[len(d) // 2:]])
        # why 5 % is out of reach: the same model fitted on every row, scored on the rows the plan leaves out
        # (the best parameters this family has), and the scatter between repeats of one configuration
        floor = speed_error(d, d.drop(index=tr.index))
        scatter = repeat_scatter(d)
        # a plan of one shape for contrast: 4 and 8 full nodes x smallest/largest batch, 1 GPU, 1 full node
        fact = d.loc[profiling_rows(d, ((1, 1, 0.0), (1, 4, 1.0), (4, 16, 0.0), (4, 16, 1.0), (8, 32, 0.0), (8, 32, 1.0)))]
        factorial = speed_error(fact, d.drop(index=fact.index))
        res.append((designed, rnd, half, floor, scatter, factorial))
        print(f"  {app:12s} {100 * designed:10.1f} % {100 * rnd:18.1f} % {100 * half:11.1f} %"
              f" {100 * floor:15.1f} % {100 * scatter:14.1f} % {100 * factorial:12.1f} %")
    med = np.median(np.array(res), axis=0)
    print(f"  {'median':12s} {100 * med[0]:10.1f} % {100 * med[1]:18.1f} % {100 * med[2]:11.1f} %"
          f" {100 * med[3]:15.1f} % {100 * med[4]:14.1f} % {100 * med[5]:12.1f} %")
    raw = h100_throughput()
    spread = (pd.to_numeric(raw.step_ms_p90) - pd.to_numeric(raw.step_ms_p10)) / raw.step_ms_median
    six, every = h100_errors(), h100_errors(fit_on_all=True)
    print(f"  H100 compute model, 6 batch sizes -> others: median over {len(six)} model/precision pairs "
          f"{100 * np.median(six):.1f} %  (target <= 5 %); floor: fitted on all 8 batch sizes "
          f"{100 * np.median(every):.1f} % on the same points, the table's own p10-p90 "
          f"spread is ±{50 * spread.median():.1f} % of the median step")


def main() -> None:
    print("== convergence: median |error| of remaining steps over 6 curves (target <= 10 % after 25 %)")
    rows = []
    checks = []
    for name, c in curves().items():
        if len(c) < 6:
            print(f"  {name}: {len(c)} epochs only, skipped")
            continue
        checks.append(reference_self_check(c))
        for f in FRACTIONS:
            rows.append((name, f, *np.abs(convergence_errors(c, f))))
    df = pd.DataFrame(rows, columns=["curve", "observed", "err_delta_rule", "err_target_loss", "err_total", "err_old_delta"])
    print(df.pivot(index="curve", columns="observed", values="err_delta_rule").map(lambda x: f"{100 * x:7.1f} %")
          .to_string(header=[f"δ-rule @{int(100 * f)}%" for f in FRACTIONS]))
    for f in FRACTIONS:
        s = df[df.observed == f]
        print(f"  after {int(100 * f):2d} %: median error δ-rule {100 * s.err_delta_rule.median():6.1f} %"
              + ("  (target <= 10 %)" if f == 0.25 else " " * 17)
              + f"   δ-rule on total steps {100 * s.err_total.median():5.1f} %   target-loss {100 * s.err_target_loss.median():6.1f} %"
              f"   [old off-by-one δ: {100 * s.err_old_delta.median():5.1f} %]")
    print(f"  self-check: the reference full-curve fit predicts its own stop with max error {100 * max(checks):.1e} %")

    speed_report()

if __name__ == "__main__":
    main()
