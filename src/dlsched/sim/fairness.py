"""Finish-time fairness (Themis, NSDI'20): rho = a job's JCT in the shared cluster / its JCT alone.

"Alone" here is the job by itself on the same cluster at its requested GPUs and batch (FIFO, same interval and
restart penalty), so rho > 1 is what sharing cost it; an elastic policy can also give rho < 1.
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from dlsched.policy.base import ClusterView
from dlsched.sim.metrics import SimResult
from dlsched.sim.workload import WorkloadJob


def isolated_jcts(specs: list[WorkloadJob], cluster: ClusterView, interval: float = 60.0,
                  restart_penalty: float = 30.0) -> dict[str, float]:
    """JCT of each job alone (cached per distinct (app, GPUs, batch, duration): workloads repeat them)."""
    from dlsched.sim.engine import run

    cache: dict[tuple, float] = {}
    out = {}
    for s in specs:
        key = (s.app, s.requested_gpus, s.batch_size, s.duration)
        if key not in cache:
            alone = replace(s, submit_time=0.0)
            cache[key] = run([alone], "fifo", cluster, interval=interval, restart_penalty=restart_penalty,
                             remaining="none").jct()[s.id]
        out[s.id] = cache[key]
    return out


def finish_time_fairness(result: SimResult, alone: dict[str, float]) -> tuple[float, float]:
    """(max rho, mean rho) over the finished jobs."""
    f = result.finished
    rho = np.array([jct / alone[i] for i, jct in zip(f.id, f.jct)])
    return (float(rho.max()), float(rho.mean())) if len(rho) else (float("nan"), float("nan"))
