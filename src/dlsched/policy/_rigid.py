"""Shared step of the rigid policies (FIFO, SRTF, Tiresias): grant whole requests in a priority order."""
from __future__ import annotations

from typing import Iterable

from dlsched.policy.placement import most_free_first
from dlsched.policy.base import Allocation, ClusterView, JobAllocation, JobView


def grant_in_order(order: Iterable[JobView], cluster: ClusterView, *, blocking: bool = False,
                   place_here: bool = True) -> Allocation:
    """Give each job its full request while GPUs last, in ``order``.

    ``blocking``: stop at the first job that does not fit (strict FIFO) instead of letting smaller ones pass.
    ``place_here``: running jobs keep their nodes and newcomers are placed most-free-first *in priority order*
    (how the Pollux artifact's Tiresias places); otherwise node choice is left to the driver.
    """
    order = list(order)
    left = cluster.total_gpus
    chosen: list[JobView] = []
    for job in order:
        if job.requested_gpus <= left:
            chosen.append(job)
            left -= job.requested_gpus
        elif blocking:
            break
    if not place_here:
        return Allocation({j.id: JobAllocation(j.requested_gpus) for j in chosen})
    free = {n.name: n.num_gpus for n in cluster.nodes}
    nodes: dict[str, dict[str, int]] = {}
    for j in chosen:
        if j.num_gpus == j.requested_gpus:
            nodes[j.id] = dict(j.placement)
            for n, k in j.placement.items():
                free[n] -= k
    for j in chosen:
        if j.id not in nodes:
            nodes[j.id] = most_free_first(j.requested_gpus, free)
            for n, k in nodes[j.id].items():
                free[n] -= k
    return Allocation({j.id: JobAllocation(j.requested_gpus, nodes=nodes[j.id]) for j in chosen})
