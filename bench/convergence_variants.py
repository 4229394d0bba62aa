"""Which changes to the convergence fit improve the remaining-steps prediction on *every* curve, not only the median?

Run: PYTHONPATH=src python bench/convergence_variants.py

Same curves, same fixed ground truth and same metric as ``bench/prediction_accuracy.py`` (δ from the reference
unweighted full-curve fit; (predicted − actual remaining) / actual remaining). Variants of the *partial* fit:

* reference: the default ``fit_curve`` (unweighted least squares in normalised-loss space);
* Optimus authors' weighting (``recent_weights``: thirds of the history count 1, 16, 256 in squared residuals);
* recency weights w_i = (i/n)^p for p in ``POWERS`` (p = 0 is the reference), with p chosen
  **leave-one-curve-out**: for each curve, the p with the lowest mean (over 10/25/50 %) median error on the
  *other* curves, applied to the held-out curve. That is the figure to quote for a tuned knob.

Each line also gives a check that does not depend on any δ: how far the partial fit's forecast of the loss
at the end of the trace (mean over the last 5 epochs) is from the measured one.

Last section: other models, each judged with δ from its own full fit and by its final-loss forecast. The
learning-rate schedule as the x-axis: every Pollux job's length is set by its LR schedule
(petuum/adaptdl ``benchmark/models/<app>`` scripts, see ``LR_SCHEDULES``), so its flattening comes from the
schedule, not from a 1/k approach; only the seed log is constant-LR (convNet.pytorch regime printed in
``gpu-training/RunningModel_cell7_resnet50-p100-v2_stdout.txt``: lr 0.1 until epoch 81; the log stops at 70).
Fitting l against the cumulative LR (steps at the initial LR's pace) is the obvious schedule-aware variant of
the same model: the section prints its final-loss forecast and its δ-rule error, with δ from *its own* full
fit (the only coherent δ for another model). And the Optimus curve with a free exponent,
(b0·k + b1)^(−α) + b2 (``fit_power_law``; α = 1 is Optimus), to see whether the 1/k shape limits extrapolation.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy.optimize import least_squares

from dlsched.perf.convergence import fit_curve, recent_weights
from prediction_accuracy import FRACTIONS, convergence_errors, curves, reference_fit

POWERS = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0)
TAIL = 5  # epochs averaged for the measured final loss


def _lr_yolov3(j):
    # 2 warm-up epochs (linear ramp, mean 1/4 and 3/4), then CosineAnnealingLR(T_max=48, eta_min=LR_END/LR_INIT=0.01).
    cos = 0.01 + 0.99 * (1 + np.cos(np.pi * np.clip(j - 2, 0, 48) / 48)) / 2
    return np.where(j < 2, (j + 0.5) / 2, cos)


# LR relative to the initial one during epoch j (0-based), per petuum/adaptdl benchmark/models/<app> as stored in
# the code index (commits 81a4f2e / 60d25f2 / de25dcc of the artifact's repository; the trace commit may differ).
LR_SCHEDULES = {
    "seed-resnet50": lambda j: np.ones_like(j),           # lr 0.1 constant until epoch 81
    "cifar10": lambda j: 0.0133 ** (j / 100),              # ExponentialLR(0.0133 ** (1 / epochs)), 100 epochs
    "deepspeech2": lambda j: 1.1 ** -j,                    # lr /= learning_anneal (1.1) after every epoch
    "imagenet": lambda j: 0.1 ** (j // 30),                # lr = 0.1 * 0.1 ** (epoch // 30)
    "ncf": lambda j: 0.2 ** np.searchsorted([4, 7, 10], j, side="right"),  # MultiStepLR([4, 7, 10], 0.2)
    "yolov3": _lr_yolov3,
}


def recency_fit(power: float):
    def fit(steps, losses):
        n = len(steps)
        return fit_curve(steps, losses, weights=(np.arange(1, n + 1) / n) ** power).curve
    return fit


def authors_fit(steps, losses):
    return fit_curve(steps, losses, weights=recent_weights(len(steps))).curve


def _curves() -> dict[str, pd.DataFrame]:
    return {name: c for name, c in curves().items() if len(c) >= 6}


def _n_seen(frac: float, n: int) -> int:
    return max(3, int(round(frac * n)))


def signed_errors(fit) -> pd.DataFrame:
    """Signed relative error of the δ-rule remaining steps, rows = curves, columns = observed fraction."""
    return pd.DataFrame({name: [convergence_errors(c, f, fit)[0] for f in FRACTIONS]
                         for name, c in _curves().items()}, index=FRACTIONS).T


def final_loss_errors(fit, axis=None) -> pd.DataFrame:
    """Signed relative error of the partial fit's forecast of the mean loss over the last ``TAIL`` epochs."""
    out = {}
    for name, c in _curves().items():
        k, l = c.step.to_numpy(float), c.loss.to_numpy(float)
        x = k if axis is None else axis(name, k)
        out[name] = [float(np.mean(fit(x[:n], l[:n]).raw_loss(x[-TAIL:]))) / l[-TAIL:].mean() - 1
                     for n in (_n_seen(f, len(k)) for f in FRACTIONS)]
    return pd.DataFrame(out, index=FRACTIONS).T


