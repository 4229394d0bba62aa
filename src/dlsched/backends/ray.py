"""Ray backend: run each job's training runtime on a Ray cluster instead of this machine.

Why Ray: it already knows the cluster's nodes and resources, reserves them atomically
(placement groups) and detects dead nodes. dlsched only decides *who gets what*; Ray holds it.

How a job maps onto Ray
* **Reservation** - one bundle per worker (``{gpu_resource: 1, "CPU": cpus_per_worker}``), each
  its own single-bundle placement group (a *slot*, ``dlsched-<job>-g<generation>-w<i>``): Ray
  removes a group only whole, killing every actor in it, so per-worker groups are what lets a
  shrink free a leaver's GPU while the others train on. The policy's node map is honoured exactly
  with label selectors (``dlsched.io/node`` label, else Ray's ``ray.io/node-id``); with no node map
  Ray's own ``PACK`` (node-local) or ``STRICT_SPREAD`` (when asked) chooses the nodes, through a
  transient group of all the new bundles that is placed, read and replaced by the pinned slots.
* **Process** - a detached, named Ray actor (``dlsched-job-<id>``, a ``dlsched.ray.host.ProcessHost``)
  pinned to the node that holds most slots runs the runtime's start command (the job runtime contract:
  docs/runtime.md) under a small guard process that kills the runtime's whole process group as soon as the actor
  dies, so a lost node never leaves a second writer behind. The runtime's coordinator connects to
  the cluster (``DLSCHED_RAY_ADDRESS``) and starts each worker in an actor inside its slot
  (``dlsched.train.launcher.RayLauncher``, reading ``DIR/ray-slots.json``): workers run on the
  nodes, and GPUs, their bundles hold; the TCPStore is reached at the coordinator node's IP.
* **Resize** - a grow reserves slots for the joining workers only, a shrink retires the last
  slots (the runtime keeps its first workers) and releases each once its worker has left
  (``DIR/ray-workers.json``); then ``control.json`` gets the higher generation: elastic
  join/leave, the staying workers never restart.
* **Node loss** - ``poll()`` compares Ray's live nodes with the jobs' slots and actors. A job whose
  runtime (the coordinator) survives keeps running: the dead node's slots are dropped, the runtime
  regroups the surviving workers from the state they hold (no restart, no checkpoint) and ``poll``
  hands the loop the job's new node map (``PollResult.nodes``), so the scheduler re-plans and grows it
  back when capacity returns. A job whose runtime died with the node is stopped, its reservation
  released and reported ``gone`` (``lost_nodes()`` names the node); the loop re-queues it and the next
  start resumes from the checkpoint on the shared job directory.
* **A stale view** - when the loop names a dead node, or nodes Ray cannot give within
  ``pin_timeout_s``, Ray places the bundles itself rather than failing the job.

The job dir must be on storage every node sees, at the same path (NFS on a real cluster; a bind-mounted
directory in the network-namespace cluster of ``tests/multinode``): progress, control, slot
files and checkpoints live there and workers on every node write them.
"""
from __future__ import annotations

import json
import logging
import os
import sys
import time
from collections import Counter
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Mapping, Sequence

from dlsched.backends.base import (Backend, Launch, PollResult, atomic_write_json, output_tail, read_status,
                                   runtime_command, write_control)
from dlsched.paths import pythonpath_with_src
from dlsched.errors import UserError
from dlsched.policy.base import NodeView
from dlsched.ray.host import NAMESPACE, guarded, host_actor
from dlsched.train.launcher import IN_USE_FILE, RAY_ADDRESS_ENV, SLOTS_FILE

DEFAULT_RUNTIME = [sys.executable, "-m", "dlsched.train.run"]
NODE_LABEL = "dlsched.io/node"          # `ray start --labels "dlsched.io/node=gpu-a"` names a node
GPU_TYPE_LABEL = "dlsched.io/gpu-type"
RAY_NODE_ID_LABEL = "ray.io/node-id"    # set by Ray on every node
ACTOR_PREFIX = "dlsched-job-"
STOP_GRACE_S = 10.0                     # the runtime checkpoints its current step before it goes
log = logging.getLogger("dlsched.backends.ray")


# ----------------------------------------------------------------------------- events

@dataclass(frozen=True)
class NodeLost:
    """``node`` left the cluster; ``job_ids`` were running on it and have been stopped."""

    node: str
    job_ids: tuple[int, ...]


