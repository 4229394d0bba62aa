"""The rest of a logged LR. A run still training has logged its LR only so far (a Hugging Face ``trainer_state.json``,
a CSV, TensorBoard): past the log's end, its recipe's (the LR finished runs of it ran, where the log so far follows
it), else the SPEC family its logged decay follows (``FAMILIES``, each after a warm-up; SGDR where it restarted),
where one follows it to print precision; else its last value, held."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from scipy.optimize import minimize

from dlsched.perf.schedule import GRID, SHARED, Schedule, logging_slack, outside, parse_schedule, stretched

# RMS misfit over the logged decay, a share of the peak, below which a family is taken to be the run's schedule: a
# logged LR is exact up to its printing (6 significant digits: 1e-5), while the nearest wrong family of a cosine,
# linear or poly decay is off by >= 1 % of the peak once 10 % of the decay is logged (tests/perf/test_lr_continuation)
TOLERANCE = 0.002
# a simpler family whose LR ahead is within this share of the peak of the closest family's is taken: a log a step off
# its scheduler's fits a richer family a little closer (linear as poly:power=0.998, cosine with a floor of 0.003)
AHEAD = 0.01
ROWS = 512   # the decay rows a family is fitted to, at most
# the families a logged decay is matched against, fewest free parameters first (a linear decay is also a poly of
# power 1 and a WSD; a cosine is a cosine to a min of 0): each is a warm-up W and at most one more parameter
FAMILIES = ("cosine", "linear", "invsqrt", "poly", "wsd", "exp", "cosine-min", "linear-min")


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
    tells what comes), too little of one, or none of the families within ``TOLERANCE`` (a step cut)."""
    order = np.argsort(np.asarray(xs, float), kind="stable")
    xs, lrs = np.asarray(xs, float)[order], np.asarray(lrs, float)[order]
    interval = float(np.median(np.diff(xs))) if len(xs) > 1 else 0.0
    # where each LR was set: a scheduler stepped per epoch and logged per step holds each value for an epoch, and
    # the family passes through the first row of each (a staircase's RMS misfit is ~1/3 of an epoch's drop)
    changed = np.r_[True, np.diff(lrs) != 0]
    xs, lrs = xs[changed], lrs[changed]
    if not lrs.max() > 0:
        return None
    # restarts (SGDR, a cosine with hard restarts): rows back near the peak after the LR fell below most of it; a log
    # that restarted is fitted from its first cycle's top (its highest row may be a later cycle's first)
    near = lrs >= 0.9 * lrs.max()
    restart = np.flatnonzero(near[1:] & (lrs[:-1] < 0.8 * lrs[1:]) & np.logical_or.accumulate(near)[:-1]) + 1
    peak = int(np.argmax(near)) if len(restart) else int(np.argmax(lrs))
    x, y = xs[peak + 1:], lrs[peak + 1:] / lrs[peak]   # the warm-up's own shape does not matter past the log
    if len(x) < 3:
        return None          # flat since the peak (its rows fold into one), or too little decay to tell a family
    if len(x) > ROWS:        # evenly by row, the last kept: a per-step log of 100k steps took 19 s, now 0.3
        keep = np.unique(np.linspace(0, len(x) - 1, ROWS).round().astype(int))
        x, y = x[keep], y[keep]
    # the decay starts between the last rising row and one logging interval past the peak: a log whose x is a step
    # ahead of its scheduler's (the LR a step trained with, logged after it) shows its last warm-up row as its peak;
    # which of the two the peak row is, is not known, so the families are fitted to the rows after it
    warm = (xs[peak - 1] if peak > 0 else 0.0, xs[peak] + interval)
    # the family's peak is the logged one, or above it by as much as a ramp rises over the interval after it
    peaks = (1 - TOLERANCE, (warm[1] / xs[peak] if xs[peak] > 0 else 1) + TOLERANCE)
    restarts = [(xs[i - 1], xs[i]) for i in restart]   # each between two rows
    fits = []
    for family in _cycles(restarts, warm) if restarts else FAMILIES:   # only cycles restart
        extra = _extra(family, warm, x, y, budget, restarts)
        if len(x) >= 3 + (extra is not None):   # a row more than its parameters
            spec, scale, misfit = _fit(family, x, y, budget, warm, peaks, extra)
            if misfit <= TOLERANCE:
                fits.append(Continuation(spec, scale * lrs[peak], misfit))
    if not fits:
        return None
    ahead = np.linspace(x[-1], budget, 256)

    def lr_ahead(f: Continuation) -> np.ndarray:
        return f.scale * parse_schedule(f.spec, budget).lr(ahead)

    closest = lr_ahead(min(fits, key=lambda f: f.misfit))
    agree = [f for f in fits if np.max(np.abs(lr_ahead(f) - closest)) <= AHEAD * lrs[peak]]
    # cycles whose growth the log cannot tell yet (a second cycle too short so far) restart at other x: held
    return None if restarts and len(agree) < len(fits) else agree[0]


