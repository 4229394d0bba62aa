"""Worker processes that run the user's own training script (``dlsched.torch``) instead of a ``make_job``.

Each worker is the user's command (``python train.py --epochs 10``) in a subprocess (``launcher.ScriptLauncher``); the
coordinator's address and the worker's identity travel in its environment (``protocol.WorkerEnv``). It
ignores SIGTERM (and SIGINT) like every worker (the coordinator turns a stop into a checkpoint at a step boundary).

A plain ``python SCRIPT.py ARGS`` in this interpreter is forked from the coordinator's forkserver, which has torch,
torch._dynamo (a script's first optimizer imports it) and dlsched.torch loaded, and runs there as ``__main__``
(``run_forked``): a fresh interpreter paid those imports in every worker, most of a newcomer's start. Any other
command (``python -u ...``, a shell script) starts as it is.
"""
from __future__ import annotations

import argparse
import atexit
import json
import multiprocessing.util
import os
import re
import runpy
import shutil
import signal
import subprocess
import sys
from pathlib import Path

from dlsched.errors import UserError
from dlsched.paths import pythonpath_with_src
from dlsched.train.forking import exit_as_fresh_process, show_as


SCRIPT_WORKER_MODULE = "dlsched.train.script"   # what a Ray bundle runs for a script worker (``main``)


def script_name(command: list[str]) -> str:
    """A job name from the script's file name (train.py -> train)."""
    script = next((Path(a).stem for a in command if a.endswith(".py")), "script")
    return re.sub(r"[^A-Za-z0-9_.-]", "-", script)[:64] or "script"


def resolve_command(command: list[str]) -> list[str]:
    """A leading ``python``/``python3`` runs in this runtime's interpreter (where dlsched and torch live)."""
    if not command:
        raise UserError("command: empty; expected e.g. ['python', 'train.py', '--epochs', '10']")
    head = command[0]
    if head in ("python", "python3", Path(sys.executable).name):
        return [sys.executable, *command[1:]]
    if shutil.which(head) is None:
        raise UserError(f"command: {head!r} not found on PATH")
    return list(command)


def forkable_script(command: list[str]) -> str | None:
    """The script of a ``python SCRIPT.py ARGS`` command (resolved) that ``run_forked`` can run, else None."""
    if len(command) >= 2 and command[0] == sys.executable and command[1].endswith(".py") and os.path.isfile(command[1]):
        return command[1]
    return None


def run_forked(command: list[str], log_path: str, env: dict[str, str]) -> None:
    """A forked worker's body: the script as ``python SCRIPT.py ARGS`` would run it, exiting with its exit code."""
    show_as([sys.executable, *command[1:]])
    os.environ.update(env)   # before the script's first CUDA use (the forkserver never initialised CUDA)
    fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    script = command[1]
    sys.argv = command[1:]
    sys.path[0] = os.path.dirname(os.path.abspath(script))
    atexit._clear()   # the coordinator's exit handlers, inherited, are not the script's
    atexit.register(multiprocessing.util._exit_function)   # as at an interpreter's start: its own children
    # the forkserver's start method, forced on its children, would start a DataLoader's workers from it, running
    # the script's top again in each: the script picks its own (fork by default), as in a fresh interpreter
    multiprocessing.set_start_method(None, force=True)
    exit_as_fresh_process(lambda: runpy.run_path(script, run_name="__main__"))


def ignore_sigterm() -> None:
    """A worker ignores SIGTERM and Ctrl-C's SIGINT (its process group's): the coordinator stops it at a step."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def main(argv: list[str]) -> None:
    """A script worker in its Ray bundle (``launcher.RayScriptLauncher``): the user's command with the worker's
    environment, as a child (this process keeps its parent watch); its exit code is the worker's."""
    ap = argparse.ArgumentParser(prog="dlsched.train.script")
    ap.add_argument("--job-dir", required=True)
    ap.add_argument("--worker-id", type=int, required=True)
    ap.add_argument("--worker-env", required=True, help="WorkerEnv.as_env() as JSON")
    ap.add_argument("command", nargs=argparse.REMAINDER)
    args = ap.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    env = {**os.environ, **json.loads(args.worker_env), "PYTHONPATH": pythonpath_with_src(os.environ.get("PYTHONPATH"))}
    ignore_sigterm()   # a stop is a checkpoint at a step boundary, as for every worker
    sys.exit(subprocess.call(resolve_command(command), env=env, stdin=subprocess.DEVNULL, preexec_fn=ignore_sigterm))
