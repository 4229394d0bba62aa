"""GPU counts -> nodes. Pure functions of (counts, free GPUs per node); the node maps they return keep the order
in which nodes were chosen (step-time traces of 3+ node placements depend on it).

* ``most_free_first``: repeatedly take the node with the most free GPUs (first in cluster order on ties) — the
  placement of the Pollux artifact's Tiresias and Optimus drivers; packs a job onto few nodes on an empty cluster.
* ``consolidated``: Optimus Theorem 1 — the fewest nodes, the same number of GPUs on each; falls back to
  ``most_free_first`` when no even split fits.
* ``place``: a whole allocation; jobs whose GPU count did not change keep their nodes (no needless restart), the
  rest are placed smallest first. A resized job keeps the GPUs it holds where that spans no more nodes than a fresh
  placement would: a grow adds GPUs beside them, a shrink keeps its first ones. The runtime resizes stop-free, its
  kept workers staying on their devices (docs/runtime.md; a Ray shrink keeps its oldest workers, docs/ray.md), so
  the node map recorded is the one the job really runs on. A job whose ``JobAllocation.gpu_type`` is set only ever gets nodes of that type
  (the policy chose the type for the job's speed-up there).
"""
from __future__ import annotations

from typing import Callable, Iterable, Mapping

from dlsched.policy.base import Allocation, ClusterView

NodeMap = dict[str, int]
Strategy = Callable[[int, Mapping[str, int]], NodeMap]


class PlacementError(ValueError):
    """The requested GPUs do not fit the free ones."""


def free_gpus(cluster: ClusterView, held: Iterable[Mapping[str, int]] = ()) -> NodeMap:
    """Free GPUs per node (cluster order) after subtracting the node maps in ``held``."""
    free = {n.name: n.num_gpus for n in cluster.nodes}
    for nodes in held:
        for name, k in nodes.items():
            free[name] -= k
    return free


def _take_greedily(num_gpus: int, free: Mapping[str, int], choose) -> NodeMap:
    """Place ``num_gpus`` node by node: ``choose(left, need)`` names the next node (None: nothing can take any)."""
    left = dict(free)
    out: NodeMap = {}
    need = num_gpus
    while need > 0:
        name = choose(left, need)
        if name is None or left[name] <= 0:
            raise PlacementError(f"{num_gpus} GPUs do not fit the free {sum(free.values())}")
        k = min(left[name], need)
        out[name] = out.get(name, 0) + k
        left[name] -= k
        need -= k
    return out


def _most_free(left: Mapping[str, int], need: int) -> str | None:
    return max(left, key=left.__getitem__, default=None)


def most_free_first(num_gpus: int, free: Mapping[str, int]) -> NodeMap:
    """Take GPUs from the node with the most free ones, then the next, until ``num_gpus`` are placed."""
    return _take_greedily(num_gpus, free, _most_free)


def best_fit(num_gpus: int, free: Mapping[str, int]) -> NodeMap:
    """The fewest nodes, leaving whole nodes free for later jobs: whole free nodes for each full node's worth of
    GPUs, the rest on the node whose free GPUs fit it most tightly (best fit); where nothing fits it, the nodes
    with most free GPUs. Most-free-first would put a 1-GPU job on an empty node, and the next 4-GPU job would
    then span two nodes (its all-reduce crossing the network: yolov3 at 4 GPUs on two nodes runs at under half
    its one-node speed in the Pollux traces)."""
    size = max(free.values(), default=0)

    def tightest(left: Mapping[str, int], need: int) -> str | None:
        fits = [n for n in left if left[n] >= min(need, size) and left[n] > 0]
        return min(fits, key=lambda n: left[n]) if fits else _most_free(left, need)   # cluster order on ties

    if size <= 0:
        raise PlacementError(f"{num_gpus} GPUs do not fit the free {sum(free.values())}")
    return _take_greedily(num_gpus, free, tightest)


