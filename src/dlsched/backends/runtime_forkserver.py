"""The local backend's coordinators, forked from a server that has the runtime loaded.

A coordinator started as ``python -m dlsched.train.run`` spends its first seconds of CPU importing torch and what its
workers need (torch._dynamo: a worker's first optimizer imports it), at every start, restart and resume; forked from a
server that imported them once, it starts in a fraction of that. The server is this process's child, started at the
second such start (a process that starts one coordinator never pays for a server); starts are spawned, as they
were, until it has loaded (a round never waits for its imports). There is one server per interpreter environment (``PYTHON*``, ``TORCH*``, ``OMP_*`` and ``MKL_*`` are read
as the interpreter and torch load: a start with other values gets its own server). It runs in its own session with
SIGTERM blocked, which every coordinator it forks inherits until ``preemption.install`` (as ``sigterm_blocked`` gives a
spawned one). Each coordinator runs as ``python -m dlsched.train.run ARGS`` would: its own session, the job's
environment, working directory and log as stdout/stderr, the job folder's lock on the descriptor ``DLSCHED_LOCK_FD``
names, its own torch and numpy seeds, atexit handlers and exit code.

Protocol, one ``SOCK_SEQPACKET`` socket pair: this process sends ``{"argv": [MODULE, ARG...], "cwd", "env", "log"}``
with the lock's descriptor attached where the start has one (a Ray node's server forks hosted workers, which take no
lock: ``dlsched.ray.node_forkserver``); the server says ``{"ready": true}`` once loaded, answers a request with ``{"pid": N,
"create_time": T}`` and says ``{"exit": N, "rc": CODE}`` (negative: the signal) once it has reaped that child. The
server exits when this process closes its end (it ended): coordinators train on in their sessions, as a spawned one
outlives its service. A coordinator whose server died before it is watched by process id, its exit code unknown (as
one adopted after a restart).
"""
from __future__ import annotations

import importlib
import json
import os
import select
import signal
import socket
import subprocess
import sys
import threading
import time

import psutil

RUNTIME_MODULE = "dlsched.train.run"
# what ``run`` imports before it trains, its workers' lazy imports too (``forking.LAZY_TRAINING_MODULES``)
PRELOAD = ("torch", "torch._dynamo", "dlsched.train.coordinator", "dlsched.train.worker", "dlsched.train.ps_runner")
ENV_READ_AT_LOAD = ("PYTHON", "TORCH", "OMP_", "MKL_")
JOB_ONLY = ("CUDA_VISIBLE_DEVICES", "DLSCHED_JOB_ID", "DLSCHED_LOCK_FD")
ANSWER_TIMEOUT_S = 60.0   # a loaded server forks at once; silence this long: it is lost
MAX_MESSAGE = 1 << 20

_servers: dict[tuple, "RuntimeForkserver"] = {}
_spawned_first: set[tuple] = set()   # environments whose first start was spawned without a server


class NotReady(OSError):
    """No server has loaded yet for this environment (or it was lost): spawn the coordinator instead."""

_servers_lock = threading.Lock()


def forkable(cmd: list[str], modules: tuple[str, ...] = (RUNTIME_MODULE,)) -> bool:
    """``cmd`` is this interpreter's ``python -m MODULE ...`` for one of ``modules`` (by default the local backend's
    runtime, ``python -m dlsched.train.run``)."""
    return len(cmd) >= 3 and list(cmd[:2]) == [sys.executable, "-m"] and cmd[2] in modules


