"""How well does the convergence model predict the remaining steps, and the speed model the step time?

Run: PYTHONPATH=src python bench/prediction_accuracy.py

Convergence. Curves: the seed log (``gpu-training/resnet50-p100-v2_per_epoch_from_log.csv``, train loss vs
cumulative steps) and the six Pollux apps (``pollux/traces/<app>/validation-<M0>.csv`` at the initial batch
M0, truncated at the artifact's max_epochs): the "loss" is the validation error (1 − accuracy / F1 / hit
rate) or the metric itself where it falls (deepspeech2 WER, yolov3 loss); x = iterations at M0.
Ground truth: the job really ends at the last epoch of its trace. The owner's threshold δ is the one that
makes the Optimus rule stop there — the per-epoch decrease of the full-curve fit at the last epoch. We fit
only the first 10/25/50 % of the epochs, predict the stop step with that δ, and report
|predicted − actual remaining| / actual remaining. (bert has 2 epochs: too few points to fit -> skipped.)
A second column uses a target loss instead (the best loss the trace reaches), which is harder: near the
asymptote a small loss error is a large step error.

Speed. For each Pollux app, fit the all-reduce model on 6 designed samples (1 GPU at small and large local
batch, one full node, 2 nodes, the largest scalability run at two batch sizes) and predict every other
measured step; and the H100 compute model on 6 of the batch sizes of each model/precision, predicting the
rest. Targets (issue 2): remaining-steps error ≤ 10 % after 25 %; speed median error ≤ 5 % with ≤ 6 samples.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from dlsched.perf.convergence import fit_curve
from dlsched.perf.profile import POLLUX_APPS, h100_throughput, pollux_app, seed_log
from dlsched.perf.speed import fit_compute, fit_step_time

FRACTIONS = (0.10, 0.25, 0.50)


def curves() -> dict[str, pd.DataFrame]:
    out = {}
    log = seed_log()
    out["seed-resnet50"] = pd.DataFrame({"step": log.steps_cum_assumed, "loss": log.train_loss})
    for app in POLLUX_APPS:
        out[app] = pollux_app(app).loss_curve()
    return out


def convergence_errors(curve: pd.DataFrame, frac: float) -> tuple[float, float]:
    k, l = curve.step.to_numpy(float), curve.loss.to_numpy(float)
    E = float(np.median(np.diff(k)))
    full = fit_curve(k, l).curve
    k_end = k[-1]
    delta = float(full.loss(k_end - E) - full.loss(k_end))
    n = max(3, int(round(frac * len(k))))
    part = fit_curve(k[:n], l[:n]).curve
    actual = k_end - k[n - 1]
    by_delta = part.remaining_steps(k[n - 1], delta=delta, steps_per_epoch=E)
    target = np.minimum.accumulate(l)[-1] / part.scale
    by_target = part.remaining_steps(k[n - 1], target_loss=target)
    return abs(by_delta - actual) / actual, abs(by_target - actual) / actual


def design_samples(d: pd.DataFrame) -> pd.DataFrame:
    """Six profiling runs a user could afford: 1 GPU small/large batch, a full node, 2 nodes, the biggest run x2."""
    def pick(mask, which):
        sub = d[mask].sort_values(["local_bsz"])
        return sub.iloc[[0, len(sub) // 2, -1][which]] if len(sub) else None
    single = d.num_replicas == 1
    node = (d.num_nodes == 1) & (d.num_replicas == d[d.num_nodes == 1].num_replicas.max())
    two = (d.num_nodes == 2) & (d.num_replicas == d[d.num_nodes == 2].num_replicas.max())
    big = d.num_replicas == d.num_replicas.max()
    rows = [pick(single, 0), pick(single, 2), pick(node, 1), pick(two, 1), pick(big, 0), pick(big, 2)]
    return pd.DataFrame([r for r in rows if r is not None]).drop_duplicates()


def main() -> None:
    print("== convergence: median |error| of remaining steps over 7 curves (target <= 10 % after 25 %)")
    rows = []
    for name, c in curves().items():
        if len(c) < 6:
            print(f"  {name}: {len(c)} epochs only, skipped")
            continue
        for f in FRACTIONS:
            ed, et = convergence_errors(c, f)
            rows.append((name, f, ed, et))
    df = pd.DataFrame(rows, columns=["curve", "observed", "err_delta_rule", "err_target_loss"])
    print(df.pivot(index="curve", columns="observed", values="err_delta_rule").map(lambda x: f"{100 * x:7.1f} %")
          .to_string(header=[f"δ-rule @{int(100 * f)}%" for f in FRACTIONS]))
    for f in FRACTIONS:
        s = df[df.observed == f]
        print(f"  after {int(100 * f):2d} %: median error δ-rule {100 * s.err_delta_rule.median():6.1f} %   "
              f"target-loss {100 * s.err_target_loss.median():6.1f} %" + ("   (target <= 10 %)" if f == 0.25 else ""))

    print("== speed: all-reduce model fitted on 6 designed samples, median |rel. error| on all other rows (target <= 5 %)")
    errs = []
    for app in POLLUX_APPS:
        d = pollux_app(app).step_samples()
        tr = design_samples(d)
        te = d.drop(index=tr.index)
        p = fit_step_time(tr.num_replicas, tr.num_nodes, tr.local_bsz, tr.step_time, tr.sync_time)
        e = np.median(np.abs(p.step_time(te.num_replicas.to_numpy(), te.num_nodes.to_numpy(), te.local_bsz.to_numpy())
                             / te.step_time.to_numpy() - 1))
        errs.append(e)
        print(f"  {app:12s} {len(tr)} samples -> {100 * e:5.1f} % on {len(te)} rows")
    print(f"  median over apps: {100 * np.median(errs):.1f} %  (target <= 5 %)")
    h = h100_throughput()
    herrs = []
    for (model, ds, prec), g in h.groupby(["model", "dataset", "precision"]):
        g = g.sort_values("batch_size")
        idx = np.unique(np.linspace(0, len(g) - 1, 6).round().astype(int))
        tr, te = g.iloc[idx], g.drop(index=g.index[idx])
        if te.empty:
            continue
        c = fit_compute(tr.batch_size, tr.step_time)
        herrs.append(np.median(np.abs(c(te.batch_size.to_numpy()) / te.step_time.to_numpy() - 1)))
    print(f"  H100 compute model, 6 batch sizes -> others: median over {len(herrs)} model/precision pairs "
          f"{100 * np.median(herrs):.1f} %  (target <= 5 %)")


if __name__ == "__main__":
    main()
