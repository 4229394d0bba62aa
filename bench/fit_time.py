"""Time of one convergence refit on 1 000 points (target ≤ 5 ms, issue 2).

Run: PYTHONPATH=src python bench/fit_time.py

Points: the seed log's curve shape (β from a fit of ``gpu-training/resnet50-p100-v2_per_epoch_from_log.csv``)
sampled at 1 000 steps with 1 % multiplicative noise (seeded), in raw loss units; the fit includes the
Optimus preprocessing. Median of 50 refits; also the online path (add one point, refit).
"""
from __future__ import annotations

import time

import numpy as np

from dlsched.perf.convergence import OnlineConvergence, fit_curve
from dlsched.perf.profile import seed_log

TARGET_MS = 5.0


def main() -> None:
    log = seed_log()
    ref = fit_curve(log.steps_cum_assumed, log.train_loss).curve
    k = np.linspace(0, float(log.steps_cum_assumed.iloc[-1]), 1000)
    rng = np.random.default_rng(0)
    loss = ref.raw_loss(k) * (1 + 0.01 * rng.standard_normal(k.size))
    fit_curve(k, loss)  # warm-up
    times = []
    for _ in range(50):
        t = time.perf_counter()
        fit = fit_curve(k, loss)
        times.append(time.perf_counter() - t)
    ms = 1000 * float(np.median(times))
    print(f"fit_curve on {k.size} points: median {ms:.2f} ms (min {1000 * min(times):.2f} ms)  target <= {TARGET_MS} ms  "
          f"-> {'OK' if ms <= TARGET_MS else 'MISSED'}   (RMSE {fit.rmse:.4f})")
    online = OnlineConvergence()
    for kk, ll in zip(k[:-1], loss[:-1]):
        online.add(kk, ll)
    t = time.perf_counter()
    online.add(k[-1] + 1, loss[-1])
    online.refit()
    print(f"online add + refit at 1 000 points: {1000 * (time.perf_counter() - t):.2f} ms")


if __name__ == "__main__":
    main()
