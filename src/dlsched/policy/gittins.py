"""Gittins-index urgency when no job knows its remaining work (``goodput``'s ``size_prior="gittins"``).

A scheduler without remaining-work information still sees how large the jobs that already finished were. The
Gittins index of a job that has attained service a (Gittins 1989; Tiresias, NSDI'19 §4.1, uses it when the job-size
distribution is known) is the best ratio, over a further quantum D, of the chance to finish within D to the service
expected to be spent until then:

    G(a) = max_D P(S <= a + D | S > a) / E[min(S, a + D) - a | S > a]

1 / G(a) is an expected time to completion in the units of S: it stands in for the remaining time T of the urgency
weight. With a heavy tail and one mode it falls with a (least attained first, as the run-time aging does); with
the several modes of real clusters (many short jobs, some long ones of recurring sizes) it also rises again as a
job nears a size many jobs had. The distribution is the Kaplan-Meier estimate over the finished jobs' sizes and
the running ones' attained service (right-censored: a job still running is at least that large).

The history is the one state the policy keeps between decisions: a job seen at one decision and absent at the
next has finished (or left) at its last attained service. Pure in (history, jobs, cluster).
"""
from __future__ import annotations

import numpy as np

MIN_FINISHED = 10          # finished jobs before the index replaces the aging estimate
MAX_HISTORY = 2000         # finished sizes kept (the most recent)


class SizeHistory:
    """Sizes of departed jobs, learned from the sequence of decisions (``observe``)."""

    def __init__(self) -> None:
        self._last: dict[str, float] = {}
        self.sizes: list[float] = []

    def observe(self, ages: dict[str, float]) -> None:
        """``ages``: job id -> attained service of the jobs present now; any job present before and absent now
        has left at its last attained service."""
        for job_id, age in self._last.items():
            if job_id not in ages and age > 0:
                self.sizes.append(age)
        if len(self.sizes) > MAX_HISTORY:
            del self.sizes[: len(self.sizes) - MAX_HISTORY]
        self._last = dict(ages)


def kaplan_meier(sizes: np.ndarray, censored: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Support points and probability masses of the size distribution from finished ``sizes`` and right-censored
    attained services; the mass the last censored points leave is put at the largest point."""
    times = np.concatenate((sizes, censored))
    event = np.concatenate((np.ones(len(sizes), bool), np.zeros(len(censored), bool)))
    order = np.lexsort((~event, times))          # events before censorings at equal times
    times, event = times[order], event[order]
    at_risk = len(times) - np.arange(len(times))
    factor = np.where(event, 1.0 - 1.0 / at_risk, 1.0)
    surv = np.cumprod(factor)
    before = np.concatenate(([1.0], surv[:-1]))
    mass = np.where(event, before - surv, 0.0)
    keep = mass > 0
    points, inverse = np.unique(times[keep], return_inverse=True)
    mass = np.bincount(inverse, weights=mass[keep], minlength=len(points))
    if len(points):
        mass[-1] += surv[-1]
    return points, mass


def gittins_times(ages: np.ndarray, points: np.ndarray, mass: np.ndarray) -> np.ndarray:
    """1 / G(a) for each age (NaN where no mass lies beyond it), with quanta ending at the support points."""
    ages = np.asarray(ages, dtype=float)
    out = np.full(len(ages), np.nan)
    if not len(points):
        return out
    c0 = np.concatenate(([0.0], np.cumsum(mass)))             # c0[k] = mass of points[:k]
    c1 = np.concatenate(([0.0], np.cumsum(mass * points)))
    total = c0[-1]
    first = np.searchsorted(points, ages, side="right")       # points[first:] lie beyond the age
    ends = np.arange(1, len(points) + 1)                       # a quantum ends at points[k - 1], k = ends
    beyond = ends[None, :] > first[:, None]                    # quanta that end past each age
    done = c0[ends][None, :] - c0[first][:, None]
    spent = ((c1[ends][None, :] - c1[first][:, None]) - ages[:, None] * done
             + (total - c0[ends])[None, :] * (points[None, :] - ages[:, None]))
    with np.errstate(divide="ignore", invalid="ignore"):
        g = np.where(beyond & (spent > 0), done / spent, 0.0)
    best = g.max(axis=1)
    ok = best > 0
    out[ok] = 1.0 / best[ok]
    return out


def mean_residual(ages: np.ndarray, points: np.ndarray, mass: np.ndarray) -> np.ndarray:
    """E[S - a | S > a] for each age a (NaN where no mass lies beyond it): a job's expected service left given
    only what it has attained and the sizes of the jobs before it."""
    ages = np.asarray(ages, dtype=float)
    c0 = np.concatenate((np.cumsum(mass[::-1])[::-1], [0.0]))            # mass of points[k:]
    c1 = np.concatenate((np.cumsum((mass * points)[::-1])[::-1], [0.0]))
    first = np.searchsorted(points, ages, side="right")
    tail = c0[first]
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(tail > 0, c1[first] / tail - ages, np.nan)