@dataclass(frozen=True)
class Slot:
    """One worker's bundle: a single-bundle placement group pinned to ``node`` (a Ray node id).

    One group per worker, not one per job: Ray removes a group only whole and kills every actor in it,
    so a shrink could not free a leaver's GPU without killing the workers that stay."""

    name: str
    node: str
    group: object   # ray PlacementGroup


@dataclass
class _RayJob:
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

    @property
    def workers(self) -> int:
        return len(self.slots)

    @property
    def bundle_nodes(self) -> tuple[str, ...]:
        return tuple(s.node for s in self.slots)


# ----------------------------------------------------------------------------- backend

class RayBackend(Backend):
    """The service's ``Backend`` (``dlsched.backends.base``) on a Ray cluster.

    ``address`` is what ``ray.init`` takes: ``"auto"`` (the cluster ``ray start`` made on this
    machine), ``"ray://host:10001"`` or ``"host:6379"``. ``gpu_resource`` is the Ray resource one
    worker needs: ``"GPU"`` on a real cluster, a custom one (``"gpu_slot"``) for CPU-only tests.
    ``runtime`` is the prefix of the contract's start command, as for the local backend.
    """

    name = "ray"

    def __init__(
        self,
        address: str | None = "auto",
        gpu_resource: str = "GPU",
        cpus_per_worker: float = 0.0,
        runtime: Sequence[str] | None = None,
        cwd: str | Path | None = None,
        ready_timeout_s: float = 60.0,
        pin_timeout_s: float = 3.0,
    ) -> None:
        import ray

        self.gpu_resource = gpu_resource
        self.cpus_per_worker = cpus_per_worker
        self.runtime = list(runtime or DEFAULT_RUNTIME)
        self.cwd = str(cwd or os.getcwd())
        self.ready_timeout_s = ready_timeout_s
        self.pin_timeout_s = pin_timeout_s      # how long a node-pinned reservation may wait before Ray places it
        self.address = address
        if not ray.is_initialized():
            try:
                ray.init(address=address, namespace=NAMESPACE, include_dashboard=False,
                         log_to_driver=False, logging_level="warning")
            except (ConnectionError, RuntimeError, ValueError) as e:
                raise UserError(f"cannot connect to the Ray cluster at --address {address!r}: {e}") from None
        self._ray = ray
        self._runner_cls = host_actor(ray, num_cpus=0)
        self._gcs_address = ray.get_runtime_context().gcs_address   # the runtime's Ray launcher connects here
        self._jobs: dict[int, _RayJob] = {}
        self._known_alive: dict[str, str] = self._names()
        self._lost: list[NodeLost] = []

    # -- cluster view -------------------------------------------------------------------------

    def _alive_nodes(self) -> dict[str, dict]:
        return {n["NodeID"]: n for n in self._ray.nodes() if n["Alive"]}

    @staticmethod
    def _node_name(node: dict) -> str:
        return (node.get("Labels") or {}).get(NODE_LABEL) or node["NodeID"][:12]

    def _names(self) -> dict[str, str]:
        return {nid: self._node_name(n) for nid, n in self._alive_nodes().items()}

    def nodes(self) -> tuple[NodeView, ...]:
        """Live nodes that carry the GPU resource, as a policy sees them (the cluster declaration on Ray)."""
        out = []
        for n in self._alive_nodes().values():
            res = n.get("Resources", {})
            gpus = int(res.get(self.gpu_resource, 0))
            if gpus > 0:
                gpu_type = (n.get("Labels") or {}).get(GPU_TYPE_LABEL, "generic")
                out.append(NodeView(self._node_name(n), gpus, gpu_type, int(res.get("CPU", 0))))
        return tuple(sorted(out, key=lambda v: v.name))

    def addresses(self) -> dict[str, str]:
        """node name -> the IP Ray reaches it at, for the live nodes."""
        return {self._node_name(n): n.get("NodeManagerAddress", "") for n in self._alive_nodes().values()}

    # -- reservation --------------------------------------------------------------------------

    def _bundle(self) -> dict[str, float]:
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
            self._collect_all_retired()
            time.sleep(0.01)
        return True

    def _pinned(self, names: list[str], nodes: list[str], timeout_s: float) -> list[Slot] | None:
        """One single-bundle group per name on the given node; None (and nothing held) if not all fit in time."""
        from ray.util.placement_group import placement_group

        groups = [placement_group([self._bundle()], name=name, lifetime="detached", strategy="PACK",
                                  bundle_label_selector=[{RAY_NODE_ID_LABEL: node}])
                  for name, node in zip(names, nodes)]
        if self._wait_created(groups, timeout_s):
            return [Slot(name, node, g) for name, node, g in zip(names, nodes, groups)]
        self._release_all(groups)
        return None

    def _ray_chooses(self, job_id: int, count: int, spread: bool, avoid: set[str]) -> list[str]:
        """Nodes for ``count`` workers as Ray's own strategy places them (PACK, or STRICT_SPREAD away from
        ``avoid``): a transient group of ``count`` bundles is placed, read and removed again."""
        from ray.util.placement_group import placement_group, placement_group_table

        strategy = "STRICT_SPREAD" if spread else "PACK"
        kwargs = {}
        if spread and avoid:
            kwargs["bundle_label_selector"] = [{RAY_NODE_ID_LABEL: f"!in({','.join(sorted(avoid))})"}] * count
        probe = placement_group([self._bundle() for _ in range(count)], strategy=strategy, **kwargs)
        if not self._wait_created([probe], self.ready_timeout_s):
            self._release_all([probe])
            raise TimeoutError(f"job {job_id}: Ray could not reserve {count} x {self.gpu_resource} "
                               f"({strategy}) in {self.ready_timeout_s:.0f} s")
        nodes = placement_group_table(probe)["bundles_to_node_id"]
        self._release_all([probe])
        return [nodes[i] for i in range(count)]

    def _reserve(self, job_id: int, generation: int, count: int, placement: Mapping[str, int] | None,
                 spread: bool, avoid: set[str] = frozenset()) -> list[Slot]:
        """``count`` new slots: pinned where ``placement`` says (node name -> workers), the rest where Ray's
        strategy puts them. All or nothing: on failure nothing stays reserved."""
        from ray.util.placement_group import get_placement_group

        names = [_slot_name(job_id, generation, i) for i in range(count)]
        for name in names:                       # a group left by an earlier try of this generation
            try:
                self._release_all([get_placement_group(name)])
            except ValueError:
                pass
        node_ids = {name: nid for nid, name in self._names().items()}     # one GCS query per reservation
        if placement and not set(placement) <= set(node_ids):
            # The loop placed onto a node Ray has lost (its view comes from the cluster declaration):
            # let Ray find the GPUs among live nodes rather than fail the job.
            log.warning("job %s: placement %s names dead node(s) %s; letting Ray place it", job_id,
                        dict(placement), sorted(set(placement) - set(node_ids)))
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
                self._release_all([s.group for s in slots])
                raise TimeoutError(f"job {job_id}: Ray could not reserve {count} x {self.gpu_resource} "
                                   f"in {self.ready_timeout_s:.0f} s")
            slots += got
        return slots

    def _release_all(self, groups: list, wait_s: float = 2.0) -> None:
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

    def _collect_retired(self, job: _RayJob) -> None:
        """Release the retired slots no worker occupies any more (``DIR/ray-workers.json``, written by the
        runtime's Ray launcher; a runtime that never writes it occupies none)."""
        if not job.retired:
            return
        try:
            in_use = json.loads((job.job_dir / IN_USE_FILE).read_text()).get("in_use", {})
        except (OSError, ValueError):
            in_use = {}
        free = [s for s in job.retired if s.name not in in_use]
        if free:
            job.retired = [s for s in job.retired if s.name in in_use]
            self._release_all([s.group for s in free])
            self._write_slots(job)

    def _collect_all_retired(self) -> None:
        for job in list(self._jobs.values()):
            self._collect_retired(job)

    def _write_slots(self, job: _RayJob) -> None:
        """``DIR/ray-slots.json``: what the runtime's Ray launcher puts new workers into (before control.json)."""
        atomic_write_json(job.job_dir / SLOTS_FILE, {
            "generation": job.generation, "resources": self._bundle(),
            "slots": [{"group": s.name, "bundle": 0, "node": s.node} for s in job.slots],
            "retired": [s.name for s in job.retired]})

    # -- actions (the Backend protocol) -------------------------------------------------------

    def command(self, launch: Launch) -> list[str]:
        """The runtime's start command; ``placement`` is a hint for the reservation, not a job parameter."""
        params = launch.spec.params
        if "placement" in params:
            spec = launch.spec.model_copy(update={"params": {k: v for k, v in params.items() if k != "placement"}})
            launch = replace(launch, spec=spec)
        return runtime_command(self.runtime, launch)

    def start(self, launch: Launch) -> None:
        """Reserve the job's GPUs and start (or resume, from the job dir's checkpoint) its runtime."""
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        if launch.job_id in self._jobs:
            raise ValueError(f"job {launch.job_id} is already running on Ray")
        job_dir = Path(launch.job_dir)
        job_dir.mkdir(parents=True, exist_ok=True)
        spread = _wants_spread(launch)
        slots = self._reserve(launch.job_id, launch.generation, launch.num_gpus, launch.placement, spread)
        runner_node = Counter(s.node for s in slots).most_common(1)[0][0]
        self._kill_runner_named(_actor_name(launch.job_id))
        runner = self._runner_cls.options(
            name=_actor_name(launch.job_id), lifetime="detached",
            scheduling_strategy=NodeAffinitySchedulingStrategy(runner_node, soft=False),
        ).remote()
        job = _RayJob(launch.job_id, job_dir, launch.generation, slots, runner, runner_node, spread)
        (job_dir / IN_USE_FILE).unlink(missing_ok=True)      # an earlier run's workers are gone
        self._write_slots(job)
        write_control(job_dir, launch.num_gpus, launch.batch_size, launch.generation)
        env = {"PYTHONPATH": pythonpath_with_src(os.environ.get("PYTHONPATH")),
               "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1"),
               "DLSCHED_JOB_ID": str(launch.job_id), "DLSCHED_BACKEND": "ray",
               RAY_ADDRESS_ENV: self._gcs_address}
        cmd = self.command(launch)
        try:
            self._ray.get(runner.launch.remote(guarded(cmd), env, self.cwd, str(job_dir / "output.log")),
                          timeout=self.ready_timeout_s)
        except Exception:
            self._ray.kill(runner, no_restart=True)
            self._release_all([s.group for s in slots])
            raise
        atomic_write_json(job_dir / "launch.json", {"backend": "ray", "actor": _actor_name(launch.job_id),
                                                     "slots": [s.name for s in slots], "cmd": cmd})
        self._jobs[launch.job_id] = job

    def resize(self, launch: Launch) -> None:
        """Elastic resize: new slots for joining workers, retired slots for leaving ones, then ``control.json``.

        The workers that stay keep their slots (and processes): a grow reserves only the newcomers'
        bundles (where ``placement``, the job's whole node map, asks for more than the job holds; the
        rest where Ray's strategy puts them), a shrink keeps the first ``num_gpus`` slots, because the
        runtime keeps its first workers, and releases the others once their workers have left. If the
        new slots cannot be had nothing changes and the error propagates.
        """
        job_id, num_gpus, generation, placement = launch.job_id, launch.num_gpus, launch.generation, launch.placement
        self._check_nodes()      # a node lost since the loop's last look: its slots must not be kept by a shrink
        job = self._jobs[job_id]
        if job.lost:
            return               # its runtime died with a node: poll() reports it gone, the loop re-queues it
        self._collect_retired(job)
        current = job.workers
        if num_gpus < current:
            keep = job.slots[:num_gpus]
            if placement and dict(placement) != self._where(keep):
                log.info("job %s: shrink keeps the runtime's first workers %s, not %s", job_id,
                         self._where(keep), dict(placement))
            job.retired += job.slots[num_gpus:]
            job.slots = keep
        elif num_gpus > current:
            want = None
            if placement:
                want = dict(+(Counter(placement) - Counter(self._where(job.slots))))
                while sum(want.values()) > num_gpus - current:        # more than the newcomers: trim
                    node = max(sorted(want), key=want.get)
                    want[node] -= 1
            spread = _wants_spread(launch) or job.spread
            new = self._reserve(job_id, generation, num_gpus - current, want, spread,
                                avoid=set(job.bundle_nodes) if spread else set())
            job.slots = job.slots + new
        job.generation = generation
        self._write_slots(job)
        write_control(Path(launch.job_dir), num_gpus, launch.batch_size, generation)
        self._collect_retired(job)       # a runtime without Ray workers (or one not started yet) holds none

    def stop(self, job_id: int, job_dir: Path | None = None) -> None:
        """Stop the runtime (its checkpoint stays) and release the reservation."""
        job = self._jobs.pop(job_id, None)
        if job is None:
            return
        try:
            self._ray.get(job.runner.stop.remote(STOP_GRACE_S), timeout=STOP_GRACE_S + 5)
        except Exception:  # actor already dead (node lost): its guard has killed the runtime
            pass
        try:
            self._ray.kill(job.runner, no_restart=True)
        except Exception:
            pass
        self._release_all([s.group for s in job.slots + job.retired])

    # -- observation --------------------------------------------------------------------------

    def _check_nodes(self) -> None:
        """Turn nodes that died since the last look into ``NodeLost`` records. A job whose runtime (the
        coordinator) survives keeps running on its surviving slots - the runtime shrinks onto the workers it
        has left, from the state they hold - and a job whose runtime died is stopped (it resumes from its
        checkpoint when the loop starts it again)."""
        alive = self._names()
        names = {**self._known_alive, **alive}
        dead = {nid for nid in self._known_alive if nid not in alive}
        self._known_alive = alive
        hit: dict[str, list[int]] = {nid: [] for nid in dead}
        for job in list(self._jobs.values()):
            touched = sorted(nid for nid in {job.runner_node, *job.bundle_nodes} if nid not in alive)
            if touched and not job.lost:
                for nid in touched:
                    hit.setdefault(nid, []).append(job.job_id)
                survivors = [s for s in job.slots if s.node in alive]
                if job.runner_node in alive and survivors:
                    self._drop_lost_slots(job, survivors, alive)
                    continue
                job.lost = names.get(touched[0], touched[0][:12])   # kept until poll() reports it
                self._stop_lost(job)
        for nid, jobs in sorted(hit.items()):
            self._lost.append(NodeLost(names.get(nid, nid[:12]), tuple(sorted(set(jobs)))))

    def _drop_lost_slots(self, job: _RayJob, survivors: list[Slot], alive: Mapping[str, str]) -> None:
        """Forget (and remove: Ray would re-place them on another node) the slots on dead nodes."""
        lost = [s for s in job.slots + job.retired if s.node not in alive]
        job.slots = survivors
        job.retired = [s for s in job.retired if s.node in alive]
        job.shrunk = True
        self._release_all([s.group for s in lost], wait_s=0)
        self._write_slots(job)
        log.warning("job %s: lost %d worker slot(s) with their node; %d keep training", job.job_id, len(lost),
                    len(survivors))

    def _stop_lost(self, job: _RayJob) -> None:
        try:
            self._ray.kill(job.runner, no_restart=True)
        except Exception:
            pass
        self._release_all([s.group for s in job.slots + job.retired])

    def lost_nodes(self) -> list[NodeLost]:
        """Nodes that died since the last call, with the jobs they took down (for the loop's events)."""
        self._check_nodes()
        out, self._lost = self._lost, []
        return out

    def poll(self, job_id: int, job_dir: Path) -> PollResult:
        """``running`` / ``finished`` / ``failed``; ``gone`` when its node died (the loop re-places it,
        and the runtime resumes from its checkpoint) or when this service never started it."""
        self._check_nodes()
        job = self._jobs.get(job_id)
        if job is None and not self.attach(job_id, job_dir):
            status = read_status(job_dir) or {}
            return PollResult("finished") if status.get("state") == "finished" else PollResult("gone")
        job = self._jobs[job_id]
        if job.lost:
            self._jobs.pop(job_id)
            return PollResult("gone", f"node {job.lost} lost")
        self._collect_retired(job)
        held = None
        if job.shrunk:
            job.shrunk, held = False, self._where(job.slots)
        try:
            rc = self._ray.get(job.runner.returncode.remote(), timeout=10)
        except Exception:  # the actor died without its node dying: the runtime is gone with it
            self.stop(job_id)
            return PollResult("gone", "Ray actor of the job died")
        if rc is None:
            return PollResult("running", nodes=held)
        self.stop(job_id)
        status = read_status(job_dir) or {}
        if rc == 0 and status.get("state") == "finished":
            return PollResult("finished")
        return PollResult("failed", status.get("error") or f"exit code {rc}{output_tail(job_dir)}")

    def attach(self, job_id: int, job_dir: Path) -> bool:
        """Re-adopt a job started by an earlier service process: its detached actor and slots live on."""
        from ray.util.placement_group import get_placement_group, placement_group_table

        if job_id in self._jobs:
            return True
        try:
            info = json.loads((Path(job_dir) / "launch.json").read_text())
            if info.get("backend") != "ray":
                return False
            runner = self._ray.get_actor(info["actor"], namespace=NAMESPACE)
            if self._ray.get(runner.returncode.remote(), timeout=10) is not None:
                return False
            spec = json.loads((Path(job_dir) / SLOTS_FILE).read_text())

            def slot(name: str) -> Slot:
                group = get_placement_group(name)
                return Slot(name, placement_group_table(group)["bundles_to_node_id"][0], group)

            slots = [slot(s["group"]) for s in spec["slots"]]
            retired = []
            for name in spec.get("retired", []):
                try:
                    retired.append(slot(name))
                except (ValueError, KeyError):
                    pass
        except (OSError, ValueError, KeyError, TypeError, self._ray.exceptions.RayError):
            return False
        runner_node = Counter(s.node for s in slots).most_common(1)[0][0] if slots else ""
        self._jobs[job_id] = _RayJob(job_id, Path(job_dir), int(spec["generation"]), slots, runner, runner_node,
                                     retired=retired)
        return True

    def _where(self, slots: Sequence[Slot]) -> dict[str, int]:
        names = {**self._known_alive, **self._names()}
        return dict(Counter(names.get(s.node, s.node[:12]) for s in slots))

    def placement(self, job_id: int) -> dict[str, int]:
        """node name -> workers the job holds now (from Ray's own record of its slots)."""
        return self._where(self._jobs[job_id].slots)

    def is_running(self, job_id: int) -> bool:
        return job_id in self._jobs and not self._jobs[job_id].lost

    def _kill_runner_named(self, name: str) -> None:
        try:
            self._ray.kill(self._ray.get_actor(name, namespace=NAMESPACE), no_restart=True)
        except ValueError:
            pass

    def shutdown(self) -> None:
        """Leave jobs running (detached actors and groups outlive us; a restarted service attaches)."""
        self._jobs.clear()

    def stop_all(self) -> None:
        for job_id in list(self._jobs):
            self.stop(job_id)


