"""Ray reservations for the Ray backend: one single-bundle placement group (a slot) per worker, pinned to the node
the policy chose, or where Ray's own strategy puts it (``backends/ray.py`` documents why one group per worker)."""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Callable, Mapping

RAY_NODE_ID_LABEL = "ray.io/node-id"    # set by Ray on every node
log = logging.getLogger("dlsched.backends.ray")


@dataclass(frozen=True)
class Slot:
    """One worker's bundle: a single-bundle placement group pinned to ``node`` (a Ray node id).

    One group per worker, not one per job: Ray removes a group only whole and kills every actor in it,
    so a shrink could not free a leaver's GPU without killing the workers that stay."""

    name: str
    node: str
    group: object   # ray PlacementGroup


def slot_name(job_id: int, generation: int, index: int) -> str:
    """The ``index``-th slot reserved for job ``job_id`` in ``generation`` (its start or a grow)."""
    return f"dlsched-{job_id}-g{generation}-w{index}"


class SlotReserver:
    """Reserves and releases slots. ``node_names`` maps live Ray node ids to node names; ``while_waiting`` runs
    while a reservation waits for Ray to place it."""

    def __init__(self, gpu_resource: str, cpus_per_worker: float, ready_timeout_s: float, pin_timeout_s: float,
                 node_names: Callable[[], dict[str, str]], while_waiting: Callable[[], None]) -> None:
        self.gpu_resource = gpu_resource
        self.cpus_per_worker = cpus_per_worker
        self.ready_timeout_s = ready_timeout_s
        self.pin_timeout_s = pin_timeout_s      # how long a node-pinned reservation may wait before Ray places it
        self.node_names = node_names
        self.while_waiting = while_waiting

    def bundle(self) -> dict[str, float]:
        bundle = {self.gpu_resource: 1.0}
        if self.cpus_per_worker:
            bundle["CPU"] = self.cpus_per_worker
        return bundle

    def _wait_created(self, groups: list, timeout_s: float) -> bool:
        """Wait until every group is placed; meanwhile release other jobs' retired slots (a shrink's GPUs
        come back only when its leaving workers have gone, and this reservation may be waiting for them)."""
        from ray.util.placement_group import placement_group_table

        deadline = time.monotonic() + timeout_s
        pending = list(groups)
        while pending:
            pending = [g for g in pending if placement_group_table(g).get("state") != "CREATED"]
            if not pending:
                return True
            if time.monotonic() >= deadline:
                return False
            self.while_waiting()
            time.sleep(0.01)
        return True

    def _pinned(self, names: list[str], nodes: list[str], timeout_s: float) -> list[Slot] | None:
        """One single-bundle group per name on the given node; None (and nothing held) if not all fit in time."""
        from ray.util.placement_group import placement_group

        groups = [placement_group([self.bundle()], name=name, lifetime="detached", strategy="PACK",
                                  bundle_label_selector=[{RAY_NODE_ID_LABEL: node}])
                  for name, node in zip(names, nodes)]
        if self._wait_created(groups, timeout_s):
            return [Slot(name, node, g) for name, node, g in zip(names, nodes, groups)]
        self.release(groups)
        return None

    def _ray_chooses(self, job_id: int, count: int, spread: bool, avoid: set[str]) -> list[str]:
        """Nodes for ``count`` workers as Ray's own strategy places them (PACK, or STRICT_SPREAD away from
        ``avoid``): a transient group of ``count`` bundles is placed, read and removed again."""
        from ray.util.placement_group import placement_group, placement_group_table

        strategy = "STRICT_SPREAD" if spread else "PACK"
        kwargs = {}
        if spread and avoid:
            kwargs["bundle_label_selector"] = [{RAY_NODE_ID_LABEL: f"!in({','.join(sorted(avoid))})"}] * count
        probe = placement_group([self.bundle() for _ in range(count)], strategy=strategy, **kwargs)
        if not self._wait_created([probe], self.ready_timeout_s):
            self.release([probe])
            raise TimeoutError(f"job {job_id}: Ray could not reserve {count} x {self.gpu_resource} "
                               f"({strategy}) in {self.ready_timeout_s:.0f} s")
        nodes = placement_group_table(probe)["bundles_to_node_id"]
        self.release([probe])
        return [nodes[i] for i in range(count)]

    def reserve(self, job_id: int, generation: int, count: int, placement: Mapping[str, int] | None,
                spread: bool, avoid: set[str] = frozenset()) -> list[Slot]:
        """``count`` new slots: pinned where ``placement`` says (node name -> workers), the rest where Ray's
        strategy puts them. All or nothing: on failure nothing stays reserved."""
        import ray
        from ray.util.placement_group import get_placement_group

        names = [slot_name(job_id, generation, i) for i in range(count)]
        for name in names:                       # a group left by an earlier try of this generation
            try:
                self.release([get_placement_group(name)])
            except ValueError:
                pass
        node_ids = {name: nid for nid, name in self.node_names().items()}     # one GCS query per reservation
        if placement and not set(placement) <= set(node_ids):
            # The loop placed onto a node Ray has lost since the round's view: let Ray find the GPUs among live
            # nodes rather than fail the job, where they are free; else no wait for slots the view made up
            dead = sorted(set(placement) - set(node_ids))
            free = int(ray.available_resources().get(self.gpu_resource, 0))
            if free < count:   # the view counted the dead node's slots: the next round places it on what is left
                raise TimeoutError(f"job {job_id}: placement {dict(placement)} names dead node(s) {dead} and Ray "
                                   f"has {free} x {self.gpu_resource} free of the {count} asked")
            log.warning("job %s: placement %s names dead node(s) %s; letting Ray place it", job_id,
                        dict(placement), dead)
            placement = None
        pins = [node_ids[name] for name, n in sorted((placement or {}).items()) for _ in range(n)]
        if len(pins) > count:
            raise ValueError(f"job {job_id}: placement {dict(placement)} exceeds {count} workers")
        slots: list[Slot] = []
        if pins:
            got = self._pinned(names[:len(pins)], pins, min(self.pin_timeout_s, self.ready_timeout_s))
            if got is None:
                # The named nodes are not free in Ray's eyes (the loop's record and Ray's differ, e.g. after
                # a resize placed by Ray): take the GPUs wherever Ray has them rather than fail the job.
                log.warning("job %s: %s not free on Ray; letting Ray place it", job_id, dict(placement))
            else:
                slots = got
        rest = count - len(slots)
        if rest:
            nodes = self._ray_chooses(job_id, rest, spread, avoid)
            got = self._pinned(names[len(slots):], nodes, self.ready_timeout_s)
            if got is None:
                self.release([s.group for s in slots])
                raise TimeoutError(f"job {job_id}: Ray could not reserve {count} x {self.gpu_resource} "
                                   f"in {self.ready_timeout_s:.0f} s")
            slots += got
        return slots

    def release_named(self, names: list[str]) -> int:
        """Release the groups of these names that still exist (a service's predecessor reserved them); how many."""
        from ray.util.placement_group import get_placement_group

        groups = []
        for name in names:
            try:
                groups.append(get_placement_group(name))
            except (ValueError, KeyError):   # removed already
                pass
        self.release(groups)
        return len(groups)

    def release(self, groups: list, wait_s: float = 2.0) -> None:
        """Remove groups and wait (briefly) until Ray has taken their resources back: a new group asked
        for before that is retried by Ray only after a back-off (~0.5 s), which would stretch a resize."""
        from ray.util.placement_group import placement_group_table, remove_placement_group

        removed = []
        for g in groups:
            try:
                remove_placement_group(g)
                removed.append(g)
            except Exception:  # already gone with its node: nothing left to release
                pass
        deadline = time.monotonic() + wait_s
        while removed and time.monotonic() < deadline:
            try:
                removed = [g for g in removed if placement_group_table(g).get("state") != "REMOVED"]
            except Exception:
                return
            time.sleep(0.005)
