"""Which GPU each worker process gets: one device per worker for the worker's whole life, never shared.

A job's devices are the ``CUDA_VISIBLE_DEVICES`` entries its backend granted (at start through the
environment, on a resize through ``control.json``'s ``devices``). Each worker process is pinned to
one of them for good, because a process cannot move its CUDA context when ranks are renumbered after
a resize: its own ``CUDA_VISIBLE_DEVICES`` lists its device first (so it trains on ``cuda:0``) and then
the job's other devices, which NCCL needs to see for direct GPU-to-GPU (P2P) transfers with peers.
A worker without a device ("") sees no GPU and runs on the CPU, and a generation in which any rank
lacks a device uses gloo. Pure functions, so the assignment is tested without a GPU.
"""
from __future__ import annotations

from typing import Iterable, Mapping, Sequence

CPU = ""  # the device of a worker that has no GPU (CUDA_VISIBLE_DEVICES="" hides every GPU from it)


def job_devices(visible: str | None, cuda_count: int) -> list[str]:
    """The devices a job starts with: the entries of ``CUDA_VISIBLE_DEVICES`` when the starter set it
    ("" = none: the backend keeps this job off the GPUs), else every local GPU."""
    if visible is None:
        return [str(i) for i in range(cuda_count)]
    return [d.strip() for d in visible.split(",") if d.strip()]


def free_devices(devices: Sequence[str], held: Iterable[str], count: int) -> list[str]:
    """Devices for ``count`` new workers: the job's devices no live worker holds, in order, then CPU."""
    taken = set(held)
    free = [d for d in devices if d not in taken]
    return (free + [CPU] * count)[:count]


def keepers(order: Sequence[int], device_of: Mapping[int, str], devices: Sequence[str], workers: int) -> list[int]:
    """The workers (in ``order``) that may stay in the next generation, at most ``workers``: those whose GPU
    still belongs to the job (a released GPU may already be another job's) and those on the CPU."""
    allowed = set(devices) | {CPU}
    return [w for w in order if device_of.get(w, CPU) in allowed][:workers]


def visible_devices(own: str, devices: Sequence[str]) -> str:
    """A worker's ``CUDA_VISIBLE_DEVICES``: its own device (= its cuda:0), then its job's others (P2P peers)."""
    if own == CPU:
        return CPU
    return ",".join([own, *(d for d in devices if d != own)])


def collective_backend(devices: Sequence[str], cuda_available: bool) -> str:
    """NCCL when every rank of the generation has its own GPU, else gloo on the CPU (same training code)."""
    return "nccl" if cuda_available and devices and all(d != CPU for d in devices) else "gloo"
