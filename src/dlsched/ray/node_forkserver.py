"""The processes Ray actors host on a node (a job's workers), forked from one server per node that has torch loaded.

A worker started in its bundle's actor as ``python -m dlsched.train.launcher --ray-worker ...`` spent ~2.5 CPU-s
importing torch (and ``torch._dynamo``) at every start, grow and replacement: each actor is a fresh process, so
nothing it loads serves the next. One detached actor per node (``dlsched-forkserver-<node id>``, no CPU reserved)
keeps a ``runtime_forkserver`` server (the local backend's: started by the node's first start, which is spawned, as
every start until it has loaded) and forks what the hosting actors ask for. The
forked process is the server's child, not its actor's: it runs in its own session as a spawned one, ends when its
actor does (``dlsched.ray.host.exit_with``), and its actor learns its exit code from this actor.

A hosting actor that cannot reach this actor, or asks while no server has loaded, spawns the process as before.
"""
from __future__ import annotations

import os
import select
import signal
import sys
import time

from dlsched.backends import runtime_forkserver

FORKABLE = ("dlsched.train.launcher",)   # the Ray launcher's workers (``--ray-worker MODULE``)
ACTOR_PREFIX = "dlsched-forkserver-"
CALL_TIMEOUT_S = 10.0   # an actor not up yet (a fresh one on a loaded node): this start is spawned
LOST = -signal.SIGKILL  # a forked process whose server was lost ended unseen: read as one whose actor died
KEPT_EXITS = 256


class NodeForkserver:
    """The node's actor body: forks (``runtime_forkserver.start``) and the exit codes of what it forked."""

    def __init__(self) -> None:
        self._children: dict[int, runtime_forkserver.ForkedCoordinator] = {}
        self._ended: dict[int, int] = {}

    def fork(self, cmd: list[str], cwd: str | None, env: dict[str, str], log_path: str) -> int | None:
        """The forked process's pid; None while no server has loaded (the caller spawns ``cmd``)."""
        try:
            # a node runs many workers: its server starts with its first start (spawned while it loads)
            child = runtime_forkserver.start(cmd, cwd or os.getcwd(), env, log_path, spawn_first=False)
        except runtime_forkserver.NotReady:
            return None
        self._children[child.pid] = child
        return child.pid

    def ping(self) -> None:
        """Answered once the actor is up."""

    def wait(self, pid: int, timeout_s: float | None = None) -> int | None:
        """``pid``'s exit code once it ended (``LOST`` when unknown); None if it still runs after ``timeout_s``."""
        if pid in self._ended:
            return self._ended[pid]
        child = self._children[pid]
        if not child.ended():
            if not _ends_within(pid, timeout_s):   # the server's child: a pidfd, no poll for its whole life
                return None
            while not child.ended():   # the server reaps it and says its exit code within its 0.2 s loop
                time.sleep(0.05)
        self._ended[pid] = LOST if child.returncode is None else child.returncode
        self._children.pop(pid, None)
        while len(self._ended) > KEPT_EXITS:   # a stop's wait and the actor's may both ask; not kept for ever
            self._ended.pop(next(iter(self._ended)))
        return self._ended[pid]


def node_forkserver(ray, node_id: str):
    """The node's forkserver actor (started here if it has none)."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    # a thread per hosted process waits on it (its actor's ``wait``) for its life: room for a node's many workers
    cls = ray.remote(num_cpus=0, max_restarts=0, max_concurrency=128)(NodeForkserver)
    # in the asking job's namespace: the backend's and its runtimes' (``dlsched.ray.host.NAMESPACE``)
    return cls.options(name=ACTOR_PREFIX + node_id, lifetime="detached", get_if_exists=True,
                       scheduling_strategy=NodeAffinitySchedulingStrategy(node_id, soft=False)).remote()


class NodeForked:
    """A process the node's server forked, as ``subprocess.Popen`` shows a spawned one to its hosting actor."""

    def __init__(self, ray, server, pid: int):
        self._ray, self._server, self.pid = ray, server, pid
        self.returncode: int | None = None

    def poll(self) -> int | None:
        return self._ended(0.0)

    def wait(self, timeout: float | None = None) -> int:
        rc = self._ended(timeout)
        if rc is None:
            import subprocess

            raise subprocess.TimeoutExpired(f"pid {self.pid}", timeout)
        return rc

    def _ended(self, timeout: float | None) -> int | None:
        if self.returncode is None:
            try:
                self.returncode = self._ray.get(self._server.wait.remote(self.pid, timeout))
            except self._ray.exceptions.RayActorError:   # the server's actor is gone, and its exit code with it
                self.returncode = LOST if _ends_within(self.pid, timeout) else None
        return self.returncode


def _ends_within(pid: int, timeout: float | None) -> bool:
    try:
        pidfd = os.pidfd_open(pid)
    except ProcessLookupError:
        return True
    try:
        return bool(select.select([pidfd], [], [], timeout)[0])
    finally:
        os.close(pidfd)


def fork_or_none(ray, cmd: list[str], cwd: str | None, env: dict[str, str], log_path: str) -> NodeForked | None:
    """``cmd`` forked on this node (from a hosting actor), or None: not forkable here, or no server ready."""
    if not runtime_forkserver.forkable(cmd, FORKABLE) or sys.platform != "linux":
        return None
    try:
        server = node_forkserver(ray, ray.get_runtime_context().get_node_id())
        ray.get(server.ping.remote(), timeout=CALL_TIMEOUT_S)
    except (ray.exceptions.RayError, ValueError):   # not up in time, or gone: spawned
        return None
    pid = ray.get(server.fork.remote(cmd, cwd, env, log_path))   # no timeout: a fork nobody waits for would run on
    return None if pid is None else NodeForked(ray, server, pid)
