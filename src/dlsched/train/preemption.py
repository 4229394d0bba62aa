"""SIGTERM means "stop at the next safe point", from the first instruction of the job to its last.

A backend preempts a job by SIGTERM to its process group. The runtime must never die of it with work
unsaved, so the handler only records the request (the coordinator acts on it between steps), and the
window before the handler exists is closed by the *starter*: it spawns the runtime with SIGTERM
blocked (:func:`sigterm_blocked`; the mask survives fork and exec), a signal arriving during the
interpreter start and the imports (torch: seconds) stays pending, and :func:`install` unblocks it only
once the handler is in place. Deliberately free of heavy imports: ``run`` installs it before torch.
"""
from __future__ import annotations

import os
import signal
from contextlib import contextmanager
from typing import Iterator

_requested = False


def _on_sigterm(signum, frame) -> None:
    global _requested
    _requested = True


def _on_sigint(signum, frame) -> None:
    """Ctrl-C in ``dlsched train``'s terminal: a stop like SIGTERM's (it left a traceback per worker, no checkpoint
    and status.json 'running'); a second one interrupts at once."""
    if _requested:
        raise KeyboardInterrupt
    _on_sigterm(signum, frame)


def install() -> None:
    """Record SIGTERM (and Ctrl-C's SIGINT, unless ignored: a background job's) instead of dying of it, then let
    through one that arrived while it was blocked."""
    signal.signal(signal.SIGTERM, _on_sigterm)
    if signal.getsignal(signal.SIGINT) is not signal.SIG_IGN:
        signal.signal(signal.SIGINT, _on_sigint)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})


def requested() -> bool:
    return _requested


def signal_group(pgid: int, sig: int) -> None:
    """``sig`` to a process group (a stopper's preemption, or its SIGKILL after the grace), gone or not."""
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        pass


@contextmanager
def sigterm_blocked() -> Iterator[None]:
    """Block SIGTERM in the calling thread meanwhile: processes started inside inherit the block.

    A SIGTERM sent to this process meanwhile is not lost either: it stays pending (or goes to another
    thread) and is handled as usual once the mask is restored."""
    old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)
