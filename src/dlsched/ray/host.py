"""One process under one Ray actor: the actor the Ray backend runs a job's runtime in and the Ray launcher
runs each worker in. The process gets its own session so that a stop reaches everything it started, and it
learns where it runs (``DLSCHED_RAY_NODE_ID`` / ``_NODE_IP``) and its actor's pid, so it can end itself once
the actor is gone (a lost node or a killed actor never leaves an orphan writing to the job directory)."""
from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import threading
import time

from dlsched.train.parent_death import preexec_dying_with
from dlsched.train.preemption import signal_group, sigterm_blocked

RAY_NODE_ENV = "DLSCHED_RAY_NODE_ID"     # given to the hosted process: where it runs
RAY_NODE_IP_ENV = "DLSCHED_RAY_NODE_IP"
ACTOR_PID_ENV = "DLSCHED_RAY_ACTOR_PID"   # the hosted process's parent: gone -> it ends
NAMESPACE = "dlsched"
ORPHAN_GRACE_S = 3.0    # the guard's actor is gone (its node lost, or killed): nobody waits for a checkpoint
# a requested stop: the runtime checkpoints its step first. Whoever stops the guard bounds this (ProcessHost.stop
# SIGKILLs it after its grace, the backend's STOP_GRACE_S, and the runtime dies with it); the guard's own 3 s
# cut every Ray stop short of that grace
STOP_WAIT_S = 600.0


def actor_pid() -> int:
    """The hosting actor's pid (from the environment, not getppid(): the actor may be gone already)."""
    return int(os.environ.get(ACTOR_PID_ENV) or os.getppid())


def exit_with(actor: int, code: int = 3) -> None:
    """A daemon thread that ends this process as soon as process ``actor`` (its hosting actor: its parent, or the
    one whose node's server forked it, ``dlsched.ray.node_forkserver``) has ended; at once if it has."""
    try:
        pidfd = os.pidfd_open(actor)   # readable once that process ends; no poll, no reused pid
    except ProcessLookupError:
        os._exit(code)

    def watch() -> None:
        select.select([pidfd], [], [])
        os._exit(code)

    threading.Thread(target=watch, daemon=True, name="actor-watchdog").start()


class ProcessHost:
    """Ray actor body: one process, started in its own session, on the node (or in the bundle) the actor holds.

    Threaded (``max_concurrency=2``) so that ``stop`` runs while ``wait`` blocks on the process."""

    def __init__(self) -> None:
        self.proc = None   # subprocess.Popen, or node_forkserver.NodeForked (as a Popen)
        self.started = threading.Event()

    def launch(self, argv: list[str], env: dict[str, str], cwd: str | None, log_path: str) -> dict:
        import ray

        from dlsched.ray.node_forkserver import fork_or_none

        node_id = ray.get_runtime_context().get_node_id()
        node_ip = ray.util.get_node_ip_address()
        full_env = {**os.environ, **env, RAY_NODE_ENV: node_id,   # keeps CUDA_VISIBLE_DEVICES Ray set
                    RAY_NODE_IP_ENV: node_ip, ACTOR_PID_ENV: str(os.getpid())}
        try:
            os.makedirs(os.path.dirname(log_path) or ".", exist_ok=True)
            self.proc = fork_or_none(ray, argv, cwd, full_env, log_path)   # a worker, torch loaded: forked
            if self.proc is None:
                with open(log_path, "ab") as log:
                    self.proc = subprocess.Popen(argv, cwd=cwd, env=full_env, stdout=log, stderr=subprocess.STDOUT,
                                                 stdin=subprocess.DEVNULL, start_new_session=True)
        finally:
            self.started.set()   # wait() must not block forever when the start itself failed
        return {"pid": self.proc.pid, "node_id": node_id, "node_ip": node_ip,
                "gpus": [str(g) for g in ray.get_gpu_ids()]}

    def wait(self) -> int:
        self.started.wait()
        return self.proc.wait() if self.proc is not None else 127

    def returncode(self) -> int | None:
        return None if self.proc is None else self.proc.poll()

    def stop(self, grace_s: float = 0.0) -> int | None:
        """SIGTERM the process's group, SIGKILL after ``grace_s``; its exit code (None if never started).

        Waits on the process, not its group: nothing else reaps it, and a zombie keeps its group alive to
        ``killpg`` (every stop then took the whole grace)."""
        if self.proc is not None and self.proc.poll() is None:
            signal_group(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=grace_s)
            except subprocess.TimeoutExpired:
                pass
            signal_group(self.proc.pid, signal.SIGKILL)   # the leader's late helpers, or the leader past its grace
            self.proc.wait()
        return None if self.proc is None else self.proc.returncode


def host_actor(ray, **options):
    """The ``ProcessHost`` actor class with ``options`` (never restarted: a restarted host would hold no process)."""
    return ray.remote(max_restarts=0, max_concurrency=2, **options)(ProcessHost)


# ----------------------------------------------------------------------------- the guard
# `python -m dlsched.ray.host --guard -- CMD...`: starts CMD in its own session and kills that whole process
# group when told to stop or when its parent (the actor) disappears - a lost node, where nobody cleans up.
def guard(cmd: list[str]) -> int:
    parent = os.getppid()
    me = os.getpid()
    # the runtime dies with the guard: an actor's core worker whose raylet died SIGKILLs its children (Ray's
    # kill_child_processes_on_worker_exit), the guard first, and the runtime lived on holding the job folder
    # (tests/multinode's rank-0 node loss: "fenced 19 times"); 126 where prctl fails: the start fails visibly
    with sigterm_blocked():   # as the local backend: a stop during the runtime's start-up waits for its handler
        child = subprocess.Popen(cmd, start_new_session=True,
                                 preexec_fn=preexec_dying_with(me, failed_code=126))

    kill_at: list[float] = []   # once stopping: when whatever is left of the runtime's group is SIGKILLed

    def stop(*_, grace_s: float = STOP_WAIT_S) -> None:
        # the wait is the loop's (a handler's child.wait() would deadlock on the one the loop is in)
        if not kill_at:
            signal_group(child.pid, signal.SIGTERM)
        kill_at[:] = [min([*kill_at, time.monotonic() + grace_s])]

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    while True:
        try:
            rc = child.wait(timeout=0.2)
        except subprocess.TimeoutExpired:
            if os.getppid() != parent:   # again each pass: stop keeps the earliest deadline, signals once
                stop(grace_s=ORPHAN_GRACE_S)
            if kill_at and time.monotonic() > kill_at[0]:
                signal_group(child.pid, signal.SIGKILL)
            continue
        if kill_at:   # stopped: the runtime has gone; its helpers (a forkserver) go with it
            signal_group(child.pid, signal.SIGKILL)
            sys.exit(143)
        if rc < 0:   # killed (the OOM killer, kill -9): die of the same signal, or exit(-9) reads as a failure, 247
            if -rc != signal.SIGKILL:   # SIGKILL's action cannot be set (nor caught)
                signal.signal(-rc, signal.SIG_DFL)
            os.kill(os.getpid(), -rc)
        return rc


def guarded(cmd: list[str]) -> list[str]:
    return [sys.executable, "-m", "dlsched.ray.host", "--guard", "--", *cmd]


if __name__ == "__main__":
    if sys.argv[1:3] != ["--guard", "--"]:
        print("usage: python -m dlsched.ray.host --guard -- CMD... (started by the Ray backend)", file=sys.stderr)
        sys.exit(2)
    sys.exit(guard(sys.argv[3:]))
