"""When GPUs free anyway: the horizon over which taking GPUs from a running job pays (``release_horizon``).

Taking k GPUs from a running job helps the taker only until k GPUs free without it, W_k: the time by which the
other running jobs predicted to end first hold k GPUs between them. Over W_k the victim pays its restart pause R
twice, at the smaller size now and at its current size when regrown or resumed (docs/policies.md, "Restart pauses
weighed against predicted time").
"""
from __future__ import annotations

from typing import Callable

import numpy as np

from dlsched.policy.base import JobView


def release_horizons(jobs: list[JobView], time_left: Callable[[JobView, int], float | None]) -> dict[str, np.ndarray]:
    """Per running job, W_k for each smaller count g = 0..gc-1 (k = gc - g GPUs taken), inf where never. Empty
    when fewer than two running jobs know their remaining work. One vectorised pass over all jobs."""
    held = {j.id: j.num_gpus for j in jobs}          # a property summing the node map: read it once
    run = [j for j in jobs if held[j.id]]
    lefts = sorted((t, j.id, held[j.id]) for j in run if (t := time_left(j, held[j.id])) is not None)
    if len(lefts) < 2:
        return {}
    ends = np.array([t for t, _, _ in lefts])
    freed = np.cumsum([g for _, _, g in lefts])
    place = {i: (p, g) for p, (_, i, g) in enumerate(lefts)}
    gcs = np.array([held[j.id] for j in run])
    at, own = np.array([place.get(j.id, (len(ends), 0)) for j in run]).T
    who = np.repeat(np.arange(len(run)), gcs)
    k = gcs[who] - (np.arange(len(who)) - np.repeat(np.cumsum(gcs) - gcs, gcs))
    first = np.searchsorted(freed, k)                       # among all, the first end that frees k
    past = np.searchsorted(freed, k + own[who])             # past the job itself, less its own GPUs
    idx = np.where(first < at[who], first, past)
    w = np.where(idx < len(ends), ends[np.minimum(idx, len(ends) - 1)], np.inf)
    starts = (np.cumsum(gcs) - gcs).tolist()
    return {j.id: w[o:o + g] for j, o, g in zip(run, starts, gcs.tolist())}


def charge_release(u: np.ndarray, gc: int, now_u: float, restart: float, release: np.ndarray) -> None:
    """Charge a running job's value curve ``u`` (held at ``gc``) in place for the pauses a shrink or preemption
    costs it over W_k, shifted by the preemption's cost so that waiting stays at 0 (the DP's convention; a
    constant per job)."""
    c0 = restart / max(float(release[0]), restart)
    if gc > 1:
        cost = restart / np.maximum(release[1:], restart)
        u[1:gc] -= (np.maximum(u[1:gc], 0.0) + now_u) * cost
    u[1:] += now_u * c0
