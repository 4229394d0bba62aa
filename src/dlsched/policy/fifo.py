"""FIFO: jobs run in submission order with their full request; non-preemptive; strict (head-of-line blocking)
unless ``backfill`` lets smaller later jobs use GPUs the head cannot."""
from __future__ import annotations

from dlsched.policy._rigid import grant_in_order
from dlsched.policy.base import Allocation, ClusterView, JobView, Policy, register


@register("fifo")
class FifoPolicy(Policy):
    name = "fifo"
    rigid = True          # everyone fits -> everyone runs with their request
    places_own = True     # grant_in_order places (most free first, the peer's Tiresias placement)
    event_driven = True   # the decision changes only when a job arrives or finishes
    reads_remaining = False   # submission order only

    def __init__(self, backfill: bool = False):
        self.backfill = backfill
        self.arrival_queues_behind = not backfill   # blocked at the first job that does not fit: the newest waits

    def queue_window_gpus(self, cluster: ClusterView) -> int | None:
        # strict: the queue is granted in order until one does not fit in the GPUs the running jobs leave, at most
        # all of them; what waits behind that one changes nothing. Backfilling may reach any job
        return None if self.backfill else cluster.total_gpus

    def decide(self, jobs: tuple[JobView, ...], cluster: ClusterView) -> Allocation:
        # Running jobs first (non-preemptive), then the queue by submission time (stable: input order on ties).
        order = sorted(jobs, key=lambda j: (not j.is_running, j.submit_time))
        return grant_in_order(order, cluster, blocking=not self.backfill)
