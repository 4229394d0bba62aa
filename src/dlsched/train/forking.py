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

import gc
import importlib
import multiprocessing
from contextlib import contextmanager

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
