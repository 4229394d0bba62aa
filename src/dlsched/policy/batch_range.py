"""A job's feasible (global batch, GPU count) configurations for the elastic policies, checked at submit time."""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from dlsched.errors import UserError
from dlsched.policy.base import ClusterView, JobView

BATCH_CANDIDATES = 5       # global batches tried per g (geometric grid including both ends)


@dataclass(frozen=True)
class BatchRange:
    """A job's feasible configurations: global batch in [b_min, b_max], g in [g_min, g_max],
    min_local <= b/g <= max_local (min_local: the smallest per-GPU batch the job was profiled with, default 1).
    ``accumulate``: b/g may exceed max_local, run as micro-batches of at most max_local (a fixed batch's way to
    fewer GPUs; the runtimes and the trace model accumulate, its throughput model prices the extra passes)."""

    b_min: int
    b_max: int
    max_local: int
    g_min: int
    g_max: int
    min_local: int = 1
    batch_free: bool = False     # the job has no batch size: one nominal batch, none reported
    accumulate: bool = False

    def _largest(self, g: int) -> int:
        return self.b_max if self.accumulate else min(self.b_max, g * self.max_local)

    def fits(self, g: int, b: int) -> bool:
        return max(self.b_min, g * self.min_local) <= b <= self._largest(g)

    def batches(self, g: int) -> np.ndarray:
        """Candidate global batches at g GPUs (empty if none): a geometric grid over the feasible interval."""
        lo, hi = max(self.b_min, g * self.min_local), self._largest(g)
        if lo > hi:
            return np.zeros(0, dtype=int)
        return np.unique(np.round(np.geomspace(lo, hi, BATCH_CANDIDATES)).astype(int))


def batch_range(job: JobView, total_gpus: int, fixed_batch: bool = False) -> BatchRange:
    """The job's [b_min, b_max] (or its fixed batch), per-GPU limit and GPU bounds; UserError if infeasible.

    Drivers call this (through :func:`validate_elastic_job`) when a job is submitted, so a bad range is a clear
    one-line error at submit time and never a crash in the middle of a simulation.
    """
    where = f"job {job.id!r}"
    user = job.batch_size
    if all(v is None for v in (user, job.min_batch_size, job.max_batch_size, job.max_local_batch)):
        # A job that says nothing about batches (a Philly duration job): scale GPUs only, report no batch.
        g_max = min(job.max_gpus if job.max_gpus is not None else total_gpus, total_gpus)
        if job.min_gpus > g_max:
            raise UserError(f"{where}: min_gpus={job.min_gpus} is more than the {g_max} GPUs allowed")
        return BatchRange(g_max, g_max, g_max, max(1, job.min_gpus), g_max, 1, batch_free=True)
    if fixed_batch:
        if user is None:
            raise UserError(f"{where}: field batch_size is required by elastic-gpu-only (got None)")
        b_min = b_max = user
    else:
        b_min = job.min_batch_size if job.min_batch_size is not None else user
        b_max = job.max_batch_size if job.max_batch_size is not None else user
        if b_min is None or b_max is None:
            raise UserError(f"{where}: needs batch_size or min_batch_size/max_batch_size "
                            f"(got batch_size={user}, min_batch_size={job.min_batch_size}, "
                            f"max_batch_size={job.max_batch_size})")
    if b_min < 1:
        raise UserError(f"{where}: field min_batch_size must be >= 1 (got {b_min})")
    if b_min > b_max:
        raise UserError(f"{where}: min_batch_size={b_min} is larger than max_batch_size={b_max}")
    if user is not None and not fixed_batch and not b_min <= user <= b_max:
        raise UserError(f"{where}: batch_size={user} is outside [min_batch_size, max_batch_size] = [{b_min}, {b_max}]")
    max_local = job.max_local_batch if job.max_local_batch is not None else b_max
    if max_local < 1:
        raise UserError(f"{where}: field max_local_batch must be >= 1 (got {max_local})")
    # Drivers that predate JobView.min_local_batch pass it in attrs.
    min_local = job.min_local_batch if job.min_local_batch is not None else int(job.attrs.get("min_local_batch", 1))
    if not 1 <= min_local <= max_local:
        raise UserError(f"{where}: field min_local_batch={min_local} must be in [1, max_local_batch={max_local}]")
    g_max = min(job.max_gpus if job.max_gpus is not None else total_gpus, total_gpus, b_max // min_local)
    # a fixed batch has no other way onto fewer GPUs than ceil(b / max_local): it accumulates there instead of
    # being refused (or held off a busy cluster until that many are free)
    g_min = max(job.min_gpus, 1) if fixed_batch else max(job.min_gpus, math.ceil(b_min / max_local))
    if g_min > g_max:
        raise UserError(f"{where}: no feasible GPU count: batch {b_min}..{b_max} with max_local_batch={max_local} "
                        f"needs >= {g_min} GPUs but at most {g_max} are allowed "
                        f"(max_gpus={job.max_gpus}, cluster={total_gpus}, one sample per GPU)")
    return BatchRange(b_min, b_max, max_local, g_min, g_max, min_local, accumulate=fixed_batch)


def validate_elastic_job(job: JobView, cluster: ClusterView, fixed_batch: bool = False) -> None:
    """Submit-time check for the elastic policies: raises UserError naming the job, field and value."""
    batch_range(job, cluster.total_gpus, fixed_batch)
