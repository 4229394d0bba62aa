"""Ray backend: run each job's training runtime on a Ray cluster instead of this machine.

Why Ray: it already knows the cluster's nodes and resources, reserves them atomically
(placement groups) and detects dead nodes. dlsched only decides *who gets what*; Ray holds it.

How a job maps onto Ray
* **Reservation** - one placement group per job generation, one bundle per worker
  (``{gpu_resource: 1, "CPU": cpus_per_worker}``). The policy's node map is honoured exactly
  with per-bundle label selectors (``dlsched.io/node`` label, else Ray's ``ray.io/node-id``);
  with no node map the strategy is ``PACK`` (node-local) or ``STRICT_SPREAD`` when asked.
* **Process** - a detached, named Ray actor (``dlsched-job-<id>``) pinned to the node that holds
  most bundles runs the runtime's start command (the job runtime contract in ``dlsched.train``)
  under a small guard process. The guard kills the runtime's whole process group as soon as
  the actor dies, so a lost node never leaves a second writer behind.
* **Resize** - the job's group is swapped for one of the new size (Ray cannot resize a group in
  place), then the runtime is told through ``control.json`` (higher generation -> elastic
  join/leave, no restart).
* **Node loss** - ``poll()`` compares Ray's live nodes with the jobs' bundles and actors; a job
  touching a dead node is stopped, its reservation released and reported ``gone`` (``lost_nodes()``
  names the node), so the loop re-queues it; the next start resumes from the checkpoint.
* **A stale view** - when the loop names a dead node, or nodes Ray cannot give within
  ``pin_timeout_s``, Ray places the bundles itself rather than failing the job.

The job dir must be on storage every node sees (NFS on a real cluster; trivially true for the
fake nodes ``ray.cluster_utils.Cluster`` starts in tests): progress, control and checkpoints
live there, as with the local backend.
"""
from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Sequence

from dlsched.backends.base import Launch, PollResult, atomic_write_json, read_status, runtime_command, write_control
from dlsched.errors import UserError
from dlsched.policy.base import NodeView

DEFAULT_RUNTIME = [sys.executable, "-m", "dlsched.train.run"]
_SRC = str(Path(__file__).resolve().parents[2])   # .../src, so a checkout works without installing
NODE_LABEL = "dlsched.io/node"          # `ray start --labels "dlsched.io/node=gpu-a"` names a node
GPU_TYPE_LABEL = "dlsched.io/gpu-type"
RAY_NODE_ID_LABEL = "ray.io/node-id"    # set by Ray on every node
ACTOR_PREFIX = "dlsched-job-"
NAMESPACE = "dlsched"
log = logging.getLogger("dlsched.backends.ray")


# ----------------------------------------------------------------------------- events

@dataclass(frozen=True)
class NodeLost:
    """``node`` left the cluster; ``job_ids`` were running on it and have been stopped."""

    node: str
    job_ids: tuple[int, ...]


@dataclass
class _RayJob:
    job_id: int
    job_dir: Path
    workers: int
    generation: int
    group: object                     # ray PlacementGroup
    runner: object                    # ray ActorHandle
    runner_node: str                  # Ray node id hex
    bundle_nodes: tuple[str, ...]     # Ray node id hex per bundle
    lost: str | None = None           # name of the dead node that took the job down


# ----------------------------------------------------------------------------- the guard
# Runs as `python -m dlsched.backends.ray --guard -- CMD...` under the Ray actor. It starts CMD in
# its own session and kills that whole process group when told to stop or when its parent (the
# actor) disappears - the case of a lost node, where nobody gets a chance to clean up.

def _guard(cmd: list[str]) -> int:
    parent = os.getppid()
    child = subprocess.Popen(cmd, start_new_session=True)

    def stop(*_):
        _kill_group(child.pid)
        sys.exit(143)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    while True:
        try:
            return child.wait(timeout=0.2)
        except subprocess.TimeoutExpired:
            if os.getppid() != parent:
                stop()


