"""Where a job's worker processes run: the seam between the coordinator and the machines.

The coordinator needs little of a worker process: start it with an argv, a log file and the
``CUDA_VISIBLE_DEVICES`` the coordinator chose for it (``dlsched.train.devices``), then
``poll``/``returncode``/``wait``/``kill`` it (a ``WorkerHandle``), and a host name its workers reach
its TCPStore at (``Launcher.store_host``). Two launchers:

* ``LocalLauncher`` - every worker forked on this machine from a forkserver that has torch loaded
  (~0.1 s per worker instead of a fresh interpreter's seconds). The default.
* ``RayLauncher`` - each worker in its own Ray actor, scheduled into one placement-group bundle that
  the Ray backend (``dlsched.backends.ray``) reserved for this job, so the workers really run on the
  nodes (and GPUs) the scheduler chose; the store is at the coordinator node's IP. Chosen when the
  runtime's environment carries ``DLSCHED_RAY_ADDRESS`` (the backend sets it).

The Ray hand-over, per job directory ``DIR``:

* ``DIR/ray-slots.json`` (backend -> runtime, written before ``control.json`` of the same generation):
  ``{"generation": k, "resources": {"GPU": 1, ...}, "slots": [{"group": NAME, "bundle": 0, "node": ID}, ...]}``,
  the job's bundles in the order of its workers. A new worker takes the first slot no live worker of
  this coordinator occupies.
* ``DIR/ray-workers.json`` (runtime -> backend): the slots live workers still occupy,
  ``{"in_use": {GROUP: {"worker_id", "node"}}}``. A shrink's retired slots are released by the backend
  only once absent from it, so a leaving worker is never killed under the group it still trains in.
* The process a bundle runs is ``dlsched.train.worker`` (an all-reduce worker) or, for a parameter-server
  job, ``dlsched.train.ps_process`` (one server or worker rank; ``--worker-id`` is its rank).
* ``DIR/logs/worker-<id>.host.json`` (written by the worker process itself when launched by Ray):
  ``{"worker_id", "pid", "ppid", "ray_node_id", "node_ip", "hostname", "cuda_visible_devices"}``.
"""
from __future__ import annotations

import json
import math
import multiprocessing
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Mapping, Protocol

from dlsched.errors import UserError
from dlsched.paths import pythonpath_with_src
from dlsched.ray.host import NAMESPACE, RAY_NODE_ENV, RAY_NODE_IP_ENV, actor_pid, exit_with, host_actor
from dlsched.train.forking import preload_in_forkserver, preload_nothing_in_forkserver
from dlsched.train.protocol import WorkerEnv
from dlsched.train.script import SCRIPT_WORKER_MODULE, forkable_script, ignore_sigterm, resolve_command, run_forked

RAY_ADDRESS_ENV = "DLSCHED_RAY_ADDRESS"   # set by the Ray backend in the runtime's environment
GPU_PER_WORKER_ENV = "DLSCHED_GPU_PER_WORKER"  # "1": this worker owns exactly the GPU(s) it sees (cuda:0)
SLOTS_FILE = "ray-slots.json"
IN_USE_FILE = "ray-workers.json"
ALIVE_TTL_S = 1.0

_FORKSERVER = multiprocessing.get_context("forkserver")
# torch and what a worker imports lazily, imported once, not once per worker
preload_in_forkserver("dlsched.train.worker")


class WorkerHandle(Protocol):
    """One started worker process, wherever it runs."""

    pid: int

    def poll(self) -> int | None: ...

    @property
    def returncode(self) -> int | None: ...

    def wait(self) -> int: ...

    def kill(self) -> None: ...


class Launcher(Protocol):
    store_host: str   # where the workers reach the coordinator's TCPStore
    # a dead worker's slot may have died with it (its node was lost): the group shrinks onto the survivors, then
    # grows back into the slots room() still counts (the scheduler re-plans the others); where the slot always
    # stays (this machine) the group restarts whole from the checkpoint
    shrink_on_loss: bool

    def start(self, argv: list[str], log_path: Path, visible: str) -> WorkerHandle: ...

    def revoked(self, handles: Mapping[int, WorkerHandle]) -> list[int]:
        """Those workers whose reservation is no longer the job's (the backend moved it): they must leave."""
        ...

    def room(self, count: int) -> int:
        """How many of ``count`` workers it can start now (a restart after a loss)."""
        ...


