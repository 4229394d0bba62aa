"""Gavel-style type preference for the elastic DP on a heterogeneous cluster: which jobs are offered to a GPU type
first (Narayanan et al., OSDI'20: jobs go where their speed-up over their other types is largest)."""
from __future__ import annotations

import numpy as np

from dlsched.policy.base import JobView


def type_order(types, speedup, jobs) -> list[str]:
    """GPU types by the mean speed-up of the jobs on them, fastest first."""
    mean = {t: np.mean([speedup[j.id, t] for j in jobs]) if jobs else 0.0 for t in types}
    return sorted(types, key=lambda t: (-mean[t], t))


def preferred(jobs, t, types, speedup, free, ranges) -> list[JobView]:
    """Jobs whose speed-up on t relative to their best other type is largest, up to t's free GPUs."""
    def advantage(j):
        others = [speedup[j.id, o] for o in types if o != t]
        return speedup[j.id, t] / max(max(others), 1e-12)
    ranked = sorted(jobs, key=lambda j: (-advantage(j), j.submit_time, j.id))
    chosen, demand = [], 0
    for j in ranked:
        if advantage(j) < 1.0 and chosen:
            break
        need = ranges[j.id].g_min
        if demand + need > free and chosen:
            break
        chosen.append(j)
        demand += max(need, min(j.requested_gpus, ranges[j.id].g_max))
    return sorted(chosen, key=lambda j: (j.submit_time, j.id))