def logged_lr_schedule(xs, lrs, budget: float, recipe: Schedule | None = None) -> tuple[Schedule, Continuation | None]:
    """The logged LR as a schedule (``Schedule.from_points``), continued past its last x as ``recipe`` goes on
    (``recipe_continuation``: its ``spec`` says where it comes from), else by the family its decay follows."""
    xs, lrs = np.asarray(xs, float), np.asarray(lrs, float)
    if lr_logged_until(xs, budget) is None:
        return Schedule.from_points(xs, lrs, budget), None
    by_recipe = None if recipe is None else recipe_continuation(xs, lrs, budget, recipe)
    found = by_recipe or continuation(xs, lrs, budget)
    if found is not None:
        rest = stretched(recipe, budget, recipe.spec) if by_recipe else parse_schedule(found.spec, budget)
        # past the log on a grid as fine as the areas': a stepwise recipe's cut stays a cut
        ahead = np.union1d(np.linspace(0.0, budget, GRID), rest.xs)
        ahead = ahead[ahead > xs.max()]
        xs, lrs = np.concatenate([xs, ahead]), np.concatenate([lrs, found.scale * rest.lr(ahead)])
    return Schedule.from_points(xs, lrs, budget), found


def recipe_continuation(xs, lrs, budget: float, recipe: Schedule) -> Continuation | None:
    """``recipe`` (the LR finished runs of the run's recipe ran: ``schedule.shared_shape``) stretched to the budget,
    where the logged LR so far follows it within ``SHARED`` of its peak (RMS, scaled to the log), else None. The runs
    of a recipe know what a log cannot show: a step schedule's cuts to come, a WSD's decay."""
    xs, lrs = np.asarray(xs, float), np.asarray(lrs, float)
    shape = stretched(recipe, budget, recipe.spec)
    # rows before the recipe's first knot are not compared: a logged LR's first row is where its log starts, not its
    # LR from 0 (a warm-up's first row at step 10 of 600 is a third of its peak, another run's at 12.5 of 600 half)
    xs, lrs = xs[xs >= shape.xs[0]], lrs[xs >= shape.xs[0]]
    ref = shape.lr(xs)
    if not len(xs) or not np.any(ref > 0):
        return None
    scale = float(np.median(lrs[ref > 0] / ref[ref > 0]))   # robust to a row logged across a cut
    peak = scale * max(shape.lrs)
    if not peak > 0:
        return None
    # a row follows the recipe where its LR is one the recipe ran within a logging interval of it (``outside``)
    interval = logging_slack(Schedule.from_points(xs, lrs, budget), shape, budget)
    gap = scale * outside(lrs / scale, xs, shape, interval)
    misfit = float(np.sqrt(np.mean(gap ** 2))) / peak
    return Continuation(recipe.spec, scale, misfit) if misfit <= SHARED else None


def _cycles(restarts: list[tuple[float, float]], warm: tuple[float, float]) -> list[str]:
    """The SGDR families of a log that restarted, ``sgdr-M``: M its cycles' growth (torch's integer ``T_mult``) from
    its first two cycles where two restarts show, else each M the second cycle's decay so far may tell (1 to 3)."""
    if len(restarts) < 2:
        return ["sgdr-1", "sgdr-2", "sgdr-3"]
    first, second = np.mean(restarts[0]) - np.mean(warm), np.mean(restarts[1]) - np.mean(restarts[0])
    return [f"sgdr-{max(1, round(second / first))}"]


