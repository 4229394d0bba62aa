"""The rest of a logged LR. A run still training has logged its LR only so far (a Hugging Face ``trainer_state.json``,
a CSV, TensorBoard): past the log's end, the SPEC family its logged decay follows (cosine, linear, poly, WSD, each
after a warm-up), where one follows it to print precision; else its last value, held."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.optimize import minimize

from dlsched.perf.schedule import Schedule, parse_schedule

# RMS misfit over the logged decay, a share of the peak, below which a family is taken to be the run's schedule: a
# logged LR is exact up to its printing (6 significant digits: 1e-5), while the nearest wrong family of a cosine,
# linear or poly decay is off by >= 1 % of the peak once 10 % of the decay is logged (tests/perf/test_lr_continuation)
TOLERANCE = 0.002
FAMILIES = ("cosine", "linear", "poly", "wsd")   # fewest free parameters first


@dataclass(frozen=True)
class Continuation:
    spec: str        # the SPEC the logged decay follows, over the run's budget
    scale: float     # its peak in the log's LR units
    misfit: float    # RMS misfit over the logged decay, a share of the peak


def lr_logged_until(xs, budget: float) -> float | None:
    """The last x of a logged LR that ends more than one logging interval before the budget (a run still
    training), else None."""
    xs = np.unique(np.asarray(xs, float))
    interval = float(np.median(np.diff(xs))) if len(xs) > 1 else 0.0
    return float(xs[-1]) if len(xs) and budget - xs[-1] > interval else None


def continuation(xs, lrs, budget: float) -> Continuation | None:
    """The family the logged LR's decay follows, or None: no decay logged yet (a warm-up, a stable phase: nothing
    tells what comes), or none of the families within ``TOLERANCE`` (a step cut, an inverse square root)."""
    order = np.argsort(np.asarray(xs, float), kind="stable")
    xs, lrs = np.asarray(xs, float)[order], np.asarray(lrs, float)[order]
    # where each LR was set: a scheduler stepped per epoch and logged per step holds each value for an epoch, and
    # the family passes through the first row of each (a staircase's RMS misfit is ~1/3 of an epoch's drop)
    changed = np.r_[True, np.diff(lrs) != 0]
    xs, lrs = xs[changed], lrs[changed]
    peak = int(np.argmax(lrs))
    if lrs[peak] <= 0:
        return None
    after = slice(peak, None)                      # the warm-up's own shape does not matter past the log
    x, y = xs[after], lrs[after] / lrs[peak]
    if len(x) < 3 or np.sqrt(np.mean((y - 1) ** 2)) <= TOLERANCE:
        return None                                # flat since the peak: holding it is what the log says
    w_lo = xs[peak - 1] if peak > 0 else 0.0       # the decay starts between the last rising point and the peak
    for family in FAMILIES:   # the first that follows it: a linear decay is also a poly of power 1 and a WSD
        spec, scale, misfit = _fit(family, x, y, budget, (w_lo, xs[peak]), x[-1])
        if misfit <= TOLERANCE:
            return Continuation(spec, scale * lrs[peak], misfit)
    return None


def logged_lr_schedule(xs, lrs, budget: float) -> tuple[Schedule, Continuation | None]:
    """The logged LR as a schedule (``Schedule.from_points``), continued past its last x by the family it follows."""
    xs, lrs = np.asarray(xs, float), np.asarray(lrs, float)
    found = continuation(xs, lrs, budget) if lr_logged_until(xs, budget) is not None else None
    if found is not None:
        rest = parse_schedule(found.spec, budget)
        beyond = np.asarray(rest.xs) > xs.max()
        xs = np.concatenate([xs, np.asarray(rest.xs)[beyond]])
        lrs = np.concatenate([lrs, found.scale * np.asarray(rest.lrs)[beyond]])
    return Schedule.from_points(xs, lrs, budget), found


def _spec(family: str, warmup: float, extra: float) -> str:
    warm = f"warmup={warmup:.6g}" if warmup > 0 else ""
    part = {"cosine": [], "linear": [], "poly": [f"power={extra:.4g}"], "wsd": [f"warmdown={extra:.6g}"]}[family]
    return ":".join([family, *part, *filter(None, [warm])])


def _fit(family: str, x, y, budget: float, warm: tuple[float, float], last: float):
    """(spec, scale, RMS misfit) of the family's best warm-up (and power, or WSD decay start) on the decay logged."""
    lo_w, hi_w = warm
    extra_range = {"poly": (0.2, 5.0), "wsd": (hi_w, last)}.get(family)   # its second parameter, if it has one

    def shaped(p):
        w = float(np.clip(p[0], lo_w, hi_w))
        extra = float(np.clip(p[1], *extra_range)) if extra_range else 0.0
        if family == "wsd":   # the decay starts at ``extra``: warm-up and stable phase before it
            extra = budget - max(extra, w)
        try:
            spec = _spec(family, w, extra)
            s = parse_schedule(spec, budget).lr(x)
        except ValueError:
            return None, 0.0, np.inf
        scale = float(s @ y / (s @ s)) if s @ s > 0 else 0.0
        return spec, scale, float(np.sqrt(np.mean((scale * s - y) ** 2)))

    grid = np.geomspace if family == "poly" else np.linspace
    extras = [[e] for e in grid(*extra_range, 7)] if extra_range else [[]]
    best = min(([w, *e] for w in np.linspace(lo_w, hi_w, 3) for e in extras), key=lambda p: shaped(p)[2])
    res = minimize(lambda p: shaped(p)[2], best, method="Nelder-Mead",
                   options={"xatol": 1e-3 * max(budget, 1.0), "fatol": 1e-7, "maxiter": 200})
    return shaped(res.x)
