"""Forking without exec from a process that may hold garbage (a supervisor, a test process).

A forked child that collects an object it inherited runs its destructor there. A TCPStore's destructor joins
the store's server thread, which the child does not have, so the child hangs for good (seen on a parameter-server
rank forked from a long-lived process). The garbage is therefore collected before the fork, where its threads run,
and what the child inherits is frozen: its collector never looks at it (``gc.freeze``, as the gc docs advise
before a fork).
"""
from __future__ import annotations

import gc
from contextlib import contextmanager


@contextmanager
def inheriting_no_garbage():
    """Around the ``start()`` of forked processes."""
    gc.collect()
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()
