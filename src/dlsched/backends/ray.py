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
  released and reported ``gone`` (the error names the node); the loop re-queues it and the next
  start resumes from the checkpoint on the shared job directory. Ray may call a lost node's actors dead before
  it calls the node dead: a runtime actor's death whose raylet no longer answers waits up to twice Ray's
  node-death detection time, so the loss names its node; on a live raylet it is reported at once.
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
from dataclasses import replace
from pathlib import Path
from typing import Sequence

from dlsched.backends.base import (Backend, Launch, PollResult, atomic_write_json, ended_unwatched, read_regular,
                                   runtime_command, write_control)
from dlsched.backends.coordinator_exit import coordinator_exit
from dlsched.backends.stop_grace import stop_grace
from dlsched.backends.ray_job import RayJob, slot_file_groups
from dlsched.backends.ray_nodes import RayNodes
from dlsched.backends.ray_slots import Slot, SlotReserver
from dlsched.paths import pythonpath_with_src
from dlsched.errors import UserError
from dlsched.policy.base import NodeView
from dlsched.ray.host import NAMESPACE, guarded, host_actor
from dlsched.train.launcher import IN_USE_FILE, RAY_ADDRESS_ENV, SLOTS_FILE

DEFAULT_RUNTIME = [sys.executable, "-m", "dlsched.train.run"]
ACTOR_PREFIX = "dlsched-job-"
STOP_GRACE_S = 10.0                     # the runtime checkpoints its current step before it goes
NODE_DEATH_SLACK = 2.0                  # Ray's health checks run late on a loaded head: wait this many detections
# the runtime actor's first call: a fresh worker process importing Ray on a loaded node, not a reservation's wait
# (a 20 s ready_timeout_s timed out here under make test-stress)
LAUNCH_TIMEOUT_S = 120.0
log = logging.getLogger("dlsched.backends.ray")


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
        self.runtime = list(runtime or DEFAULT_RUNTIME)
        self.cwd = str(cwd or os.getcwd())
        self.address = address
        if not ray.is_initialized():
            try:
                ray.init(address=address, namespace=NAMESPACE, include_dashboard=False,
                         log_to_driver=False, logging_level="warning")
            except (ConnectionError, RuntimeError, ValueError) as e:
                raise UserError(f"cannot connect to the Ray cluster at --address {address!r}: {e}") from None
        self._ray = ray
        self.ray_nodes = RayNodes(ray, gpu_resource)
        self._runner_cls = host_actor(ray, num_cpus=0)
        self._gcs_address = ray.get_runtime_context().gcs_address   # the runtime's Ray launcher connects here
        self._jobs: dict[int, RayJob] = {}
        # while a reservation waits, other jobs' retired slots are released (it may be waiting for them)
        self.reserver = SlotReserver(gpu_resource, cpus_per_worker, ready_timeout_s, pin_timeout_s,
                                     self.ray_nodes.names, self._collect_all_retired)
        self._known_alive: dict[str, str] = self.ray_nodes.names()

    @property
    def ready_timeout_s(self) -> float:
        return self.reserver.ready_timeout_s

    @ready_timeout_s.setter
    def ready_timeout_s(self, seconds: float) -> None:
        self.reserver.ready_timeout_s = seconds

    # -- cluster view -------------------------------------------------------------------------

    def nodes(self) -> tuple[NodeView, ...]:
        return self.ray_nodes.views()

    def addresses(self) -> dict[str, str]:
        return self.ray_nodes.addresses()

    # -- slots --------------------------------------------------------------------------------

    def _collect_all_retired(self) -> None:
        for job in list(self._jobs.values()):
            job.collect_retired(self.reserver)

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
        slots = self.reserver.reserve(launch.job_id, launch.generation, launch.num_gpus, launch.placement, spread)
        runner_node = Counter(s.node for s in slots).most_common(1)[0][0]
        self._kill_runner_named(_actor_name(launch.job_id))
        runner = self._runner_cls.options(
            name=_actor_name(launch.job_id), lifetime="detached",
            scheduling_strategy=NodeAffinitySchedulingStrategy(runner_node, soft=False),
        ).remote()
        job = RayJob(launch.job_id, job_dir, launch.generation, slots, runner, runner_node, spread)
        (job_dir / IN_USE_FILE).unlink(missing_ok=True)      # an earlier run's workers are gone
        job.write_slots(self.reserver.bundle())
        write_control(job_dir, launch.num_gpus, launch.batch_size, launch.generation)
        env = {"PYTHONPATH": pythonpath_with_src(os.environ.get("PYTHONPATH")),
               "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1"),
               "DLSCHED_JOB_ID": str(launch.job_id), "DLSCHED_BACKEND": "ray",
               RAY_ADDRESS_ENV: self._gcs_address}
        cmd = self.command(launch)
        try:
            self._ray.get(runner.launch.remote(guarded(cmd), env, self.cwd, str(job_dir / "output.log")),
                          timeout=max(self.ready_timeout_s, LAUNCH_TIMEOUT_S))
        except Exception:
            self._ray.kill(runner, no_restart=True)
            self.reserver.release([s.group for s in slots])
            raise
        atomic_write_json(job_dir / "launch.json", {"backend": "ray", "actor": _actor_name(launch.job_id),
                                                     "slots": [s.name for s in slots], "cmd": cmd})
        self._jobs[launch.job_id] = job

    def resize(self, launch: Launch) -> None:
        """Elastic resize: new slots for joining workers, retired slots for leaving ones, then ``control.json``.

        The workers that stay keep their slots (and processes): a grow reserves only the newcomers'
        bundles (where ``placement``, the job's whole node map, asks for more than the job holds; the
        rest where Ray's strategy puts them), a shrink keeps the first ``num_gpus`` slots, because the
        runtime keeps its first workers, and releases the others once their workers have left; a move (the same
        count on other nodes) does both at once (``RayJob.move``). If the
        new slots cannot be had nothing changes and the error propagates. That wait is what
        ``launch.hold_given_back`` asks for (a worker runs only inside its reservation): nothing to ``release``.
        """
        job_id, num_gpus, generation, placement = launch.job_id, launch.num_gpus, launch.generation, launch.placement
        self._check_nodes()      # a node lost since the loop's last look: its slots must not be kept by a shrink
        job = self._jobs[job_id]
        if job.lost:
            return               # its runtime died with a node: poll() reports it gone, the loop re-queues it
        job.collect_retired(self.reserver)
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
            new = self.reserver.reserve(job_id, generation, num_gpus - current, want, spread,
                                avoid=set(job.bundle_nodes) if spread else set())
            job.slots = job.slots + new
        elif placement and dict(placement) != self._where(job.slots):
            job.move(placement, generation, self.reserver, self._where)
        job.generation = generation
        job.write_slots(self.reserver.bundle())
        write_control(Path(launch.job_dir), num_gpus, launch.batch_size, generation)
        job.collect_retired(self.reserver)       # a runtime without Ray workers (or one not started yet) holds none

    def stop(self, job_id: int, job_dir: Path | None = None) -> None:
        """Stop the runtime (its checkpoint stays) and release the reservation."""
        job = self._jobs.pop(job_id, None)
        if job is None:
            return
        try:
            grace = STOP_GRACE_S if job_dir is None else stop_grace(Path(job_dir), STOP_GRACE_S)   # a slow step's too
            self._ray.get(job.runner.stop.remote(grace), timeout=grace + 5)
        except Exception:  # actor already dead (node lost): its guard has killed the runtime
            pass
        try:
            self._ray.kill(job.runner, no_restart=True)
        except Exception:
            pass
        self.reserver.release([s.group for s in job.slots + job.retired])

    # -- observation --------------------------------------------------------------------------

    def _check_nodes(self) -> None:
        """Act on nodes that died since the last look. A job whose runtime (the
        coordinator) survives keeps running on its surviving slots - the runtime shrinks onto the workers it
        has left, from the state they hold - and a job whose runtime died is stopped (it resumes from its
        checkpoint when the loop starts it again)."""
        alive = self.ray_nodes.names()
        names = {**self._known_alive, **alive}
        self._known_alive = alive
        for job in list(self._jobs.values()):
            touched = sorted(nid for nid in {job.runner_node, *job.bundle_nodes} if nid not in alive)
            if touched and not job.lost:
                survivors = [s for s in job.slots if s.node in alive]
                if job.runner_node in alive and survivors:
                    job.drop_lost_slots(survivors, alive, self.reserver)
                    continue
                job.lost = names.get(touched[0], touched[0][:12])   # kept until poll() reports it
                self._stop_lost(job)

    def _stop_lost(self, job: RayJob) -> None:
        try:
            self._ray.kill(job.runner, no_restart=True)
        except Exception:
            pass
        self.reserver.release([s.group for s in job.slots + job.retired])

    def poll(self, job_id: int, job_dir: Path) -> PollResult:
        """``running`` / ``finished`` / ``failed``; ``gone`` when its node died (the loop re-places it,
        and the runtime resumes from its checkpoint) or when this service never started it."""
        self._check_nodes()
        job = self._jobs.get(job_id)
        if job is None and not self.attach(job_id, job_dir):   # its runner actor is gone
            return ended_unwatched(job_dir)
        job = self._jobs[job_id]
        if job.lost:
            self._jobs.pop(job_id)
            return PollResult("gone", f"node {job.lost} lost")
        job.collect_retired(self.reserver)
        held = None
        if job.shrunk:
            job.shrunk, held = False, self._where(job.slots)
        try:
            rc = self._ray.get(job.runner.returncode.remote(), timeout=10)
        except self._ray.exceptions.GetTimeoutError:   # a slow answer (a loaded node) is no death: ask next round
            return PollResult("running", nodes=held)
        except self._ray.exceptions.ActorUnavailableError:
            # no death either: Ray lost its connection to the actor (its node may be dying, not yet declared dead:
            # reported as gone then, naming the node, by _check_nodes); read as a death, the loss said only that
            # "the actor died" (tests/backends/test_ray_node_loss.py's node-loss test, once under load)
            return PollResult("running", nodes=held)
        except Exception:  # the actor died: the runtime is gone with it
            if self._node_may_be_dying(job):   # _check_nodes names the node once Ray declares it dead
                return PollResult("running", nodes=held)
            self.stop(job_id)
            return PollResult("gone", "Ray actor of the job died")
        if rc is None:
            return PollResult("running", nodes=held)
        self.stop(job_id)
        return coordinator_exit(rc, job_dir)   # killed, stopped, fenced or out of disk: resumed, as the local one's

    def _node_may_be_dying(self, job: RayJob) -> bool:
        """Ray reports a lost node's actors dead before its health checks declare the node dead. An actor death
        whose raylet no longer answers is held as running for up to Ray's detection time, so that the loss is
        reported naming its node; with a live raylet it is the actor's own death, reported at once."""
        if self.ray_nodes.raylet_answers(job.runner_node):
            return False
        now = time.monotonic()
        job.runner_died_at = job.runner_died_at or now
        return now - job.runner_died_at < NODE_DEATH_SLACK * self.ray_nodes.death_detection_s()

    def attach(self, job_id: int, job_dir: Path) -> bool:
        """Re-adopt a job started by an earlier service process: its detached actor and slots live on. A runtime
        that ended while no service watched is adopted too: ``poll`` reports how it ended and frees its slots,
        which nothing else would (detached groups outlive every service). Where its actor is gone, its groups are
        removed here."""
        from ray.util.placement_group import get_placement_group, placement_group_table

        if job_id in self._jobs:
            return True
        try:
            info = json.loads(read_regular(Path(job_dir) / "launch.json"))
            if info.get("backend") != "ray":
                return False
            try:
                runner = self._ray.get_actor(info["actor"], namespace=NAMESPACE)
                self._ray.get(runner.returncode.remote(), timeout=10)
            except (ValueError, self._ray.exceptions.ActorDiedError):   # no such actor, or it died: free its groups
                if self.reserver.release_named(slot_file_groups(Path(job_dir))):
                    log.warning("job %s: its runner actor is gone; its placement groups removed", job_id)
                return False
            spec = json.loads(read_regular(Path(job_dir) / SLOTS_FILE))

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
        self._jobs[job_id] = RayJob(job_id, Path(job_dir), int(spec["generation"]), slots, runner, runner_node,
                                     retired=retired)
        return True

    def _where(self, slots: Sequence[Slot]) -> dict[str, int]:
        names = {**self._known_alive, **self.ray_nodes.names()}
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


def _wants_spread(launch: Launch) -> bool:
    """STRICT_SPREAD when the job asks for it (``placement: spread`` in its spec); PACK otherwise."""
    return getattr(launch.spec, "placement", "pack") == "spread" or launch.spec.params.get("placement") == "spread"


def cluster_spec_yaml(backend: RayBackend, policy: str = "fifo", interval_s: float = 10.0) -> str:
    """A cluster declaration (``ClusterSpec`` YAML) naming exactly the Ray cluster's GPU nodes, so the
    loop's view and Ray's agree from the start."""
    import yaml

    nodes = [{"name": n.name, "gpus": n.num_gpus, "gpu_type": n.gpu_type, "cpus": n.num_cpus} for n in backend.nodes()]
    if not nodes:   # docs/ray.md §5's fake nodes carry gpu_slot: the bare line did not say --gpu-resource names it
        others = backend.ray_nodes.custom_resources()
        raise UserError(f"the Ray cluster has no node with resource {backend.gpu_resource!r}"
                        + (f"; its nodes have {', '.join(others)}: --gpu-resource names the one a worker needs"
                           if others else ""))
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