def start(cmd: list[str], cwd: str, env: dict[str, str], log_path: str,
          lock_fd: int | None = None, spawn_first: bool = True) -> "ForkedCoordinator":
    """Fork ``cmd`` (``forkable``) with ``env`` (its ``DLSCHED_LOCK_FD`` set to where ``lock_fd`` lands, if given);
    call inside ``sigterm_blocked``, as a spawn. Raises ``NotReady`` while no server is ready (nothing was started:
    the caller spawns it), OSError when the server was lost after the request (a coordinator may hold the job's
    lock: the backend's next start adopts it, ``LocalBackend.attach``). ``spawn_first``: the first start in this
    environment starts no server (a process that starts one coordinator never pays for one)."""
    key = tuple(sorted((k, v) for k, v in env.items() if k.startswith(ENV_READ_AT_LOAD)))
    with _servers_lock:
        server = _servers.get(key)
        if server is None and spawn_first and key not in _spawned_first:
            _spawned_first.add(key)   # a process that starts one coordinator (one job's service) needs no server
            raise NotReady("the first start is spawned")
        if server is None or server.lost:
            try:
                server = _servers[key] = RuntimeForkserver(env, cwd)
            except OSError as e:   # no process to spare: this start spawns, the next one tries again
                raise NotReady(f"no coordinator forkserver: {e}") from None
    return server.fork(cmd[2:], cwd, env, log_path, lock_fd)


class RuntimeForkserver:
    """This process's end of one server: starts, answers and exits of the coordinators it forked."""

    def __init__(self, env: dict[str, str], cwd: str):
        self._sock, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self._lock = threading.Lock()
        self._exits: dict[int, int] = {}
        self.ready = self.lost = False
        try:
            own = {k: v for k, v in env.items() if k not in JOB_ONLY}   # the first job's, not the server's
            self._proc = subprocess.Popen([sys.executable, "-m", __name__, str(theirs.fileno())], cwd=cwd, env=own,
                                          pass_fds=(theirs.fileno(),), stdin=subprocess.DEVNULL,
                                          stdout=subprocess.DEVNULL, start_new_session=True)
        finally:
            theirs.close()

    def fork(self, argv: list[str], cwd: str, env: dict[str, str], log_path: str,
             lock_fd: int | None) -> "ForkedCoordinator":
        """``argv``: the module and its arguments (``python -m ARGV``)."""
        request = json.dumps({"argv": argv, "cwd": cwd, "env": env, "log": log_path}).encode()
        if not self.loaded():
            raise NotReady("the coordinator forkserver is not ready")
        with self._lock:
            try:
                socket.send_fds(self._sock, [request], [] if lock_fd is None else [lock_fd])
                deadline = time.monotonic() + ANSWER_TIMEOUT_S
                while True:
                    answer = self._receive(deadline - time.monotonic())
                    if answer is None:
                        raise OSError(f"the coordinator forkserver (pid {self._proc.pid}) did not answer")
                    if "pid" in answer:
                        return ForkedCoordinator(self, answer["pid"], answer["create_time"])
            except OSError:
                self._lose()
                raise

    def loaded(self) -> bool:
        """Whether the server has loaded the runtime (a start now forks)."""
        with self._lock:
            while not self.ready and not self.lost and self._receive(0.0) is not None:
                pass
            return self.ready and not self.lost

    def exit_code(self, pid: int) -> int | None:
        """``pid``'s exit code once the server reaped it (None: not yet, or never known: the server is gone)."""
        with self._lock:
            while pid not in self._exits and not self.lost and self._receive(0.0) is not None:
                pass
            return self._exits.pop(pid, None)   # asked until known, then kept by its handle

    def _receive(self, timeout: float) -> dict | None:
        """The next answer (exits are booked on the way), None after ``timeout`` or once the server is gone."""
        if not select.select([self._sock], [], [], max(timeout, 0.0))[0]:
            return None
        try:
            data = self._sock.recv(MAX_MESSAGE)
        except OSError:
            data = b""
        if not data:
            self._lose()
            return None
        answer = json.loads(data)
        if "exit" in answer:
            self._exits[answer["exit"]] = answer["rc"]
        self.ready = self.ready or "ready" in answer
        return answer

    def _lose(self) -> None:
        self.lost = True
        self._sock.close()
        try:
            self._proc.kill()
            self._proc.wait()
        except OSError:
            pass


