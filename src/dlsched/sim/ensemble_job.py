"""An ensemble as a job kind of the shared simulator: the policy allocates it like any other job, and FLEET plans its
members inside whatever share that gives (``sim.fleet.EnsembleProgress``), as the live service does.

Its demand follows its members: it asks for ``min(request, useful)`` GPUs and may be grown to ``min(max_gpus, useful)``
or shrunk to 1, where *useful* is how many GPUs the FLEET plan of the still-training members uses on the whole
cluster -- 100 members fill 64 GPUs, the last few need only their own. Its speed model, for policies that weigh one,
is the members' summed training rate of the FLEET plan on g packed GPUs, so an elastic policy sees the speed-up the
flotillas would really get, and its remaining work is the members' summed samples left.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Mapping, Sequence

from dlsched.policy.base import ClusterView, NodeView
from dlsched.policy.fleet import ModelProfile, Preprocessing, plan_fleet, producer_core_pool
from dlsched.sim.fleet import EnsembleProgress, Member, fleet_planner
from dlsched.sim.workload import WorkloadJob


@dataclass(frozen=True)
class EnsembleWork:
    """What a simulated ensemble job trains: its members, their preprocessing, the most GPUs it may be given, and
    the checkpoint reload a member pays when it moves."""

    members: tuple[Member, ...]
    pre: Preprocessing = Preprocessing()
    max_gpus: int | None = None
    restart_s: float = 30.0

    def progress(self) -> EnsembleProgress:
        return EnsembleProgress(self.members, fleet_planner(), self.pre, self.restart_s)


def share_view(nodes: Mapping[str, int], cluster: ClusterView) -> ClusterView:
    """The GPUs a job holds as a cluster of their own; each node's cores are shared in proportion to its GPUs."""
    out = []
    for name, k in nodes.items():
        n = cluster.node(name)
        out.append(NodeView(name, k, n.gpu_type, n.num_cpus * k // n.num_gpus if n.num_gpus else 0))
    return ClusterView(tuple(out))


@dataclass(frozen=True)
class EnsembleThroughput:
    """ThroughputModel of an ensemble job: members' summed samples/s of the FLEET plan on g GPUs packed
    ``gpus_per_node`` to a node (``cpus_per_node`` cores each, 0 = not CPU-limited). Hashable: policies memo on it."""

    profiles: tuple[ModelProfile, ...]
    pre: Preprocessing
    gpus_per_node: int
    cpus_per_node: int = 0

    def throughput(self, num_gpus: int, num_nodes: int, global_batch: int, gpu_type: str | None = None) -> float:
        return planned(self, num_gpus)[0]

    def efficiency(self, global_batch: int) -> float:
        return 1.0

    def useful_gpus(self, total_gpus: int) -> int:
        return planned(self, total_gpus)[1]


@lru_cache(maxsize=8192)
def planned(speed: EnsembleThroughput, gpus: int) -> tuple[float, int]:
    """(members' summed rate, GPUs used) of the FLEET plan on ``gpus`` packed GPUs; memoised because a policy asks
    for many g on every decision and the members change only at convergences."""
    if gpus <= 0 or not speed.profiles:
        return 0.0, 0
    per = speed.gpus_per_node
    sizes = [per] * (gpus // per) + ([gpus % per] if gpus % per else [])
    cluster = ClusterView(tuple(NodeView(f"g{i}", k, num_cpus=speed.cpus_per_node * k // per)
                                for i, k in enumerate(sizes)))
    plan = plan_fleet(speed.profiles, {n.name: n.num_gpus for n in cluster.nodes}, producer_core_pool(cluster), speed.pre)
    return (sum(f.rate * len(f.gpus) for f in plan.flotillas),
            sum(g for f in plan.flotillas for g in f.gpus.values()))


def ensemble_speed(members: Sequence[Member], pre: Preprocessing, cluster: ClusterView) -> EnsembleThroughput:
    """The speed model of these (still-training) members on nodes shaped like ``cluster``'s largest."""
    node = max(cluster.nodes, key=lambda n: n.num_gpus)
    return EnsembleThroughput(tuple(m.profile for m in members), pre, node.num_gpus, node.num_cpus)


def ensemble_job_specs(members: Sequence[Member], cluster: ClusterView, mode: str, prefix: str = "ens",
                       submit_time: float = 0.0, pre: Preprocessing = Preprocessing(), restart_s: float = 30.0,
                       max_gpus: int | None = None):
    """The ensemble as jobs of the shared simulator (``dlsched.sim.workload.WorkloadJob``).

    ``mode="fleet"``: one ensemble job asking for ``cluster``'s GPU count (at most ``max_gpus``, default: as many
    as FLEET can use); the policy decides its share each round and FLEET plans the members inside it
    (``sim/ensemble_job.py``). ``mode="separately"``: one 1-GPU job per member, lasting
    work / min(r(1), its own pipeline's rate) on ``cluster``'s first node's per-GPU cores."""
    if mode == "fleet":
        work = EnsembleWork(tuple(members), pre, max_gpus, restart_s)
        return [WorkloadJob(prefix, submit_time, cluster.total_gpus, ensemble=work)]
    if mode == "separately":
        node = cluster.nodes[0]
        cores = (node.num_cpus - node.num_gpus) // node.num_gpus
        return [WorkloadJob(f"{prefix}-{i:03d}", submit_time, 1, duration=m.work / min(m.profile.rate(1), pre.rate(cores)))
                for i, m in enumerate(members)]
    raise ValueError(f"mode must be 'fleet' or 'separately', got {mode!r}")