class NoFreeSlot(UserError):
    """Every slot the backend granted the job holds a worker (or went with its node): none for another one."""


def default_launcher() -> str:
    """``"ray"`` when started by the Ray backend (it exports the cluster address), else ``"local"``."""
    return "ray" if os.environ.get(RAY_ADDRESS_ENV) else "local"


def make_launcher(kind: str, job_dir: Path, command: list[str] | None = None) -> Launcher:
    """``command``: the user's script (``dlsched.torch``) is what each worker runs, else ``dlsched.train.worker``."""
    if kind == "local":
        return LocalLauncher() if command is None else ScriptLauncher(command)
    if kind == "ray":
        address = os.environ.get(RAY_ADDRESS_ENV)
        if not address:
            raise UserError(f"launcher 'ray' needs the Ray cluster address in ${RAY_ADDRESS_ENV}")
        return RayLauncher(Path(job_dir), address) if command is None else RayScriptLauncher(Path(job_dir), address,
                                                                                            command)
    raise UserError(f"launcher {kind!r}: expected 'local' or 'ray'")


# ----------------------------------------------------------------------------- local (forkserver)

def _worker_main(argv: list[str], log_path: str, visible: str) -> None:
    # before CUDA's first use in this process (the forkserver imported torch, never initialised CUDA)
    os.environ["CUDA_VISIBLE_DEVICES"] = visible
    fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    from dlsched.train.worker import main

    main(argv)


class WorkerProcess:
    """A worker forked from a forkserver that has torch loaded: starts in ~0.1 s instead of a fresh interpreter's seconds."""

    def __init__(self, argv: list[str], log_path: Path, visible, target=_worker_main):
        """``visible``: CUDA_VISIBLE_DEVICES, or a script's whole environment (``script.run_forked``)."""
        self._p = _FORKSERVER.Process(target=target, args=(argv, str(log_path), visible), daemon=False)
        self._p.start()
        self.pid = self._p.pid

    def poll(self) -> int | None:
        return self._p.exitcode

    @property
    def returncode(self) -> int | None:
        return self._p.exitcode

    def wait(self) -> int:
        self._p.join()
        return self._p.exitcode

    def kill(self) -> None:
        self._p.kill()


class OnThisMachine:
    """What every launcher of workers on this machine answers alike."""

    store_host = "127.0.0.1"
    shrink_on_loss = False

    def revoked(self, handles: Mapping[int, WorkerHandle]) -> list[int]:
        return []     # this machine's GPUs: the job's device list says which (devices.keepers)

    def room(self, count: int) -> int:
        return count  # a worker's GPU outlives its process here


class LocalLauncher(OnThisMachine):
    """Every worker on this machine, forked from the (SIGTERM-shielded) forkserver the coordinator starts."""

    def start(self, argv: list[str], log_path: Path, visible: str) -> WorkerProcess:
        return WorkerProcess(argv, log_path, visible)


class ScriptLauncher(OnThisMachine):
    """The user's script as each worker on this machine: ``python SCRIPT.py ...`` forked from the forkserver
    (``script.run_forked``), any other command a subprocess (the Popen is itself a ``WorkerHandle``)."""

    def __init__(self, command: list[str]):
        self.command = resolve_command(command)
        self.forked = forkable_script(self.command) is not None

    def start(self, worker: WorkerEnv, log_path: Path, visible: str) -> WorkerProcess | subprocess.Popen:
        if self.forked:
            return WorkerProcess(self.command, log_path, {**worker.as_env(), "CUDA_VISIBLE_DEVICES": visible,
                                 "PYTHONPATH": pythonpath_with_src(os.environ.get("PYTHONPATH"))}, target=run_forked)
        env = {**os.environ, **worker.as_env(), "CUDA_VISIBLE_DEVICES": visible,
               "PYTHONPATH": pythonpath_with_src(os.environ.get("PYTHONPATH"))}
        with open(log_path, "ab") as log:
            return subprocess.Popen(self.command, env=env, stdout=log, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, preexec_fn=ignore_sigterm)