def _kill_group(pgid: int, grace_s: float = 3.0) -> None:
    try:
        os.killpg(pgid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.05)
    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        pass


class _JobRunner:
    """Ray actor body: owns one runtime process (through the guard) on the node it is pinned to."""

    def __init__(self) -> None:
        self.proc: subprocess.Popen | None = None

    def start(self, cmd: list[str], cwd: str | None, env: dict[str, str], log_path: str) -> int:
        Path(log_path).parent.mkdir(parents=True, exist_ok=True)
        full_env = {**os.environ, **env}   # env carries PYTHONPATH: the guard imports dlsched too
        with open(log_path, "ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "dlsched.backends.ray", "--guard", "--", *cmd],
                cwd=cwd, env=full_env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
            )
        return self.proc.pid

    def returncode(self) -> int | None:
        return None if self.proc is None else self.proc.poll()

    def stop(self) -> int | None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()       # the guard forwards to the runtime's process group
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                _kill_group(self.proc.pid, grace_s=0)
                self.proc.wait()
        return None if self.proc is None else self.proc.returncode


# ----------------------------------------------------------------------------- backend

class RayBackend:
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
        self._runner_cls = ray.remote(num_cpus=0, max_restarts=0)(_JobRunner)
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

    # -- reservation --------------------------------------------------------------------------

    def _reserve(self, job_id: int, generation: int, workers: int,
                 placement: Mapping[str, int] | None, spread: bool):
        from ray.util.placement_group import get_placement_group, placement_group, placement_group_table

        bundle = {self.gpu_resource: 1.0}
        if self.cpus_per_worker:
            bundle["CPU"] = self.cpus_per_worker
        kwargs: dict = {"strategy": "STRICT_SPREAD" if spread else "PACK"}
        node_ids = {name: nid for nid, name in self._names().items()}     # one GCS query per reservation
        alive = set(node_ids)
        if placement and not set(placement) <= alive:
            # The loop placed onto a node Ray has lost (its view comes from the cluster declaration):
            # let Ray find the GPUs among live nodes rather than fail the job.
            log.warning("job %s: placement %s names dead node(s) %s; letting Ray place it", job_id,
                        dict(placement), sorted(set(placement) - alive))
            placement = None
        if placement:
            if sum(placement.values()) > workers:
                raise ValueError(f"job {job_id}: placement {dict(placement)} exceeds {workers} workers")
            selectors = []
            for name, count in sorted(placement.items()):
                selectors += [{RAY_NODE_ID_LABEL: node_ids[name]}] * count
            kwargs["bundle_label_selector"] = selectors + [{}] * (workers - len(selectors))   # {}: Ray chooses
        name = _group_name(job_id, generation)
        try:                                   # a group left by an earlier try of this generation
            self._release(get_placement_group(name))
        except ValueError:
            pass
        group = placement_group([dict(bundle) for _ in range(workers)], name=name, lifetime="detached", **kwargs)
        pinned = "bundle_label_selector" in kwargs
        ready, _ = self._ray.wait([group.ready()], timeout=min(self.pin_timeout_s, self.ready_timeout_s) if pinned
                                  else self.ready_timeout_s)
        if not ready and pinned:
            # The named nodes are not free in Ray's eyes (the loop's record and Ray's differ, e.g. after
            # a resize placed by Ray): take the GPUs wherever Ray has them rather than fail the job.
            self._release(group)
            log.warning("job %s: %s not free on Ray; letting Ray place it", job_id, dict(placement))
            return self._reserve(job_id, generation, workers, None, spread)
        if not ready:
            self._release(group)
            raise TimeoutError(f"job {job_id}: Ray could not reserve {workers} x {self.gpu_resource} "
                               f"({kwargs['strategy']}, placement={dict(placement or {})}) in {self.ready_timeout_s:.0f} s")
        nodes = placement_group_table(group)["bundles_to_node_id"]
        return group, tuple(nodes[i] for i in range(workers))

    def _release(self, group, wait_s: float = 2.0) -> None:
        """Remove a group and wait (briefly) until Ray has taken its resources back: a new group asked
        for before that is retried by Ray only after a back-off (~0.5 s), which would stretch a resize."""
        from ray.util.placement_group import placement_group_table, remove_placement_group

        try:
            remove_placement_group(group)
        except Exception:  # already gone with its node: nothing left to release
            return
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            try:
                if placement_group_table(group).get("state") == "REMOVED":
                    return
            except Exception:
                return
            time.sleep(0.005)

    # -- actions (the Backend protocol) -------------------------------------------------------

    def command(self, launch: Launch) -> list[str]:
        return runtime_command(self.runtime, launch)

    def start(self, launch: Launch) -> None:
        """Reserve the job's GPUs and start (or resume, from the job dir's checkpoint) its runtime."""
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        if launch.job_id in self._jobs:
            raise ValueError(f"job {launch.job_id} is already running on Ray")
        job_dir = Path(launch.job_dir)
        job_dir.mkdir(parents=True, exist_ok=True)
        group, bundle_nodes = self._reserve(launch.job_id, launch.generation, launch.num_gpus,
                                            launch.placement, _wants_spread(launch))
        runner_node = Counter(bundle_nodes).most_common(1)[0][0]
        write_control(job_dir, launch.num_gpus, launch.batch_size, launch.generation)
        self._kill_runner_named(_actor_name(launch.job_id))
        runner = self._runner_cls.options(
            name=_actor_name(launch.job_id), lifetime="detached",
            scheduling_strategy=NodeAffinitySchedulingStrategy(runner_node, soft=False),
        ).remote()
        env = {"PYTHONPATH": os.pathsep.join(p for p in (_SRC, os.environ.get("PYTHONPATH")) if p),
               "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1"),
               "DLSCHED_JOB_ID": str(launch.job_id), "DLSCHED_BACKEND": "ray"}
        cmd = self.command(launch)
        try:
            self._ray.get(runner.start.remote(cmd, self.cwd, env, str(job_dir / "output.log")),
                          timeout=self.ready_timeout_s)
        except Exception:
            self._ray.kill(runner, no_restart=True)
            self._release(group)
            raise
        atomic_write_json(job_dir / "launch.json", {"backend": "ray", "actor": _actor_name(launch.job_id),
                                                     "group": _group_name(launch.job_id, launch.generation),
                                                     "cmd": cmd})
        self._jobs[launch.job_id] = _RayJob(launch.job_id, job_dir, launch.num_gpus, launch.generation,
                                            group, runner, runner_node, bundle_nodes)

    def resize(self, job_id: int, job_dir: Path, num_gpus: int, batch_size: int | None, generation: int,
               placement: Mapping[str, int] | None = None, spread: bool = False) -> None:
        """Elastic resize: swap the reservation for a new group, then tell the runtime (``control.json``).

        The old group is released first: old and new usually overlap on a node (grow 1 -> 3 on the
        same node) and Ray cannot resize a group in place. The GPUs stay in use by the running
        workers meanwhile and dlsched is the only allocator, so nothing else can take them. If the
        new group cannot be had, the old shape is reserved again and the error propagates.
        """
        job = self._jobs[job_id]
        if placement is None:
            placement = _stay_put(self.placement(job_id), num_gpus)
        self._release(job.group)
        try:
            group, bundle_nodes = self._reserve(job_id, generation, num_gpus, placement, spread)
        except Exception:
            old = dict(Counter(self._known_alive.get(n, n) for n in job.bundle_nodes))
            job.group, job.bundle_nodes = self._reserve(job_id, generation, job.workers, old, False)
            job.generation = generation
            raise
        write_control(Path(job_dir), num_gpus, batch_size, generation)
        job.group, job.bundle_nodes, job.workers, job.generation = group, bundle_nodes, num_gpus, generation

    def stop(self, job_id: int, job_dir: Path | None = None) -> None:
        """Stop the runtime (its checkpoint stays) and release the reservation."""
        job = self._jobs.pop(job_id, None)
        if job is None:
            return
        try:
            self._ray.get(job.runner.stop.remote(), timeout=15)
        except Exception:  # actor already dead (node lost): its guard has killed the runtime
            pass
        try:
            self._ray.kill(job.runner, no_restart=True)
        except Exception:
            pass
        self._release(job.group)

    # -- observation --------------------------------------------------------------------------

    def _check_nodes(self) -> None:
        """Turn nodes that died since the last look into ``NodeLost`` records, stopping their jobs."""
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
                job.lost = names.get(touched[0], touched[0][:12])   # kept until poll() reports it
                self._stop_lost(job)
        for nid, jobs in sorted(hit.items()):
            self._lost.append(NodeLost(names.get(nid, nid[:12]), tuple(sorted(set(jobs)))))

    def _stop_lost(self, job: _RayJob) -> None:
        try:
            self._ray.kill(job.runner, no_restart=True)
        except Exception:
            pass
        self._release(job.group)

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
        try:
            rc = self._ray.get(job.runner.returncode.remote(), timeout=10)
        except Exception:  # the actor died without its node dying: the runtime is gone with it
            self.stop(job_id)
            return PollResult("gone", "Ray actor of the job died")
        if rc is None:
            return PollResult("running")
        self.stop(job_id)
        status = read_status(job_dir) or {}
        if rc == 0 and status.get("state") == "finished":
            return PollResult("finished")
        return PollResult("failed", status.get("error") or f"exit code {rc}{_tail(job_dir)}")

    def attach(self, job_id: int, job_dir: Path) -> bool:
        """Re-adopt a job started by an earlier service process: its detached actor and group live on."""
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
            generation = int(json.loads((Path(job_dir) / "control.json").read_text())["generation"])
            group = get_placement_group(_group_name(job_id, generation))
            table = placement_group_table(group)
        except (OSError, ValueError, KeyError, TypeError, self._ray.exceptions.RayError):
            return False
        nodes = table["bundles_to_node_id"]
        bundle_nodes = tuple(nodes[i] for i in sorted(nodes))
        runner_node = Counter(bundle_nodes).most_common(1)[0][0] if bundle_nodes else ""
        self._jobs[job_id] = _RayJob(job_id, Path(job_dir), len(bundle_nodes), generation, group, runner,
                                     runner_node, bundle_nodes)
        return True

    def placement(self, job_id: int) -> dict[str, int]:
        """node name -> workers the job holds now (from Ray's own record of its bundles)."""
        names = {**self._known_alive, **self._names()}
        return dict(Counter(names.get(nid, nid[:12]) for nid in self._jobs[job_id].bundle_nodes))

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


