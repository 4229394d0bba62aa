"""Why a hand resize (``dlsched resize``, ``POST /jobs/{id}/resize``) lies outside the job's own spec.

The cluster's slots and ``MAX_BATCH`` bound every request; these bound one job: its GPU range and its batch range,
which its code was written (and the policies told) to run in.
"""
from __future__ import annotations

from dlsched.spec import JobSpec


def _outside(name: str, value: int, lo: int, hi: int, lo_field: str, hi_field: str) -> str | None:
    if lo <= value <= hi:
        return None
    side, field, bound = ("below", lo_field, lo) if value < lo else ("above", hi_field, hi)
    return f"{name}: {value} is {side} the job's {field}={bound} (its spec allows {lo}..{hi})"


def workers_refusal(spec: JobSpec, workers: int) -> str | None:
    """Why ``workers`` lies outside [min_gpus, max_gpus] (``gpus`` where no range), else None."""
    lo, hi = spec.gpu_range
    return _outside("workers", workers, lo, hi, "min_gpus" if spec.min_gpus is not None else "gpus",
                    "max_gpus" if spec.max_gpus is not None else "gpus")


def batch_refusal(spec: JobSpec, batch: int | None) -> str | None:
    """Why ``batch`` lies outside [min_batch_size, max_batch_size] (``batch_size`` where no range), else None.

    A spec with no batch field at all declares no range (a script's loader picks its batch): any batch is its own."""
    if batch is None:
        return None
    if spec.kind == "ensemble":   # was held and shown at the batch while FLEET trained at the YAML's
        return (f"batch_size: {batch}: an ensemble trains at its ensemble YAML's batch_size; resize it by its "
                "workers only")
    if spec.min_batch_size is not None and spec.max_batch_size is not None:
        return _outside("batch_size", batch, spec.min_batch_size, spec.max_batch_size,
                        "min_batch_size", "max_batch_size")
    if spec.batch_size is not None:
        return _outside("batch_size", batch, spec.batch_size, spec.batch_size, "batch_size", "batch_size")
    return None


def resize_refusal(spec: JobSpec, workers: int | None, batch: int | None) -> str | None:
    """The first reason a resize to (``workers``, ``batch``; None: not held) is outside the job's spec, else None."""
    return (workers_refusal(spec, workers) if workers is not None else None) or batch_refusal(spec, batch)