class ForkedCoordinator:
    """A forked coordinator, as ``subprocess.Popen`` shows a spawned one: ``pid``, ``poll``, ``wait``, ``returncode``;
    ``unknown_exit``: it ended after its server was lost, so its exit code is not known (``returncode`` None)."""

    def __init__(self, server: RuntimeForkserver, pid: int, create_time: float | None):
        self._server, self.pid, self.create_time = server, pid, create_time
        try:
            self._ps: psutil.Process | None = psutil.Process(pid)
        except psutil.Error:   # reaped already: its exit is the server's to say
            self._ps = None
        self.returncode: int | None = None
        self.unknown_exit = False

    def poll(self) -> int | None:
        if self.returncode is None and not self.unknown_exit:
            self.returncode = self._server.exit_code(self.pid)
            if self.returncode is None and self._server.lost and not _running(self._ps):
                self.unknown_exit = True
        return self.returncode

    def ended(self) -> bool:
        return self.poll() is not None or self.unknown_exit

    def wait(self) -> int | None:
        while not self.ended():
            time.sleep(0.05)
        return self.returncode


def _running(p: psutil.Process | None) -> bool:
    if p is None:
        return False
    try:
        return p.is_running() and p.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


# ----------------------------------------------------------------------------- the server
def serve(fd: int) -> None:
    """Load the runtime, then fork a coordinator per request until the other end closes; never returns."""
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})   # the coordinators' start-up, as sigterm_blocked
    sock = socket.socket(fileno=fd)
    children: set[int] = set()
    try:
        for name in PRELOAD:
            importlib.import_module(name)
        sock.send(b'{"ready": true}')
        while True:
            if select.select([sock], [], [], 0.2)[0]:
                data, fds, _, _ = socket.recv_fds(sock, MAX_MESSAGE, 1)
                if not data:
                    break   # the service ended: its coordinators train on, as spawned ones outlive it
                sys.stdout.flush()
                sys.stderr.flush()
                led, leading = os.pipe()
                pid = os.fork()
                if pid == 0:
                    sock.close()
                    os.close(led)
                    _coordinator(json.loads(data), fds[0] if fds else None, leading)
                for fd in fds:
                    os.close(fd)
                os.close(leading)
                # its pid goes out once it leads its session (or died): a stop at once signals its group, which a
                # child not yet through setsid does not lead, and that SIGTERM was lost (the job ran on, exit 0)
                os.read(led, 1)
                os.close(led)
                children.add(pid)
                try:
                    born = psutil.Process(pid).create_time()   # not reaped before the next loop: the pid is its
                except psutil.Error:
                    born = None
                sock.send(json.dumps({"pid": pid, "create_time": born}).encode())
            while children:
                try:
                    pid, status = os.waitpid(-1, os.WNOHANG)
                except ChildProcessError:
                    break
                if pid == 0:
                    break
                children.discard(pid)
                sock.send(json.dumps({"exit": pid, "rc": os.waitstatus_to_exitcode(status)}).encode())
    except OSError:
        pass   # the service is gone
    os._exit(0)


def _coordinator(request: dict, lock_fd: int | None, leading: int) -> None:
    """A forked child's body: ``python -m ARGV`` (``dlsched.train.run ...``) in the job's session, folder and
    environment; ``leading`` closed once it leads its session."""
    from dlsched.train.forking import exit_as_fresh_process, show_as

    try:
        os.setsid()
        os.close(leading)
        module = request["argv"][0]
        show_as([sys.executable, "-m", *request["argv"]])
        os.chdir(request["cwd"])
        log = os.open(request["log"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.dup2(log, 1)
        os.dup2(log, 2)
        os.close(log)
        os.close(null)
        os.environ.clear()
        os.environ.update(request["env"])
        from dlsched.train import fence

        if lock_fd is not None:
            os.environ[fence.FD_ENV] = str(lock_fd)
        sys.argv = list(request["argv"])
        sys.path[0] = os.getcwd()   # as ``-m`` puts the working directory first
    except BaseException:
        sys.excepthook(*sys.exc_info())
        os._exit(1)
    import runpy

    exit_as_fresh_process(lambda: runpy.run_module(module, run_name="__main__", alter_sys=True))


if __name__ == "__main__":
    serve(int(sys.argv[1]))
