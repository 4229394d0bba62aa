"""One scheduling round, the same in the simulator, the live loop and the forecast: policy -> check -> place ->
the actions that turn the jobs' current allocation into the decision.

Pure: no clock, no I/O. Drivers supply the snapshots and apply the actions with their own physics (virtual
progress, real processes, a forecast's rates).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping, Sequence, Union

from dlsched.policy.base import Allocation, ClusterView, JobView, Policy
from dlsched.policy.placement import NodeMap, PlacementError, Strategy, most_free_first, place


class InvalidAllocation(ValueError):
    """A policy's answer the cluster cannot carry out: unknown jobs, more GPUs than exist, nodes that do not fit."""


@dataclass(frozen=True)
class Start:
    job_id: str
    num_gpus: int
    batch_size: int | None
    nodes: Mapping[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class Resize:
    """New GPU count or batch size for a running job; ``moved``: its node map changed too."""

    job_id: str
    num_gpus: int
    batch_size: int | None
    nodes: Mapping[str, int] = field(default_factory=dict)
    moved: bool = False


@dataclass(frozen=True)
class Preempt:
    job_id: str


@dataclass(frozen=True)
class Move:
    """Same GPU count and batch size, other nodes."""

    job_id: str
    nodes: Mapping[str, int] = field(default_factory=dict)


Action = Union[Start, Resize, Preempt, Move]


@dataclass(frozen=True)
class Decision:
    allocation: Allocation
    placement: Mapping[str, NodeMap]     # job id -> nodes, for every job that gets GPUs
    actions: tuple[Action, ...]          # in job order

    def nodes(self, job_id: str) -> NodeMap:
        return self.placement.get(job_id, {})


def check(allocation: Allocation, jobs: Sequence[JobView], cluster: ClusterView, policy_name: str) -> None:
    """Raise InvalidAllocation unless every allocated job is one of ``jobs`` and the GPUs fit the cluster."""
    known = {j.id for j in jobs}
    unknown = [k for k in allocation.jobs if k not in known]
    if unknown:
        raise InvalidAllocation(f"policy {policy_name!r} allocated unknown/inactive jobs {unknown[:3]}")
    if allocation.total_gpus > cluster.total_gpus:
        raise InvalidAllocation(f"policy {policy_name!r} allocated {allocation.total_gpus} GPUs "
                                f"of {cluster.total_gpus}")


def diff(jobs: Sequence[JobView], allocation: Allocation, placement: Mapping[str, NodeMap]) -> tuple[Action, ...]:
    """The actions from each job's current (GPUs, batch, nodes) to the decided ones. A job given no batch size
    runs at ``JobView.kept_batch``: its current one while its batch range admits it, else the one it asks for (an
    operator's held batch, under every policy that chooses no batch)."""
    out: list[Action] = []
    for j in jobs:
        a = allocation.jobs.get(j.id)
        n = a.num_gpus if a else 0
        cur = j.num_gpus
        if n == 0:
            if cur:
                out.append(Preempt(j.id))
            continue
        batch = a.batch_size or j.kept_batch
        nodes = placement.get(j.id, {})
        moved = list(nodes.items()) != list(j.placement.items())   # order matters: step-time traces depend on it
        if cur == 0:
            out.append(Start(j.id, n, batch, nodes))
        elif n != cur or batch != j.current_batch_size:
            out.append(Resize(j.id, n, batch, nodes, moved))
        elif moved:
            out.append(Move(j.id, nodes))
    return tuple(out)


def schedule(policy: Policy, jobs: Sequence[JobView], cluster: ClusterView,
             strategy: Strategy = most_free_first) -> Decision:
    """One round: ``policy.decide``, the shared check, placement (jobs the policy did not place go where
    ``strategy`` says; unchanged counts keep their nodes, resized jobs the GPUs they hold unless the policy
    says otherwise), then the diff."""
    jobs = tuple(jobs)
    strategy = getattr(policy, "placement", None) or strategy   # a policy that packs for its speed model wins
    allocation = policy.decide(jobs, cluster)
    check(allocation, jobs, cluster, policy.name)
    try:
        placement = place(allocation, cluster, {j.id: j.placement for j in jobs if j.placement}, strategy,
                          policy.resize_in_place)
    except PlacementError as e:
        raise InvalidAllocation(f"policy {policy.name!r}: {e}") from None
    return Decision(allocation, placement, diff(jobs, allocation, placement))
