"""Optimus marginal-gain greedy (Peng et al., EuroSys'18, §1.4 of docs/algorithms.md), GPU-only as in the
Pollux artifact's Optimus+Oracle (simulator/optimus.py).

Every job first gets its minimum (1 GPU) in input order while GPUs last; then one GPU at a time goes to the job
whose remaining time drops most: gain(j) = Q_j/f_j(n) − Q_j/f_j(n+1), Q = remaining work (``remaining_samples``),
f = throughput with n GPUs packed onto full nodes. Ties go to the earlier job; a job never exceeds ``max_gpus``.
Placement is left to the driver (unchanged counts keep their nodes, the rest most-free-first, smallest first).
"""
from __future__ import annotations

import heapq
import math

from dlsched.policy.base import Allocation, ClusterView, JobAllocation, JobView, Policy, register


@register("optimus")
class OptimusPolicy(Policy):
    name = "optimus"
    rigid = False
    event_driven = False

    def gain(self, job: JobView, n: int, gpus_per_node: int) -> float:
        """Seconds of remaining time saved by the (n+1)-th GPU."""
        cap = job.max_gpus if job.max_gpus is not None else math.inf
        if n + 1 > cap or job.speed is None:
            return 0.0
        work = job.remaining_samples if job.remaining_samples is not None else 1.0
        batch = job.current_batch_size or job.batch_size or 1
        f0 = job.speed.throughput(n, math.ceil(n / gpus_per_node), batch)
        f1 = job.speed.throughput(n + 1, math.ceil((n + 1) / gpus_per_node), batch)
        if f1 <= 0:
            return 0.0
        return (work / f0 if f0 > 0 else math.inf) - work / f1

    def decide(self, jobs: tuple[JobView, ...], cluster: ClusterView) -> Allocation:
        gpn = max(n.num_gpus for n in cluster.nodes)
        left = cluster.total_gpus
        count = [0] * len(jobs)
        heap: list[tuple[float, int]] = []
        for i in sorted(range(len(jobs)), key=lambda i: jobs[i].min_gpus):
            need = jobs[i].min_gpus
            if need > left:
                continue
            count[i] = need
            left -= need
            g = self.gain(jobs[i], need, gpn)
            if g > 0:
                heapq.heappush(heap, (-g, i))
        while left > 0 and heap:
            _, i = heapq.heappop(heap)
            count[i] += 1
            left -= 1
            g = self.gain(jobs[i], count[i], gpn)
            if g > 0:
                heapq.heappush(heap, (-g, i))
        return Allocation({j.id: JobAllocation(c) for j, c in zip(jobs, count) if c > 0})
