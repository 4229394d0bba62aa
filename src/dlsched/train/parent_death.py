"""A child process that dies with its parent, however the parent dies (SIGKILL, the OOM killer): Linux's
parent-death signal (prctl(2) ``PR_SET_PDEATHSIG``). Elsewhere nothing is set. Without it a SIGKILLed supervisor left
its children training on as orphans, writing into the job folder a re-run then wrote too."""
from __future__ import annotations

import os
import signal
import sys
from typing import Callable

PR_SET_PDEATHSIG = 1   # prctl(2)


def die_with(parent: int, failed_code: int | None = None) -> None:
    """In the child: SIGKILL when ``parent`` dies; exit 137 at once if it died already. ``failed_code``: exit with it
    when prctl fails (None: run on without fate-sharing)."""
    if sys.platform != "linux":
        return
    import ctypes

    if ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
        if failed_code is not None:
            os._exit(failed_code)
        return
    if os.getppid() != parent:   # it died before prctl took hold
        os._exit(137)


def preexec_dying_with(parent: int, failed_code: int | None = None) -> Callable[[], None] | None:
    """``subprocess.Popen(preexec_fn=...)`` for a child that dies with ``parent`` (None off Linux). ctypes is loaded
    here, in the parent: nothing should be imported between fork and exec."""
    if sys.platform != "linux":
        return None
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)

    def set_parent_death_signal() -> None:
        if libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
            if failed_code is not None:
                os._exit(failed_code)
            return
        if os.getppid() != parent:
            os._exit(137)

    return set_parent_death_signal