def _spec(family: str, warmup: float, extra: float) -> str:
    name, _, variant = family.partition("-")
    if name == "sgdr":
        part = f"t0={extra:.6g}" + (f":mult={variant}" if variant != "1" else "")
    else:
        part = {"poly": f"power={extra:.4g}", "invsqrt": f"timescale={extra:.6g}", "wsd": f"warmdown={extra:.6g}",
                "exp": f"gamma={extra:.8g}", "min": f"min={extra:.4g}"}.get(variant or name)
    return ":".join([name, *filter(None, [part]), *([f"warmup={warmup:.6g}"] if warmup > 0 else [])])


@dataclass(frozen=True)
class _Extra:
    """A family's parameter beside its warm-up: searched over [lo, hi] (on a log scale where ``log``)."""
    lo: float
    hi: float
    log: bool

    def at(self, u: float) -> float:
        u = float(np.clip(u, 0.0, 1.0))
        return self.lo * (self.hi / self.lo) ** u if self.log else self.lo + u * (self.hi - self.lo)


def _extra(family: str, warm: tuple[float, float], x, y, budget: float,
           restarts: list[tuple[float, float]] = ()) -> tuple[_Extra, Callable] | None:
    """The family's parameter beside its warm-up and how it becomes the SPEC's value (of it and the warm-up), for a
    decay logged at ``x`` (``y``, a share of its peak) that restarted between each pair of ``restarts``."""
    if family.startswith("sgdr"):   # its first cycle: from the warm-up's end to the first restart
        return _Extra(max(restarts[0][0] - warm[1], 1e-9), restarts[0][1] - warm[0], False), lambda v, w: v
    warm_end, last = warm[1], float(x[-1])
    slope = np.polyfit(x, np.log(np.maximum(y, 1e-12)), 1)[0] if family == "exp" else -1.0
    halflife = np.log(2) / -slope if slope < 0 else 100 * budget
    return {"poly": (_Extra(0.2, 5.0, True), lambda v, w: v),                           # its power
            # its timescale (free: the log's x may be a step off the scheduler's, which shifts the decay)
            "invsqrt": (_Extra(max(warm_end, budget / 100) / 10, 10 * budget, True), lambda v, w: v),
            "wsd": (_Extra(warm_end, max(last, warm_end), False), lambda v, w: budget - max(v, w)),   # decay start
            # its half-life, within 3x of the log-LR's own slope's (the SPEC's gamma is per unit of x)
            "exp": (_Extra(halflife / 3, 3 * halflife, True), lambda v, w: 0.5 ** (1 / v)),
            "cosine-min": (_Extra(0.0, 0.9, False), lambda v, w: v),                  # its floor, a share of the peak
            "linear-min": (_Extra(0.0, 0.9, False), lambda v, w: v)}.get(family)


def _fit(family: str, x, y, budget: float, warm: tuple[float, float], peaks: tuple[float, float],
         extra: tuple[_Extra, Callable] | None):
    """(spec, scale, RMS misfit) of the family's best warm-up (and its other parameter, ``_extra``) on the decay
    logged, its peak (``scale``) within ``peaks``. Both are searched on [0, 1]: a grid, then Nelder-Mead from its
    best."""

    def shaped(u):
        w = warm[0] + float(np.clip(u[0], 0.0, 1.0)) * (warm[1] - warm[0])
        try:
            spec = _spec(family, w, extra[1](extra[0].at(u[1]), w) if extra else 0.0)
            s = parse_schedule(spec, budget).lr(x)
        except ValueError:
            return None, 0.0, np.inf
        scale = float(np.clip(s @ y / (s @ s), *peaks)) if s @ s > 0 else 0.0
        return spec, scale, float(np.sqrt(np.mean((scale * s - y) ** 2)))

    grid = np.linspace(0.0, 1.0, 9)
    best = min(([w, *e] for w in grid for e in ([[v] for v in grid] if extra else [[]])), key=lambda u: shaped(u)[2])
    res = minimize(lambda u: shaped(u)[2], best, method="Nelder-Mead", bounds=[(0.0, 1.0)] * len(best),
                   options={"xatol": 1e-5, "fatol": 1e-8, "maxiter": 400})
    return shaped(res.x)