def _actor_name(job_id: int) -> str:
    return f"{ACTOR_PREFIX}{job_id}"


def _slot_name(job_id: int, generation: int, index: int) -> str:
    """The ``index``-th slot reserved for job ``job_id`` in ``generation`` (its start or a grow)."""
    return f"dlsched-{job_id}-g{generation}-w{index}"


def _wants_spread(launch: Launch) -> bool:
    """STRICT_SPREAD when the job asks for it (``placement: spread`` in its spec); PACK otherwise."""
    return getattr(launch.spec, "placement", "pack") == "spread" or launch.spec.params.get("placement") == "spread"


def cluster_spec_yaml(backend: RayBackend, policy: str = "fifo", interval_s: float = 10.0) -> str:
    """A cluster declaration (``ClusterSpec`` YAML) naming exactly the Ray cluster's GPU nodes, so the
    loop's view and Ray's agree from the start."""
    import yaml

    nodes = [{"name": n.name, "gpus": n.num_gpus, "gpu_type": n.gpu_type, "cpus": n.num_cpus} for n in backend.nodes()]
    if not nodes:
        raise UserError(f"the Ray cluster has no node with resource {backend.gpu_resource!r}")
    return yaml.safe_dump({"backend": "ray", "policy": policy, "interval_s": interval_s, "nodes": nodes}, sort_keys=False)


def _main(argv: list[str]) -> int:
    import argparse

    ap = argparse.ArgumentParser(prog="python -m dlsched.backends.ray",
                                 description="Print a dlsched cluster declaration for a running Ray cluster.")
    ap.add_argument("command", choices=["cluster-spec"])
    ap.add_argument("--address", default="auto")
    ap.add_argument("--gpu-resource", default="GPU")
    ap.add_argument("--policy", default="fifo")
    ap.add_argument("--interval-s", type=float, default=10.0)
    a = ap.parse_args(argv)
    try:
        print(cluster_spec_yaml(RayBackend(a.address, a.gpu_resource), a.policy, a.interval_s), end="")
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