def _stay_put(current: Mapping[str, int], workers: int) -> dict[str, int]:
    """Where a resize goes when the caller gives no node map (the loop does not pass one yet): the job
    keeps its nodes. Shrinking gives back GPUs on the nodes where it holds least; growing keeps every
    current GPU and lets Ray choose the extra ones (PACK)."""
    keep, left = {}, workers
    for node, n in sorted(current.items(), key=lambda kv: (-kv[1], kv[0])):
        if left <= 0:
            break
        keep[node] = min(n, left)
        left -= keep[node]
    return keep


def _actor_name(job_id: int) -> str:
    return f"{ACTOR_PREFIX}{job_id}"


def _group_name(job_id: int, generation: int) -> str:
    return f"dlsched-{job_id}-g{generation}"


def _wants_spread(launch: Launch) -> bool:
    """STRICT_SPREAD when the job asks for it (``placement: spread`` in its spec); PACK otherwise."""
    return getattr(launch.spec, "placement", "pack") == "spread" or launch.spec.params.get("placement") == "spread"


def _tail(job_dir: Path, n: int = 1) -> str:
    try:
        lines = [x for x in (Path(job_dir) / "output.log").read_text(errors="replace").splitlines() if x.strip()]
    except OSError:
        return ""
    return (": " + " | ".join(lines[-n:])[:300]) if lines else ""


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

    if argv[:2] == ["--guard", "--"]:
        return _guard(argv[2:])
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
