"""SRTF: shortest remaining time first, preemptive. Remaining time = remaining work / throughput at the job's
request; the work is whatever the driver supplies in ``remaining_samples`` (oracle or a prediction). Jobs without
an estimate go last, in submission order."""
from __future__ import annotations

import math

from dlsched.policy._rigid import grant_in_order
from dlsched.policy.base import Allocation, ClusterView, JobView, Policy, register


def remaining_time(job: JobView, gpus_per_node: int) -> float:
    if job.remaining_samples is None or job.speed is None:
        return math.inf
    n = job.requested_gpus
    batch = job.kept_batch or 1
    rate = job.speed.throughput(n, math.ceil(n / gpus_per_node), batch)
    return job.remaining_samples / rate if rate > 0 else math.inf


@register("srtf")
class SrtfPolicy(Policy):
    name = "srtf"
    rigid = True
    places_own = True     # grant_in_order places (most free first, the peer's Tiresias placement)
    event_driven = True   # running jobs only get shorter, waiting ones stay: order changes only on events

    def decide(self, jobs: tuple[JobView, ...], cluster: ClusterView) -> Allocation:
        gpn = max(n.num_gpus for n in cluster.nodes)
        order = sorted(jobs, key=lambda j: (remaining_time(j, gpn), j.submit_time))
        return grant_in_order(order, cluster)
