"""The Ray backend's record of one running job and the slot bookkeeping it does on the shared job dir."""
from __future__ import annotations

import json
import logging
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Mapping, Sequence

from dlsched.backends.base import atomic_write_json, read_regular
from dlsched.backends.ray_slots import Slot, SlotReserver
from dlsched.train.launcher import IN_USE_FILE, SLOTS_FILE

log = logging.getLogger("dlsched.backends.ray")


def slot_file_groups(job_dir: Path) -> list[str]:
    """The placement groups a job folder's slot file names (held and retired); none where it has no valid one."""
    try:
        spec = json.loads(read_regular(job_dir / SLOTS_FILE))   # job code writes the folder: a FIFO, a huge file
        return [s["group"] for s in spec["slots"]] + list(spec.get("retired", []))
    except (OSError, ValueError, KeyError, TypeError):
        return []


@dataclass
class RayJob:
    """One job on Ray: its slots (held and retired), runtime actor and what the loop has not been told yet."""

    job_id: int
    job_dir: Path
    generation: int
    slots: list[Slot]                 # in the order of the runtime's workers (a shrink keeps the first ones)
    runner: object                    # ray ActorHandle
    runner_node: str                  # Ray node id hex
    spread: bool = False
    retired: list[Slot] = field(default_factory=list)   # shrunk away, released once their worker has left
    lost: str | None = None           # name of the dead node that took the job down
    shrunk: bool = False              # lost workers with a node; the loop has not been told yet
    runner_died_at: float | None = None   # monotonic time Ray first said the runtime's actor died

    @property
    def workers(self) -> int:
        return len(self.slots)

    @property
    def bundle_nodes(self) -> tuple[str, ...]:
        return tuple(s.node for s in self.slots)

    def write_slots(self, bundle: dict[str, float]) -> None:
        """``DIR/ray-slots.json``: what the runtime's Ray launcher puts new workers into (before control.json)."""
        atomic_write_json(self.job_dir / SLOTS_FILE, {
            "generation": self.generation, "resources": bundle,
            "slots": [{"group": s.name, "bundle": 0, "node": s.node} for s in self.slots],
            "retired": [s.name for s in self.retired]})

    def move(self, placement: Mapping[str, int], generation: int, reserver: SlotReserver,
             where: Callable[[Sequence[Slot]], dict[str, int]]) -> None:
        """Same count, other nodes (``where``: slots -> node name -> count): reserve the newcomers' bundles where
        ``placement`` wants more, retire as many where it wants fewer (the runtime replaces the workers in them:
        ``RayLauncher.revoked``)."""
        held = Counter(where(self.slots))
        want, excess = +(Counter(placement) - held), +(held - Counter(placement))
        count = min(sum(want.values()), sum(excess.values()))
        while sum(want.values()) > count:
            want[max(sorted(want), key=want.get)] -= 1
        new = reserver.reserve(self.job_id, generation, count, dict(+want), self.spread,
                               avoid=set(self.bundle_nodes) if self.spread else set())
        leaving = []
        for s in reversed(self.slots):   # the last workers on the nodes it leaves: the runtime's first ones stay
            node = next(iter(where([s])))
            if excess[node] > 0 and len(leaving) < len(new):
                excess[node] -= 1
                leaving.append(s)
        self.retired += leaving
        self.slots = [s for s in self.slots if s not in leaving] + new

    def collect_retired(self, reserver: SlotReserver) -> None:
        """Release the retired slots no worker occupies any more (``DIR/ray-workers.json``, written by the
        runtime's Ray launcher; a runtime that never writes it occupies none)."""
        if not self.retired:
            return
        try:   # written by the runtime, in a folder job code writes: `[]` there raised in every poll of the job
            record = json.loads(read_regular(self.job_dir / IN_USE_FILE))
        except (OSError, ValueError):
            record = {}
        in_use = record.get("in_use") if isinstance(record, dict) else None
        in_use = in_use if isinstance(in_use, dict) else {}
        free = [s for s in self.retired if s.name not in in_use]
        if free:
            self.retired = [s for s in self.retired if s.name in in_use]
            reserver.release([s.group for s in free])
            self.write_slots(reserver.bundle())

    def drop_lost_slots(self, survivors: list[Slot], alive: Mapping[str, str], reserver: SlotReserver) -> None:
        """Forget (and remove: Ray would re-place them on another node) the slots on dead nodes."""
        lost = [s for s in self.slots + self.retired if s.node not in alive]
        self.slots = survivors
        self.retired = [s for s in self.retired if s.node in alive]
        self.shrunk = True
        reserver.release([s.group for s in lost], wait_s=0)
        self.write_slots(reserver.bundle())
        log.warning("job %s: lost %d worker slot(s) with their node; %d keep training", self.job_id, len(lost),
                    len(survivors))
