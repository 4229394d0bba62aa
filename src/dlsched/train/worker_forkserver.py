"""The forkserver a coordinator forks its local workers from, shielded from SIGTERM.

A backend stops a job by SIGTERM to its whole process group; only the coordinator must react (it asks the
workers to finish the step and checkpoint): a worker or forkserver killed mid-step would lose the step. The
forkserver ignores SIGTERM and the workers it forks inherit that. SIGTERM stays blocked while it starts (a
blocked signal is kept pending even while ignored), so one arriving meanwhile reaches the coordinator's
handler afterwards.

A coordinator that has torch loaded and no thread of its own yet starts the forkserver by forking itself:
multiprocessing would exec a fresh interpreter that imports torch all over again, the largest cost of
starting a job on a CPU machine. The fork uses multiprocessing's own server loop (``forkserver.main``)
and books it where ``multiprocessing.forkserver`` keeps its server, so every forkserver-context
``Process`` reaches it. Those are private names of CPython 3.11's module; any other interpreter, or a
process already running threads, gets multiprocessing's spawned server.
"""
from __future__ import annotations

import importlib
import multiprocessing.forkserver as mp_forkserver
import os
import signal
import socket
import sys
import threading
import traceback
from multiprocessing import connection, resource_tracker

from dlsched.train import preemption


def start_shielded(fork: bool = False) -> None:
    """Start the forkserver (a no-op while one runs); ``fork``: by forking this process where that is safe."""
    with preemption.sigterm_blocked():
        if fork and mp_forkserver._forkserver._forkserver_pid is None and _fork_is_safe():
            _start_by_fork()
            return
        # one started already (restarted if it died) or none may be forked: multiprocessing's, SIGTERM ignored
        handler = signal.signal(signal.SIGTERM, signal.SIG_IGN)
        try:
            mp_forkserver.ensure_running()
        finally:
            signal.signal(signal.SIGTERM, handler)


def _fork_is_safe() -> bool:
    # a thread of this process could hold a lock the forked copy would wait on forever
    return sys.version_info[:2] == (3, 11) and threading.active_count() == 1


def _start_by_fork() -> None:
    server = mp_forkserver._forkserver
    resource_tracker.ensure_running()
    for name in server._preload_modules:   # what the spawned server would import, imported here before the fork
        importlib.import_module(name)
    listener = socket.socket(socket.AF_UNIX)
    address = connection.arbitrary_address("AF_UNIX")
    listener.bind(address)
    os.chmod(address, 0o600)
    listener.listen()
    alive_r, alive_w = os.pipe()   # the server exits once every holder of alive_w (this process, its workers) exited
    sys.stdout.flush()   # else every worker would write this process's unflushed output again when it exits
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        _serve(listener.fileno(), alive_r)
    os.close(alive_r)
    listener.close()
    server._forkserver_address, server._forkserver_alive_fd, server._forkserver_pid = address, alive_w, pid


def _serve(listener_fd: int, alive_r: int) -> None:
    """The forked server: ignore SIGTERM, keep only the descriptors a spawned server would get, serve, never
    return (this process's copy of the coordinator's stack must not run on)."""
    code = 0
    try:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        signal.signal(signal.SIGINT, signal.SIG_IGN)   # the workers it forks too: Ctrl-C is the coordinator's
        keep = sorted({0, 1, 2, listener_fd, alive_r})
        for low, high in zip(keep, keep[1:] + [os.sysconf("SC_OPEN_MAX")]):
            os.closerange(low + 1, high)   # the job's lock among them: a worker must never hold it
        mp_forkserver.main(listener_fd, alive_r, [])
    except SystemExit:
        pass
    except BaseException:
        traceback.print_exc()
        code = 1
    finally:
        os._exit(code)