def _medians(err: pd.DataFrame) -> str:
    return " ".join(f"{100 * v:5.1f}" for v in err.abs().median())


def line(label: str, err: pd.DataFrame, final: pd.DataFrame, ref: pd.DataFrame | None = None) -> str:
    at25 = " ".join(f"{name[:7]:>7s} {100 * v:+6.1f}" for name, v in err[0.25].items())
    better = "" if ref is None else f"  better @25 on {(err[0.25].abs() < ref[0.25].abs() - 1e-12).sum()}/{len(err)}"
    return f"  {label:22s} {at25} | median @10/25/50 {_medians(err)} % | final loss {_medians(final)} %{better}"


def schedule_axis(name: str, k: np.ndarray, extra_epochs: int = 0) -> np.ndarray:
    """Cumulative LR at the end of each epoch, in steps at the initial LR's pace (``extra_epochs`` beyond the trace)."""
    E = float(np.median(np.diff(k)))
    j = np.arange(len(k) + extra_epochs, dtype=float)
    return E * np.cumsum(LR_SCHEDULES[name](j))


@dataclass(frozen=True)
class PowerLawCurve:
    """l(k) = scale·((b0·k/k_ref + b1)^(−α) + b2): the Optimus curve with a free exponent (α = 1 is Optimus)."""

    b0: float
    b1: float
    b2: float
    alpha: float
    k_ref: float
    scale: float

    def raw_loss(self, k):
        return self.scale * ((self.b0 * np.asarray(k, float) / self.k_ref + self.b1) ** -self.alpha + self.b2)


def fit_power_law(steps, losses) -> PowerLawCurve:
    """Bounded least squares on the Optimus-preprocessed normalised losses, started from the Optimus fit at a
    few exponents (deterministic); evaluation only, to see whether the 1/k shape is what limits extrapolation."""
    base = fit_curve(steps, losses)
    c, y, k_ref = base.curve, base.losses, float(base.steps[-1])
    x = base.steps / k_ref

    def resid(p):
        return (p[0] * x + p[1]) ** -p[3] + p[2] - y

    best = None
    for a in (0.5, 1.0, 2.0):
        p0 = [max(c.beta0 * k_ref, 1e-6) ** a, max(c.beta1, 1e-3) ** a, min(c.beta2, 0.9 * y.min()), a]
        r = least_squares(resid, p0, bounds=([0, 1e-9, 0, 0.05], [np.inf, np.inf, y.min(), 5.0]))
        if best is None or r.cost < best.cost:
            best = r
    return PowerLawCurve(*best.x, k_ref, c.scale)


