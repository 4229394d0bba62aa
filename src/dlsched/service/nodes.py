"""What ``dlsched nodes`` and the dashboard show per node: address, GPU slots, health and the jobs on it.

A node is ``up`` while the backend lists it live and ``lost`` once it does not (a declared node, or one seen
live before): an operator sees a dead machine as a marked row, not as a row that silently vanished."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Mapping, Sequence

from dlsched.policy.base import NodeView

UP, LOST = "up", "lost"


@dataclass(frozen=True)
class NodeStatus:
    name: str
    address: str
    slots: int
    used: int
    gpu_type: str
    health: str          # up | lost
    since: float         # when it entered this health (the service's first look, for a node never changed)
    jobs: tuple[int, ...]


class NodeWatch:
    """The node table, refreshed once per scheduling round from the backend's live nodes."""

    def __init__(self, declared: Sequence[NodeView]):
        self._known: dict[str, NodeView] = {n.name: n for n in declared}
        self._addresses: dict[str, str] = {}
        self._health: dict[str, tuple[str, float]] = {}
        self.table: tuple[NodeStatus, ...] = ()

    def update(self, live: Sequence[NodeView], addresses: Mapping[str, str],
               placements: Iterable[tuple[int, Mapping[str, int]]], now: float) -> list[tuple[str, str]]:
        """Refresh the table; returns the (node, health) changes since the last update, in name order."""
        live_names = {n.name for n in live}
        self._known.update({n.name: n for n in live})
        self._addresses.update(addresses)
        jobs: dict[str, list[int]] = {}
        used: dict[str, int] = {}
        for job_id, nodes in placements:
            for node, k in nodes.items():
                jobs.setdefault(node, []).append(job_id)
                used[node] = used.get(node, 0) + k
        changes, rows = [], []
        for name in sorted(self._known):
            health = UP if name in live_names else LOST
            old = self._health.get(name)
            if old is None or old[0] != health:
                self._health[name] = (health, now)
                if old is not None or health == LOST:
                    changes.append((name, health))
            n = self._known[name]
            rows.append(NodeStatus(name, self._addresses.get(name, ""), n.num_gpus, used.get(name, 0), n.gpu_type,
                                   health, self._health[name][1], tuple(sorted(jobs.get(name, ())))))
        self.table = tuple(rows)
        return changes

    def lost(self) -> frozenset[str]:
        return frozenset(r.name for r in self.table if r.health == LOST)
