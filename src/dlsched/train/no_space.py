"""A runtime that stops because its job folder's disk is full (ENOSPC, or the user's quota: EDQUOT) did not fail:
its checkpoints stand, and once there is room again its job resumes from the newest. It exits ``EXIT_NO_SPACE``
without writing ``failed`` (a status it could still write in a byte of room would fail the job for good), and the
backends read that exit as a lost coordinator (re-queued, a bounded number of times), as a SIGKILL. A full disk for a
moment (a checkpoint of another job, a log rotation) failed every job writing there, for good.

A rank process (parameter server, ensemble member) that hits it exits ``EXIT_NO_SPACE`` too (``exits_no_space``), and
its runtime then stops as its own write would have: read as a rank lost, it was restarted and, past its restarts,
failed (the PS runtime), or failed the job at once (the ensemble's), unless the runtime's own write failed first."""
from __future__ import annotations

import errno
import os
import sys
import traceback
from contextlib import contextmanager

EXIT_NO_SPACE = 73   # EX_CANTCREAT: an output file cannot be written
NO_SPACE = frozenset({errno.ENOSPC, errno.EDQUOT})


def is_no_space(e: BaseException | None) -> bool:
    """Whether ``e`` or an exception it was raised from or while handling is a full disk's."""
    seen = set()
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        if isinstance(e, OSError) and e.errno in NO_SPACE:
            return True
        e = e.__cause__ or e.__context__
    return False


def say_no_space(*lines: str) -> None:
    """The traceback being handled and ``lines`` on stderr, then both streams flushed. stderr (and stdout) is the job
    folder's ``output.log``, on the disk that is full: the write failed in turn, and its OSError ended the runtime
    with exit 1 (read as the job's failure, for good) instead of ``EXIT_NO_SPACE``. What the streams cannot write then
    goes to /dev/null, so flushing it at exit does not fail either (exit status 120)."""
    try:
        traceback.print_exc()
        for line in lines:
            print(line, file=sys.stderr)
        sys.stdout.flush()
        sys.stderr.flush()
    except OSError:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 1)
        os.dup2(devnull, 2)


@contextmanager
def exits_no_space():
    """Around a rank process's body: a full disk's exception ends it with ``EXIT_NO_SPACE`` (traceback on stderr)."""
    try:
        yield
    except Exception as e:
        if not is_no_space(e):
            raise
        say_no_space()
        sys.exit(EXIT_NO_SPACE)


def no_space(what: str) -> OSError:
    """The error a runtime raises for a rank that exited ``EXIT_NO_SPACE`` (``what``: which, and its line):
    ``run.py`` exits with it in turn."""
    return OSError(errno.ENOSPC, what)
