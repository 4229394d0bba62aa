"""Tiny hand-made workloads for simulator and policy tests."""
from __future__ import annotations

from dlsched.policy.base import ClusterView
from dlsched.sim import WorkloadJob, run


def job(name: str, t: float, gpus: int, seconds: float) -> WorkloadJob:
    """A duration-driven job: ``seconds`` of work on ``gpus`` GPUs."""
    return WorkloadJob(name, t, gpus, duration=seconds)


def jcts(jobs, policy, nodes=1, gpus_per_node=2, interval=10.0, restart_penalty=0.0, **kw) -> dict[str, float]:
    r = run(jobs, policy, ClusterView.homogeneous(nodes, gpus_per_node), interval=interval,
            restart_penalty=restart_penalty, **kw)
    return r.jct()
