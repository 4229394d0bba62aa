"""A policy wrapper that hides GPU types: the baseline for measuring what type-aware scheduling buys.

The wrapped policy sees every node as one ``generic`` type, so speed models answer at the traced speed and the
policy leaves ``gpu_type`` unset; the driver then places jobs on whatever nodes are free while the simulator still
runs each job at its real type's speed (Gavel's "heterogeneity-agnostic" baseline).
"""
from __future__ import annotations

from dataclasses import replace

from dlsched.policy.base import Allocation, ClusterView, JobView, Policy

BLIND_TYPE = "generic"


def blind(cluster: ClusterView) -> ClusterView:
    return ClusterView(tuple(replace(n, gpu_type=BLIND_TYPE) for n in cluster.nodes), cluster.now,
                       cluster.finished)


class TypeBlind(Policy):
    """``inner`` deciding on a cluster whose GPU types are erased."""

    def __init__(self, inner: Policy):
        self.inner = inner
        self.name = f"{inner.name}-type-blind"
        self.rigid = inner.rigid
        self.event_driven = inner.event_driven

    def validate(self, job: JobView, cluster: ClusterView) -> None:
        self.inner.validate(job, cluster)

    def decide(self, jobs: tuple[JobView, ...], cluster: ClusterView) -> Allocation:
        alloc = self.inner.decide(jobs, blind(cluster))
        return Allocation({k: replace(a, gpu_type=None) for k, a in alloc.jobs.items()})