# ----------------------------------------------------------------------------- Ray (one actor per bundle)

def pin_collectives_to(ip: str | None) -> None:
    """gloo and NCCL connect their peers at the interface holding this node's Ray IP: left to themselves they
    take the address the host name resolves to, often 127.0.1.1, which peers on other hosts cannot reach.
    An operator's own ``GLOO_SOCKET_IFNAME`` / ``NCCL_SOCKET_IFNAME`` win."""
    import psutil

    if not ip:
        return
    iface = next((name for name, addrs in psutil.net_if_addrs().items() if any(a.address == ip for a in addrs)), None)
    if iface is not None:
        os.environ.setdefault("GLOO_SOCKET_IFNAME", iface)
        os.environ.setdefault("NCCL_SOCKET_IFNAME", iface)


WORKER_MODULE = "dlsched.train.worker"


def _worker_under_ray(argv: list[str], module: str = WORKER_MODULE) -> None:
    """Entry of a process started in a ``ProcessHost`` actor: records where it runs, then runs ``module.main``.

    It ends when its actor (the parent) disappears - the actor was killed or its node lost - so no worker
    outlives the bundle that holds its GPU."""
    import argparse

    parent = actor_pid()
    exit_with(parent)
    pin_collectives_to(os.environ.get(RAY_NODE_IP_ENV))
    ap = argparse.ArgumentParser(add_help=False)
    ap.add_argument("--job-dir", required=True)
    ap.add_argument("--worker-id", type=int, required=True)
    known, _ = ap.parse_known_args(argv)
    from dlsched.train.files import atomic_write_json

    atomic_write_json(Path(known.job_dir) / "logs" / f"worker-{known.worker_id}.host.json", {
        "worker_id": known.worker_id, "pid": os.getpid(), "ppid": parent,
        "ray_node_id": os.environ.get(RAY_NODE_ENV), "node_ip": os.environ.get(RAY_NODE_IP_ENV),
        "hostname": socket.gethostname(),
        "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES")})
    import importlib

    importlib.import_module(module).main(argv)


class RayWorker:
    """Handle on a worker running in a ``ProcessHost`` actor; ``poll`` costs no round trip (a local
    readiness check of the actor's ``wait`` result)."""

    def __init__(self, launcher: "RayLauncher", actor, slot: str, node: str, wid: int, info_ref, exit_ref):
        self._launcher, self._actor, self.slot, self.node, self.wid = launcher, actor, slot, node, wid
        self._info_ref, self._exit_ref = info_ref, exit_ref
        self._info: dict | None = None
        self._rc: int | None = None
        self._killed = False

    @property
    def info(self) -> dict:
        """``{"pid", "node_id", "gpus"}`` of the worker (waits for its actor to start it)."""
        if self._info is None:
            import ray

            try:
                self._info = ray.get(self._info_ref)
            except ray.exceptions.RayError:
                self._info = {"pid": -1, "node_id": None, "gpus": []}
        return self._info

    @property
    def pid(self) -> int:
        return self.info["pid"]

    def _ended(self, rc: int) -> int:
        if self._rc is None:
            self._rc = rc
            self._launcher._vacate(self)
        return self._rc

    def _collect(self) -> int:
        import ray

        try:
            return self._ended(ray.get(self._exit_ref))
        except ray.exceptions.RayError:   # the actor died (killed, node lost, group removed)
            if not self._killed:   # not killed by the runtime: its bundle may be gone with its node
                self._launcher.died[self.slot] = self.node
            return self._ended(-signal.SIGKILL)

    def poll(self) -> int | None:
        if self._rc is None:
            import ray

            ready, _ = ray.wait([self._exit_ref], timeout=0)
            if ready:
                self._collect()
        return self._rc

    @property
    def returncode(self) -> int | None:
        return self._rc

    def wait(self) -> int:
        return self._rc if self._rc is not None else self._collect()

    def kill(self) -> None:
        import ray

        self._killed = True
        started, _ = ray.wait([self._info_ref], timeout=0)
        if started:        # kill the worker's process group now; an actor not started yet has none
            try:
                ray.get(self._actor.stop.remote(), timeout=10)
            except ray.exceptions.RayError:
                pass       # its watchdog ends the worker once the actor is gone
        ray.kill(self._actor, no_restart=True)   # frees the bundle
        self._collect()


