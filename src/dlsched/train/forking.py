"""Forking without exec from a process that may hold garbage (a supervisor, a test process).

A forked child that collects an object it inherited runs its destructor there. A TCPStore's destructor joins
the store's server thread, which the child does not have, so the child hangs for good (seen on a parameter-server
rank forked from a long-lived process). The garbage is therefore collected before the fork, where its threads run,
and what the child inherits is frozen: its collector never looks at it (``gc.freeze``, as the gc docs advise
before a fork).

A child also inherits every module its parent imported, so what a trainer imports lazily is imported before the
fork, once, instead of once in every child: ``LAZY_TRAINING_MODULES``. Processes forked from the forkserver
get them from what it preloads: ``preload_in_forkserver``.
"""
from __future__ import annotations

import atexit
import gc
import importlib
import multiprocessing
import os
import shlex
import signal
import sys
import threading
from contextlib import contextmanager
from typing import Callable

import setproctitle

# torch.optim's first optimizer imports torch._dynamo (torch/_compile.py wraps Optimizer.__init__ in
# _disable_dynamo): about 1 CPU-s, 40 % of a 4-worker elastic test's CPU when every forked worker paid it
LAZY_TRAINING_MODULES = ("torch._dynamo",)

# every forkserver context of a process shares one server and one preload list: each user adds its modules
# (setting the list, the last module imported won and the other's forks imported theirs in every child)
_preloaded: list[str] = []


def load_lazy_training_modules() -> None:
    """Before forking processes that train."""
    for name in LAZY_TRAINING_MODULES:
        importlib.import_module(name)


def preload_in_forkserver(*modules: str) -> None:
    """``modules`` and ``LAZY_TRAINING_MODULES`` imported by the forkserver when it starts (one import, not one
    per forked process); no effect on a server already running."""
    _preloaded.extend(m for m in (*modules, *LAZY_TRAINING_MODULES) if m not in _preloaded)
    multiprocessing.get_context("forkserver").set_forkserver_preload(list(_preloaded))


def preload_nothing_in_forkserver() -> None:
    """For a process that forks no trainer: its forkserver need not load torch."""
    _preloaded.clear()
    multiprocessing.get_context("forkserver").set_forkserver_preload([])


@contextmanager
def inheriting_no_garbage():
    """Around the ``start()`` of forked processes."""
    gc.collect()
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


def show_as(argv: list[str]) -> None:
    """A forked child's title in ``ps`` and psutil's cmdline (which the lock holder's line and operators read): the
    command it stands for, not its parent's. First thing in the child: once its environment is replaced, the title
    can no longer reach past the parent's argv, and the kernel then shows the parent's."""
    setproctitle.setproctitle(shlex.join(argv))


def exit_as_fresh_process(run: Callable[[], object]) -> None:
    """A forked child's end: ``run()`` (a module or script run as ``__main__``) as a fresh interpreter would run it,
    then ``os._exit`` with its exit code. The torch and numpy generators it inherited would give every child the
    same draws (dropout masks, augmentations): they are seeded from the OS as a fresh interpreter's are (CPython's
    ``random`` reseeds itself after a fork)."""
    if "numpy" in sys.modules:
        sys.modules["numpy"].random.seed()
    if "torch" in sys.modules:
        sys.modules["torch"].seed()
    code = 0
    try:
        run()
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        if not isinstance(e.code, (int, type(None))):
            print(e.code, file=sys.stderr)
    except KeyboardInterrupt:   # an interpreter dies of the SIGINT it did not handle
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
    except BaseException:
        sys.excepthook(*sys.exc_info())
        code = 1
    try:
        try:
            threading._shutdown()   # as the interpreter's exit: non-daemon threads end first
        except Exception:
            pass
        atexit._run_exitfuncs()
        sys.stdout.flush()
        sys.stderr.flush()
    finally:
        os._exit(code)