def own_delta_errors(fit, axis=None) -> pd.DataFrame:
    """Signed error in remaining epochs of the epoch-by-epoch Optimus rule (stop after the first epoch whose gain
    would be ≤ δ), with δ from the *same* model's full fit so that it stops at the last epoch — the coherent
    comparison between models; the axis continues after the trace (the LR schedule as written)."""
    out = {}
    for name, c in _curves().items():
        k, l = c.step.to_numpy(float), c.loss.to_numpy(float)
        n = len(k)
        if axis is None:
            x = np.concatenate([k, k[-1] + np.median(np.diff(k)) * np.arange(1, 2 * n + 1)])
        else:
            x = axis(name, k, extra_epochs=2 * n)

        def stop(curve, delta_raw, start):
            gain = -np.diff(curve.raw_loss(x))
            hit = np.flatnonzero(gain[start:] <= delta_raw * (1 + 1e-9))
            return start + (hit[0] if len(hit) else len(gain))

        full = fit(x[:n], l)
        delta_raw = float(full.raw_loss(x[n - 1]) - full.raw_loss(x[n]))
        out[name] = [(stop(fit(x[:m], l[:m]), delta_raw, m - 1) - (n - 1)) / (n - m)
                     for m in (_n_seen(f, n) for f in FRACTIONS)]
    return pd.DataFrame(out, index=FRACTIONS).T


def main() -> None:
    print("== convergence fit variants: signed δ-rule error of remaining steps @25 % (negative = stops too early),")
    print("   median |error| @10/25/50 %, and median |error| of the final-loss forecast @10/25/50 %")
    ref = signed_errors(reference_fit)
    print(line("reference (unweighted)", ref, final_loss_errors(reference_fit)))
    print(line("authors' 1/16/256", signed_errors(authors_fit), final_loss_errors(authors_fit), ref))
    by_power = {0.0: ref}
    for p in POWERS[1:]:
        by_power[p] = signed_errors(recency_fit(p))
        print(line(f"recency (i/n)^{p:g}", by_power[p], final_loss_errors(recency_fit(p)), ref))

    rows = {}
    for held in ref.index:
        score = {p: e.drop(index=held).abs().median().mean() for p, e in by_power.items()}
        best = min(score, key=score.get)
        rows[held] = [best, *by_power[best].loc[held].abs()]
    loco = pd.DataFrame(rows, index=["p", *FRACTIONS]).T
    print("  leave-one-curve-out choice of p (chosen on the other curves, applied to the held-out one):")
    for name, r in loco.iterrows():
        print(f"    {name:14s} p={r['p']:<4g} |error| @10/25/50: " + " ".join(f"{100 * r[f]:5.1f} %" for f in FRACTIONS)
              + "   (reference: " + " ".join(f"{100 * abs(ref.loc[name, f]):5.1f} %" for f in FRACTIONS) + ")")
    med = loco[list(FRACTIONS)].median()
    print("  leave-one-curve-out median |error| @10/25/50: " + " ".join(f"{100 * v:5.1f} %" for v in med)
          + f"   vs reference {' '.join(f'{100 * v:5.1f} %' for v in ref.abs().median())}   (target <= 10 % @25)")

    print("== other models, each with δ from its own full fit (not comparable with the lines above): signed error")
    print("   @10/25/50 % of the epoch-by-epoch δ-rule in remaining epochs, and of the final-loss forecast")
    models = {"Optimus, x = steps": (reference_fit, None), "Optimus, x = cumul. LR": (reference_fit, schedule_axis),
              "free exponent, x = steps": (fit_power_law, None)}
    res = {label: (own_delta_errors(fit, axis), final_loss_errors(fit, axis)) for label, (fit, axis) in models.items()}
    for name in ref.index:
        print(f"  {name}")
        for label, (d, fl) in res.items():
            print(f"    {label:26s} δ-rule " + " ".join(f"{100 * v:+6.1f}" for v in d.loc[name])
                  + "   final loss " + " ".join(f"{100 * v:+6.1f}" for v in fl.loc[name]) + " %")
    for label, (d, fl) in res.items():
        print(f"  median |error| {label:26s} δ-rule {_medians(d)} %   final loss {_medians(fl)} %")
    print("  Cumulative-LR axis: a worse curve model (final-loss forecast), whose δ-rule hits because the per-epoch")
    print("  gain shrinks with the LR: the schedule sets the stop (exactly 0 for imagenet and ncf, whose schedules")
    print("  decay again right at the trace's end) - what the owner already knows as an epoch budget.")
    print("  Free exponent: fixes the constant-LR seed log (α ≈ 0.6, stable from 10 %), erratic on the scheduled curves.")

if __name__ == "__main__":
    main()
