"""Gittins-index time to completion when no job knows its remaining work (``size_prior="gittins"``).

A scheduler without remaining-work information still sees how large the jobs that finished were
(``ClusterView.finished``). The Gittins index of a job that has attained service a (Gittins 1989; Tiresias, NSDI'19
§4.1, uses it when the job-size distribution is known) is the best ratio, over a further quantum D, of the chance to
finish within D to the service expected to be spent until then:

    G(a) = max_D P(S <= a + D | S > a) / E[min(S, a + D) - a | S > a]

Serving the highest index first minimises mean response time on one server whatever the size distribution
(least attained first is the special case of a decreasing hazard rate). 1 / G(a) is a time to completion in the
units of S; for a known size it is the time left, so it stands where the time left stands in the urgency weight.
With heavy-tailed sizes it falls with a as run-time aging does; with many jobs of one size (a Philly slice: 600
one-GPU jobs of ~2 800 s) it rises with a below that size, so like jobs run to completion in turn instead of
sharing the GPUs and all ending late. The distribution is the Kaplan-Meier estimate over the finished jobs' sizes,
with the live jobs' attained service right-censored (a job still running is at least that large).
"""
from __future__ import annotations

from typing import Callable, Mapping, Sequence

import numpy as np

from dlsched.policy.base import JobView

MIN_FINISHED = 10          # finished jobs before the index replaces the caller's estimate


