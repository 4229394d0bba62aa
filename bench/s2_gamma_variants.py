"""S2 counted on η^γ instead of η (``schedule.areas``): does a later LR cut's drop come out better? (issue 14)

Run: PYTHONPATH=src python bench/s2_gamma_variants.py VARIANT      (one variant per run, ~70 s each)

VARIANT (γ applies to cut schedules, ``Schedule.cuts_twice`` for the finished fits and decay ``step`` for a
prefix; gradual decays keep the paper's γ = 1):
* ``paper``: γ = 1 everywhere (the model on main).
* ``shared``: each finished run with two cuts or more picks its γ from ``annealing.GAMMAS`` (where the grid's
  fits differ by > 5 %); the prior's γ is their plain geometric mean (``prior._gamma_prior``).
* ``kernel``: the same γ, but kernel-weighted by metadata and pooled by metric kind like α.
* ``fixed:G``: one γ = G for every cut schedule, not fitted (G = 0.25 is close to counting log-LR decreases).

Prints ``prediction_accuracy.schedule_report`` under that variant; compare per curve and per mode.
"""
from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import prediction_accuracy  # noqa: E402

from dlsched.perf import annealing, prior  # noqa: E402


def kernel_gamma(fits, default, meta):
    kind = prior.metric_kind(meta.get("metric"))
    same = [f for f in fits if kind is not None and prior.metric_kind(f.meta.get("metric")) == kind]
    pool = same if sum(math.isfinite(f.gamma) for f in same) >= prior.KIND_MIN else fits
    seen = [f for f in pool if math.isfinite(f.gamma)]
    if not seen:
        return default.gamma
    return math.exp(float(np.average(np.log([f.gamma for f in seen]), weights=prior._weights(seen, meta))))


def main(variant: str) -> None:
    if variant == "paper":
        annealing.GAMMAS = (1.0,)
    elif variant == "kernel":
        shared = prior.prior_from_fits

        def with_kernel(fits, meta=None, default=annealing.CurvePrior()):
            p = shared(fits, meta, default)
            if (meta or {}).get("decay") != "step":
                return p
            import dataclasses
            return dataclasses.replace(p, gamma=kernel_gamma(fits, default, meta or {}))
        prior.prior_from_fits = with_kernel
        prediction_accuracy.prior_from_fits = with_kernel
    elif variant.startswith("fixed:"):
        g = float(variant.split(":")[1])
        annealing.GAMMAS = (g,)
        prior._gamma_prior = lambda fits, default: g
    elif variant != "shared":
        raise SystemExit(f"variant: expected paper | shared | kernel | fixed:G, got {variant!r}")
    prediction_accuracy.schedule_report()


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "shared")