class RayLauncher:
    """Each worker in a Ray actor inside one bundle the backend reserved for this job (``DIR/ray-slots.json``).

    The coordinator becomes a Ray driver; worker actors are owned by it, so they die with it."""

    shrink_on_loss = True

    def __init__(self, job_dir: Path, address: str):
        import ray

        self.job_dir = Path(job_dir)
        # the node this coordinator runs on, as its host actor saw it: a driver left to guess takes the address
        # its host name resolves to, or another node's, where no route leaves the machine
        node_ip = os.environ.get(RAY_NODE_IP_ENV) or None
        if not ray.is_initialized():
            ray.init(address=address, namespace=NAMESPACE, log_to_driver=False, logging_level="warning",
                     _node_ip_address=node_ip)
        self._ray = ray
        self._host_cls = host_actor(ray)
        self.store_host = node_ip or ray.util.get_node_ip_address()   # the TCPStore listens on every interface
        self._occupied: dict[str, RayWorker] = {}
        self.died: dict[str, str] = {}   # bundle -> its node, for the workers whose actor died under them
        self._alive: set[str] = set()
        self._alive_at = -math.inf
        # No worker is forked here: keep the forkserver the coordinator starts from loading torch for nothing.
        preload_nothing_in_forkserver()

    def _slots(self) -> dict:
        path = self.job_dir / SLOTS_FILE
        try:
            return json.loads(path.read_text())
        except (OSError, ValueError) as e:
            raise RuntimeError(f"{path}: the Ray backend's slot list is unreadable ({e})") from None

    def start(self, argv: list[str], log_path: Path, visible: str, module: str = WORKER_MODULE,
              node: str | None = None) -> RayWorker:
        """``visible`` is not used: a worker sees the GPU Ray gave its bundle (Ray sets CUDA_VISIBLE_DEVICES
        for an actor with ``num_gpus``); the coordinator, which holds no GPU itself, cannot know it.
        ``module`` is what the process runs (its ``main(argv)``); ``node`` (a Ray node id): a bundle on it."""
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy
        from ray.util.placement_group import get_placement_group

        spec = self._slots()
        lost = self.lost(spec["slots"])
        free = [s for s in spec["slots"] if s["group"] not in self._occupied and s["group"] not in lost
                and node in (None, s.get("node"))]
        if not free:
            raise NoFreeSlot(f"{self.job_dir / SLOTS_FILE}: no free bundle for another worker (generation "
                            f"{spec['generation']} has {len(spec['slots'])}, all in use): with Ray every worker, "
                            f"spares included (--standby), needs a bundle the scheduler granted")
        slot = free[0]
        try:
            group = get_placement_group(slot["group"])
        except ValueError:   # removed by the backend (its node lost) before it rewrote the slot list
            raise NoFreeSlot(f"{self.job_dir / SLOTS_FILE}: bundle {slot['group']} is gone (its node was lost)") \
                from None
        resources = dict(spec["resources"])
        gpus = resources.pop("GPU", 0)
        cpus = resources.pop("CPU", 0)
        actor = self._host_cls.options(
            num_cpus=cpus, num_gpus=gpus, resources=resources,
            scheduling_strategy=PlacementGroupSchedulingStrategy(
                group, placement_group_bundle_index=slot["bundle"]),
        ).remote()
        env = {k: v for k, v in os.environ.items() if k.startswith("DLSCHED_") and k != RAY_ADDRESS_ENV}
        env["PYTHONPATH"] = pythonpath_with_src(os.environ.get("PYTHONPATH"))
        env["OMP_NUM_THREADS"] = os.environ.get("OMP_NUM_THREADS", "1")
        if gpus:
            env[GPU_PER_WORKER_ENV] = "1"
        wid = int(argv[argv.index("--worker-id") + 1])
        info_ref = actor.launch.remote([sys.executable, "-m", "dlsched.train.launcher", "--ray-worker", module, *argv],
                                       env, os.getcwd(), str(log_path))
        handle = RayWorker(self, actor, slot["group"], slot.get("node", ""), wid, info_ref, actor.wait.remote())
        self._occupied[slot["group"]] = handle
        self.died.pop(slot["group"], None)
        self._publish()
        return handle

    def revoked(self, handles: Mapping[int, RayWorker]) -> list[int]:
        """Workers whose bundle left the slot list (a move: the backend reserved their successors elsewhere) or went
        with its node (a worker started there would wait for it for good: bundles are pinned to their node)."""
        slots = self._slots()["slots"]
        granted, lost = {s["group"] for s in slots}, self.lost(slots)
        return [w for w, h in handles.items() if h.slot not in granted or h.slot in lost]

    def room(self, count: int) -> int:
        slots = self._slots()["slots"]
        lost = self.lost(slots)
        return min(count, sum(s["group"] not in lost for s in slots))

    def lost(self, slots: list[dict]) -> set[str]:
        """The bundles gone with their node (the slot's node, or the one a worker's actor died on, is one Ray no longer
        has): never reused. An actor that died on a live node (the OOM killer, a crash) leaves its bundle the job's.
        The slot's own node counts too: a worker this runtime killed after its peers lost it (its raylet killed, Ray
        not yet aware) recorded no death. ``slots``: the slot list as just read (one read per caller)."""
        alive = self._alive_nodes()
        return ({s["group"] for s in slots if s.get("node") and s["node"] not in alive}
                | {group for group, node in self.died.items() if node not in alive})

    def _alive_nodes(self) -> set[str]:
        """Ray's live node ids, asked of the GCS at most once a second (a resize's wait polls every 20 ms)."""
        now = time.monotonic()
        if now - self._alive_at > ALIVE_TTL_S:
            self._alive = {n["NodeID"] for n in self._ray.nodes() if n["Alive"]}
            self._alive_at = now
        return self._alive

    def _vacate(self, handle: RayWorker) -> None:
        if self._occupied.get(handle.slot) is handle:
            del self._occupied[handle.slot]
            self._publish()

    def _publish(self) -> None:
        from dlsched.train.files import atomic_write_json

        atomic_write_json(self.job_dir / IN_USE_FILE, {"in_use": {
            g: {"worker_id": h.wid} for g, h in sorted(self._occupied.items())}})


class RayScriptLauncher(RayLauncher):
    """The user's script as each worker, in its own bundle: ``dlsched.train.script.main`` starts the command there
    with the worker's environment (on this machine ``ScriptLauncher`` does it)."""

    def __init__(self, job_dir: Path, address: str, command: list[str]):
        super().__init__(job_dir, address)
        self.command = list(command)   # resolved on the worker's node (its interpreter, its PATH)

    def start(self, worker: WorkerEnv, log_path: Path, visible: str) -> RayWorker:
        argv = ["--job-dir", worker.job_dir, "--worker-id", str(worker.worker_id),
                "--worker-env", json.dumps(worker.as_env()), "--", *self.command]
        return super().start(argv, log_path, visible, module=SCRIPT_WORKER_MODULE)


def _main(argv: list[str]) -> int:
    if argv[:1] == ["--ray-worker"] and len(argv) > 1:
        _worker_under_ray(argv[2:], argv[1])
        return 0
    print("usage: python -m dlsched.train.launcher --ray-worker MODULE ARGS... (started by the Ray launcher)",
          file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
