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
* **Resize** - new placement group first (so the GPUs are really there), then the runtime is
  told through ``control.json`` (higher generation -> elastic join/leave, no restart), then the
  old group is released.
* **Node loss** - ``poll()`` compares Ray's live nodes with the jobs' bundles and actors; a job
  touching a dead node is stopped, its reservation released, and reported as ``NodeLost`` so the
  loop re-places it; re-running the start command on the same job dir resumes from checkpoint.

The job dir must be on storage every node sees (NFS on a real cluster; trivially true for the
fake nodes ``ray.cluster_utils.Cluster`` starts in tests): progress, control and checkpoints
live there, as with the local backend.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping, Sequence

from dlsched.errors import UserError
from dlsched.policy.base import NodeView

NODE_LABEL = "dlsched.io/node"          # `ray start --labels='{"dlsched.io/node": "gpu-a"}'` names a node
RAY_NODE_ID_LABEL = "ray.io/node-id"    # set by Ray on every node
ACTOR_PREFIX = "dlsched-job-"
NAMESPACE = "dlsched"


# ----------------------------------------------------------------------------- events

@dataclass(frozen=True)
class JobExited:
    """The runtime of ``job_id`` ended by itself with ``returncode`` (0 = finished)."""

    job_id: str
    returncode: int


@dataclass(frozen=True)
class NodeLost:
    """``node`` left the cluster; ``job_ids`` were running on it and have been stopped."""

    node: str
    job_ids: tuple[str, ...]


# ----------------------------------------------------------------------------- launch spec

@dataclass(frozen=True)
class RuntimeLaunch:
    """Everything the runtime's start command needs (see ``dlsched.train`` contract)."""

    job_dir: str
    entry: str                                   # "examples/mlp.py:make_job"
    batch_size: int | None = None
    params: Mapping[str, object] = field(default_factory=dict)
    cwd: str | None = None                       # where relative entry paths resolve
    env: Mapping[str, str] = field(default_factory=dict)

    def command(self, workers: int, runtime: Sequence[str]) -> list[str]:
        cmd = [*runtime, "--job-dir", self.job_dir, "--entry", self.entry, "--workers", str(workers)]
        if self.batch_size:
            cmd += ["--batch-size", str(self.batch_size)]
        for k, v in sorted(self.params.items()):
            cmd += ["--param", f"{k}={v}"]
        return cmd


@dataclass
class _RayJob:
    job_id: str
    launch: RuntimeLaunch
    workers: int
    generation: int
    group: object                     # ray PlacementGroup
    runner: object                    # ray ActorHandle
    runner_node: str                  # Ray node id hex
    bundle_nodes: tuple[str, ...]     # Ray node id hex per bundle


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
        full_env = {**os.environ, **env}
        # The guard must import dlsched from the same sources as the service.
        full_env["PYTHONPATH"] = os.pathsep.join(p for p in (env.get("PYTHONPATH"), os.environ.get("PYTHONPATH")) if p)
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

def write_control(job_dir: str | Path, workers: int, batch_size: int | None, generation: int) -> None:
    """Atomically (temp + rename) tell the runtime its new size - the contract's control file."""
    path = Path(job_dir) / "control.json"
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps({"workers": workers, "batch_size": batch_size, "generation": generation}))
    os.replace(tmp, path)


