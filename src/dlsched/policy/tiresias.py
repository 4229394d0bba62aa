"""Tiresias discretised 2D-LAS (Gu et al., NSDI'19), as run by the Pollux artifact (simulator/tiresias.py).

Jobs sit in priority queues by attained GPU service (GPU-seconds); queue k holds jobs with service in
[thresholds[k-1], thresholds[k]). Higher queues first, FIFO by submission inside a queue; every job that fits
gets its full request (smaller jobs may pass a blocked bigger one); the rest are preempted. Running jobs keep their
nodes; newcomers are placed most-free-first in priority order. The peer's single threshold is 16 GPU-hours.
"""
from __future__ import annotations

import bisect

from dlsched.policy._rigid import grant_in_order
from dlsched.policy.base import Allocation, ClusterView, JobView, Policy, register


@register("tiresias")
class TiresiasPolicy(Policy):
    name = "tiresias"
    rigid = True
    places_own = True     # grant_in_order places (most free first, the peer's Tiresias placement)
    event_driven = False   # queues change as service accrues
    reads_remaining = False   # attained service only

    def __init__(self, thresholds: tuple[float, ...] = (3600.0 * 16,)):
        self.thresholds = tuple(sorted(thresholds))

    def queue(self, job: JobView) -> int:
        return bisect.bisect_right(self.thresholds, job.attained_service)

    def decide(self, jobs: tuple[JobView, ...], cluster: ClusterView) -> Allocation:
        order = sorted(jobs, key=lambda j: (self.queue(j), j.submit_time))
        return grant_in_order(order, cluster)
