"""Optimus marginal-gain greedy (Peng et al., EuroSys'18, §1.4 of docs/algorithms.md).

All-reduce jobs are GPU-only, as in the Pollux artifact's Optimus+Oracle (simulator/optimus.py): one GPU at a
time goes to the job whose remaining time drops most, gain(j) = Q_j/f_j(n) − Q_j/f_j(n+1), Q = remaining work
(``remaining_samples``), f = throughput with n GPUs packed onto full nodes.

Parameter-server jobs (``speed`` a ``PSSpeedModel``) get (p, w) as in the paper's Eq. 9: the next GPU goes to a
server or a worker, whichever saves more, gain = max(gain_ps, gain_worker); both cost one GPU slot, so the
dominant-resource division is 1. Such a job starts at (1, 1) and its allocation says how many are servers.

Every job first gets its minimum in order of that minimum while GPUs last (anti-starvation). Ties go to the
earlier job; a job never exceeds ``max_gpus``. Placement is left to the driver.
"""
from __future__ import annotations

import heapq
import math

from dlsched.perf.speed import PSSpeedModel
from dlsched.policy.base import Allocation, ClusterView, JobAllocation, JobView, Policy, register

PS, WORKER = 0, 1


def _time(work: float, rate: float) -> float:
    return work / rate if rate > 0 else math.inf


@register("optimus")
class OptimusPolicy(Policy):
    name = "optimus"
    rigid = False
    resize_in_place = False   # the Pollux artifact's Optimus driver re-places every resized job (fidelity test)
    event_driven = False

    def gain(self, job: JobView, n: int, gpus_per_node: int) -> float:
        """Seconds of remaining time saved by the (n+1)-th GPU."""
        cap = job.max_gpus if job.max_gpus is not None else math.inf
        if n + 1 > cap or job.speed is None:
            return 0.0
        work = job.remaining_samples if job.remaining_samples is not None else 1.0
        batch = job.kept_batch or 1
        f0 = job.speed.throughput(n, math.ceil(n / gpus_per_node), batch)
        f1 = job.speed.throughput(n + 1, math.ceil((n + 1) / gpus_per_node), batch)
        if f1 <= 0:
            return 0.0
        return _time(work, f0) - work / f1

    def ps_gain(self, job: JobView, p: int, w: int) -> tuple[float, int]:
        """(seconds saved, PS or WORKER) of the better next task for a parameter-server job at (p, w)."""
        cap = job.max_gpus if job.max_gpus is not None else math.inf
        if p + w + 1 > cap:
            return 0.0, WORKER
        work = job.remaining_samples if job.remaining_samples is not None else 1.0
        now = _time(work, job.speed.samples_per_s(p, w))
        by_ps = now - _time(work, job.speed.samples_per_s(p + 1, w))
        by_worker = now - _time(work, job.speed.samples_per_s(p, w + 1))
        return (by_ps, PS) if by_ps > by_worker else (by_worker, WORKER)

    def decide(self, jobs: tuple[JobView, ...], cluster: ClusterView) -> Allocation:
        gpn = max(n.num_gpus for n in cluster.nodes)
        left = cluster.total_gpus
        count = [0] * len(jobs)
        split = {i: [1, 1] for i, j in enumerate(jobs) if isinstance(j.speed, PSSpeedModel)}  # [p, w]
        heap: list[tuple[float, int, int]] = []

        def push(i: int) -> None:
            if i in split:
                g, kind = self.ps_gain(jobs[i], *split[i])
            else:
                g, kind = self.gain(jobs[i], count[i], gpn), WORKER
            if g > 0:
                heapq.heappush(heap, (-g, i, kind))

        for i in sorted(range(len(jobs)), key=lambda i: max(jobs[i].min_gpus, 2 if i in split else 1)):
            need = max(jobs[i].min_gpus, 2 if i in split else 1)
            if need > left:
                continue
            if i in split:
                split[i][WORKER] = need - 1
            count[i] = need
            left -= need
            push(i)
        while left > 0 and heap:
            _, i, kind = heapq.heappop(heap)
            count[i] += 1
            left -= 1
            if i in split:
                split[i][kind] += 1
            push(i)
        return Allocation({j.id: JobAllocation(c, servers=split[i][PS] if i in split else None)
                           for i, (j, c) in enumerate(zip(jobs, count)) if c > 0})