class RayBackend:
    """Start, resize, stop and watch jobs on a Ray cluster (``address=None`` starts nothing: it
    connects to the cluster Ray finds, e.g. ``RAY_ADDRESS`` or a local ``ray start --head``)."""

    name = "ray"

    def __init__(
        self,
        address: str | None = "auto",
        gpu_resource: str = "GPU",
        cpus_per_worker: float = 0.0,
        runtime: Sequence[str] | None = None,
        ready_timeout_s: float = 60.0,
        pythonpath: str | None = None,
    ) -> None:
        import ray

        self.gpu_resource = gpu_resource
        self.cpus_per_worker = cpus_per_worker
        self.runtime = list(runtime or [sys.executable, "-m", "dlsched.train.run"])
        self.ready_timeout_s = ready_timeout_s
        src = str(Path(__file__).resolve().parents[2])
        self.pythonpath = pythonpath or os.pathsep.join(p for p in (src, os.environ.get("PYTHONPATH")) if p)
        if not ray.is_initialized():
            try:
                ray.init(address=address, namespace=NAMESPACE, include_dashboard=False,
                         log_to_driver=False, logging_level="warning")
            except (ConnectionError, RuntimeError, ValueError) as e:
                raise UserError(f"cannot connect to the Ray cluster at --address {address!r}: {e}") from None
        self._ray = ray
        self._runner_cls = ray.remote(num_cpus=0, max_restarts=0)(_JobRunner)
        self._jobs: dict[str, _RayJob] = {}
        self._known_alive: dict[str, str] = self._names()

    # -- cluster view -------------------------------------------------------------------------

    def _alive_nodes(self) -> dict[str, dict]:
        return {n["NodeID"]: n for n in self._ray.nodes() if n["Alive"]}

    def _node_name(self, node: dict) -> str:
        return (node.get("Labels") or {}).get(NODE_LABEL) or node["NodeID"][:12]

    def _names(self) -> dict[str, str]:
        return {nid: self._node_name(n) for nid, n in self._alive_nodes().items()}

    def _node_id(self, name: str) -> str:
        for nid, n in self._alive_nodes().items():
            if self._node_name(n) == name:
                return nid
        raise KeyError(f"no live Ray node named {name!r}")

    def nodes(self) -> tuple[NodeView, ...]:
        """Live nodes that carry the GPU resource, as the policy sees them."""
        out = []
        for n in self._alive_nodes().values():
            res = n.get("Resources", {})
            gpus = int(res.get(self.gpu_resource, 0))
            if gpus > 0:
                gpu_type = (n.get("Labels") or {}).get("dlsched.io/gpu-type", "generic")
                out.append(NodeView(self._node_name(n), gpus, gpu_type, int(res.get("CPU", 0))))
        return tuple(sorted(out, key=lambda v: v.name))

    # -- reservation --------------------------------------------------------------------------

    def _reserve(self, job_id: str, generation: int, workers: int,
                 placement: Mapping[str, int] | None, spread: bool):
        from ray.util.placement_group import placement_group, placement_group_table, remove_placement_group

        bundle = {self.gpu_resource: 1.0}
        if self.cpus_per_worker:
            bundle["CPU"] = self.cpus_per_worker
        kwargs: dict = {"strategy": "STRICT_SPREAD" if spread else "PACK"}
        if placement:
            if sum(placement.values()) != workers:
                raise ValueError(f"job {job_id}: placement {dict(placement)} does not add up to {workers} workers")
            selectors = []
            for name, count in sorted(placement.items()):
                sel = {RAY_NODE_ID_LABEL: self._node_id(name)}
                selectors += [sel] * count
            kwargs["bundle_label_selector"] = selectors
        group = placement_group([dict(bundle) for _ in range(workers)],
                                name=f"dlsched-{job_id}-g{generation}", lifetime="detached", **kwargs)
        ready, _ = self._ray.wait([group.ready()], timeout=self.ready_timeout_s)
        if not ready:
            remove_placement_group(group)
            raise TimeoutError(f"job {job_id}: Ray could not reserve {workers} x {self.gpu_resource} "
                               f"({kwargs['strategy']}, placement={dict(placement or {})}) in {self.ready_timeout_s:.0f} s")
        nodes = placement_group_table(group)["bundles_to_node_id"]
        return group, tuple(nodes[i] for i in range(workers))

    def _release(self, group) -> None:
        from ray.util.placement_group import remove_placement_group

        try:
            remove_placement_group(group)
        except Exception:  # already gone with its node: nothing left to release
            pass

    # -- actions ------------------------------------------------------------------------------

    def start(self, job_id: str, launch: RuntimeLaunch, workers: int,
              placement: Mapping[str, int] | None = None, spread: bool = False) -> None:
        """Reserve ``workers`` GPUs and start (or resume, if the job dir has a checkpoint) the runtime."""
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        if job_id in self._jobs:
            raise ValueError(f"job {job_id} is already running on Ray")
        generation = _read_generation(launch.job_dir) + 1
        group, bundle_nodes = self._reserve(job_id, generation, workers, placement, spread)
        runner_node = Counter(bundle_nodes).most_common(1)[0][0]
        write_control(launch.job_dir, workers, launch.batch_size, generation)
        runner = self._runner_cls.options(
            name=f"{ACTOR_PREFIX}{job_id}", lifetime="detached", get_if_exists=False,
            scheduling_strategy=NodeAffinitySchedulingStrategy(runner_node, soft=False),
        ).remote()
        env = {**launch.env, "PYTHONPATH": self.pythonpath, "DLSCHED_BACKEND": "ray"}
        cmd = launch.command(workers, self.runtime)
        try:
            self._ray.get(runner.start.remote(cmd, launch.cwd, env, str(Path(launch.job_dir) / "runtime.log")),
                          timeout=self.ready_timeout_s)
        except Exception:
            self._ray.kill(runner)
            self._release(group)
            raise
        self._jobs[job_id] = _RayJob(job_id, launch, workers, generation, group, runner, runner_node, bundle_nodes)

    def resize(self, job_id: str, workers: int, placement: Mapping[str, int] | None = None,
               batch_size: int | None = None, spread: bool = False) -> None:
        """Elastic resize: swap the reservation for a new group, then tell the runtime.

        The old group is released first: old and new usually overlap on a node (grow 1 -> 3 on the
        same node), and Ray cannot resize a group in place. The GPUs stay in use by the running
        workers meanwhile and dlsched is the only allocator, so nothing else can take them. If the
        new group cannot be had, the old shape is reserved again and the error propagates.
        """
        job = self._jobs[job_id]
        generation = job.generation + 1
        self._release(job.group)
        try:
            group, bundle_nodes = self._reserve(job_id, generation, workers, placement, spread)
        except Exception:
            old = dict(Counter(self._known_alive.get(n, n) for n in job.bundle_nodes))
            job.group, job.bundle_nodes = self._reserve(job_id, generation, job.workers, old, False)
            job.generation = generation
            raise
        bsz = batch_size if batch_size is not None else job.launch.batch_size
        write_control(job.launch.job_dir, workers, bsz, generation)
        job.group, job.bundle_nodes, job.workers, job.generation = group, bundle_nodes, workers, generation

    def stop(self, job_id: str) -> None:
        """Stop the runtime (it keeps its checkpoint) and release the reservation."""
        job = self._jobs.pop(job_id, None)
        if job is None:
            return
        try:
            self._ray.get(job.runner.stop.remote(), timeout=15)
        except Exception:  # actor already dead (node lost): its guard has killed the runtime
            pass
        self._ray.kill(job.runner, no_restart=True)
        self._release(job.group)

    def is_running(self, job_id: str) -> bool:
        return job_id in self._jobs

    def placement(self, job_id: str) -> dict[str, int]:
        """node name -> workers the job holds now (from Ray's own record of the bundles)."""
        names = {**self._known_alive, **self._names()}
        return dict(Counter(names.get(nid, nid[:12]) for nid in self._jobs[job_id].bundle_nodes))

    def poll(self) -> list[JobExited | NodeLost]:
        """Report jobs that ended and nodes that died since the last call (stopping their jobs)."""
        events: list[JobExited | NodeLost] = []
        alive = self._names()
        names = {**self._known_alive, **alive}
        lost_jobs: dict[str, list[str]] = {nid: [] for nid in self._known_alive if nid not in alive}
        self._known_alive = alive
        for job in list(self._jobs.values()):
            touched = [nid for nid in {job.runner_node, *job.bundle_nodes} if nid not in alive]
            if touched:
                for nid in touched:
                    lost_jobs.setdefault(nid, []).append(job.job_id)
                self.stop(job.job_id)
                continue
            try:
                rc = self._ray.get(job.runner.returncode.remote(), timeout=10)
            except Exception:  # the actor died without its node dying: the runtime is gone too
                rc = -1
            if rc is not None:
                self.stop(job.job_id)
                events.append(JobExited(job.job_id, rc))
        for nid, jobs in lost_jobs.items():
            events.append(NodeLost(names.get(nid, nid[:12]), tuple(sorted(set(jobs)))))
        return events

    def close(self) -> None:
        """Stop every job this backend started and disconnect."""
        for job_id in list(self._jobs):
            self.stop(job_id)


def _read_generation(job_dir: str | Path) -> int:
    path = Path(job_dir) / "control.json"
    try:
        return int(json.loads(path.read_text()).get("generation", 0))
    except FileNotFoundError:
        Path(job_dir).mkdir(parents=True, exist_ok=True)
        return 0
    except (ValueError, AttributeError):
        raise UserError(f"{path}: field 'generation' is not an integer") from None


if __name__ == "__main__":
    if len(sys.argv) >= 3 and sys.argv[1] == "--guard" and sys.argv[2] == "--":
        sys.exit(_guard(sys.argv[3:]))
    sys.exit("usage: python -m dlsched.backends.ray --guard -- CMD ...")