def kaplan_meier(sizes: np.ndarray, censored: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Support points and probability masses of the size distribution from finished ``sizes`` and right-censored
    attained services; the mass the last censored points leave is put at the largest point."""
    times = np.concatenate((sizes, censored))
    event = np.concatenate((np.ones(len(sizes), bool), np.zeros(len(censored), bool)))
    order = np.lexsort((~event, times))          # events before censorings at equal times
    times, event = times[order], event[order]
    at_risk = len(times) - np.arange(len(times))
    surv = np.cumprod(np.where(event, 1.0 - 1.0 / at_risk, 1.0))
    mass = np.where(event, np.concatenate(([1.0], surv[:-1])) - surv, 0.0)
    keep = mass > 0
    points, inverse = np.unique(times[keep], return_inverse=True)
    mass = np.bincount(inverse, weights=mass[keep], minlength=len(points))
    if len(points):
        mass[-1] += surv[-1]
    return points, mass


def gittins_times(ages: np.ndarray, points: np.ndarray, mass: np.ndarray) -> np.ndarray:
    """1 / G(a) for each age, quanta ending at the support points; NaN where no mass lies beyond the age."""
    ages = np.asarray(ages, dtype=float)
    out = np.full(len(ages), np.nan)
    if not len(points) or not len(ages):
        return out
    uniq, back = np.unique(ages, return_inverse=True)      # waiting jobs share age 0: one row for them all
    c0 = np.concatenate(([0.0], np.cumsum(mass)))           # c0[k] = mass of points[:k]
    c1 = np.concatenate(([0.0], np.cumsum(mass * points)))
    total = c0[-1]
    first = np.searchsorted(points, uniq, side="right")      # points[first:] lie beyond the age
    ends = np.arange(1, len(points) + 1)                     # a quantum ends at points[k - 1], k = ends
    done = c0[ends][None, :] - c0[first][:, None]
    spent = ((c1[ends][None, :] - c1[first][:, None]) - uniq[:, None] * done
             + (total - c0[ends])[None, :] * (points[None, :] - uniq[:, None]))
    with np.errstate(divide="ignore", invalid="ignore"):
        g = np.where((ends[None, :] > first[:, None]) & (spent > 0), done / spent, 0.0)
    best = g.max(axis=1)
    t = np.full(len(uniq), np.nan)
    t[best > 0] = 1.0 / best[best > 0]
    return t[back]


def sized_by_run_time(job: JobView) -> bool:
    """Whether ``job``'s run time measures its work, so that the run times of finished jobs are a size distribution:
    its speed is linear in GPUs up to its request and it never runs on more (a duration job: Philly's). An elastic
    job's run time is the policy's choice as much as its size (grown, it ends in less), and ranking such jobs by the
    index measured worse on Pollux workloads 1-4 (docs/policies.md)."""
    speed, req = job.speed, max(job.requested_gpus, 1)
    if speed is None or job.max_gpus != job.requested_gpus:
        return False
    try:
        full = speed.throughput(req, 1, job.batch_size or 1)
        return full > 0 and abs(speed.throughput(1, 1, job.batch_size or 1) * req - full) <= 1e-9 * full
    except Exception:      # a model that cannot answer at one GPU is not a linear one
        return False


class FinishedSizes:
    """The sizes (``age`` of each: its attained service) of the finished jobs whose run time is their work, memoised:
    a finished job's size is fixed and the window (``ClusterView.finished``) changes only when a job ends, but the
    drivers pass it at every decision. Re-testing ``sized_by_run_time`` on up to 1 000 finished jobs each time was
    11 % of a Philly slice's simulation (cProfile, docs/policies.md)."""

    def __init__(self, age: Callable[[JobView], float]):
        self._age = age
        self._key: tuple | None = None
        self._sizes: list[float] = []
        self._per_job: dict[tuple[str, float], float | None] = {}

    def __call__(self, finished: Sequence[JobView]) -> list[float]:
        if not finished:
            return []
        key = (len(finished), finished[0].id, finished[-1].id, finished[-1].run_time)
        if key != self._key:
            known, per_job, sizes = self._per_job, {}, []
            for f in finished:
                k = (f.id, f.run_time)
                a = per_job[k] = known[k] if k in known else (self._age(f) if sized_by_run_time(f) else None)
                if a is not None:
                    sizes.append(a)
            self._per_job = per_job            # only the window's jobs: bounded by it
            self._key, self._sizes = key, sizes
        return self._sizes


def band_start(ages: np.ndarray) -> np.ndarray:
    """The start of each age's band: bands double in length ([1, 2), [2, 4), ... in the ages' units; [0, 1))."""
    ages = np.asarray(ages, dtype=float)
    return np.where(ages >= 1, np.exp2(np.floor(np.log2(np.maximum(ages, 1.0)))), 0.0)


def gittins_estimates(ages: Mapping[str, float], finished: Sequence[float]) -> dict[str, float]:
    """Job id -> 1 / G at the start of its age's band (``band_start``), for the live jobs' ``ages`` given the
    ``finished`` jobs' sizes (same units); empty with fewer than MIN_FINISHED sizes, and without the jobs whose band
    starts past every size seen.

    Banded, as Tiresias discretises attained service into queues: within a band a job's index is fixed, so like jobs
    keep their order (submission, the DP's tie-break) and run in turn instead of overtaking each other at every
    decision; and a job that has run past every like job that finished is still judged by them (its band's start)
    until it leaves the band. Unbanded, on a Philly slice the jobs of the common size that had run longest were
    judged by the long tail alone (no like job had finished above their age) and were pre-empted by younger ones
    round after round."""
    if len(finished) < MIN_FINISHED or not ages:
        return {}
    ids = list(ages)
    live = np.array([ages[i] for i in ids], dtype=float)
    points, mass = kaplan_meier(np.asarray(finished, dtype=float), live)
    times = gittins_times(band_start(live), points, mass)
    return {i: float(t) for i, t in zip(ids, times) if np.isfinite(t)}


def duration_times(jobs: Sequence[JobView], ages: Mapping[str, float], finished: Sequence[float],
                   offset: float) -> dict[str, float]:
    """Job id -> time to completion for the ``jobs`` whose run time is their work (``sized_by_run_time``), from
    their ``ages`` (attained service) and the ``finished`` sizes in the same units: ``gittins_estimates``, else
    (too few sizes, or the band starts past every one) aging at the band's start, its start + ``offset``."""
    sized = {j.id: ages[j.id] for j in jobs if sized_by_run_time(j)}
    times = {i: float(a) + offset for i, a in zip(sized, band_start(list(sized.values())))}
    times.update(gittins_estimates(sized, finished))
    return times