def consolidated(num_gpus: int, free: Mapping[str, int]) -> NodeMap:
    """Optimus Theorem 1: the smallest k such that the k nodes with most free GPUs each host num_gpus/k."""
    order = sorted(free, key=lambda n: -free[n])   # stable: cluster order on ties
    for k in range(1, len(order) + 1):
        if num_gpus % k:
            continue
        per = num_gpus // k
        if all(free[n] >= per for n in order[:k]):
            return {n: per for n in order[:k]}
    return most_free_first(num_gpus, free)


def apply(free: NodeMap, nodes: Mapping[str, int]) -> None:
    for name, k in nodes.items():
        free[name] -= k


def resized(held: Mapping[str, int], num_gpus: int, free: Mapping[str, int], strategy: Strategy) -> NodeMap | None:
    """``held``'s GPUs resized to ``num_gpus`` without moving the ones kept: a shrink keeps the first ones (held
    order: the runtime's oldest workers), a grow fills its own nodes first and places the rest with ``strategy``.
    None when a held GPU has been taken meanwhile."""
    if any(free.get(n, 0) < k for n, k in held.items()):
        return None
    out: NodeMap = {}
    need = num_gpus
    for name, k in held.items():
        take = min(k, need)
        if take <= 0:
            break
        out[name] = take
        need -= take
    left = {n: v - out.get(n, 0) for n, v in free.items()}
    for name in held:                       # a grow: GPUs on the job's own nodes first (no extra node)
        take = min(left[name], need)
        if take > 0:
            out[name] += take
            left[name] -= take
            need -= take
    if need > 0:
        for name, k in strategy(need, {n: v for n, v in left.items() if n not in out}).items():
            out[name] = out.get(name, 0) + k
    return out


def place(allocation: Allocation, cluster: ClusterView, current: Mapping[str, Mapping[str, int]],
          strategy: Strategy = most_free_first, resize_in_place: bool = True) -> dict[str, NodeMap]:
    """Node maps for every job with GPUs in ``allocation``.

    Policy-set node maps are honoured first; then jobs whose count equals their ``current`` placement keep it;
    the others are placed in ascending GPU count (stable in allocation order) with ``strategy``, a resized job
    keeping its GPUs (:func:`resized`) unless that spans more nodes than the fresh placement or
    ``resize_in_place`` is off.
    """
    free = free_gpus(cluster)
    type_of = {n.name: n.gpu_type for n in cluster.nodes}
    out: dict[str, NodeMap] = {}
    todo = []
    for jid, a in allocation.jobs.items():
        if a.num_gpus <= 0:
            continue
        if a.nodes is not None:
            out[jid] = dict(a.nodes)
            apply(free, a.nodes)
    for jid, a in allocation.jobs.items():
        if a.num_gpus <= 0 or a.nodes is not None:
            continue
        cur = current.get(jid)
        if (cur and sum(cur.values()) == a.num_gpus and all(free.get(n, 0) >= k for n, k in cur.items())
                and (a.gpu_type is None or all(type_of.get(n) == a.gpu_type for n in cur))):
            out[jid] = dict(cur)
            apply(free, cur)
        else:
            todo.append((a.num_gpus, jid))
    for _, jid in sorted(todo, key=lambda t: t[0]):
        a = allocation.jobs[jid]
        if a.gpu_type is None:
            pool = free
        else:
            pool = {n: k for n, k in free.items() if type_of[n] == a.gpu_type}
            if not pool:
                raise PlacementError(f"job {jid}: no nodes of GPU type {a.gpu_type!r}")
        nodes = strategy(a.num_gpus, pool)
        cur = current.get(jid)
        if resize_in_place and cur and all(n in pool for n in cur):
            try:
                kept = resized(cur, a.num_gpus, pool, strategy)
            except PlacementError:
                kept = None
            if kept is not None and len(kept) <= len(nodes):
                nodes = kept
        out[jid] = nodes
        apply(free, nodes)
    if any(v < 0 for v in free.values()):
        raise PlacementError(f"allocation over-subscribes nodes: {[n for n, v in free.items() if v < 0]}")
    return out
