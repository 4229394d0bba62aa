"""Fault injection for the crash tests: ``DLSCHED_FAULT_AT=<point>`` SIGKILLs this process when it reaches
``fault_point(<point>)``, so a test kills the service at an exact moment instead of racing a timer.

Points: ``coordinator-started`` (local backend: the coordinator process exists, nothing records it yet),
``resize-sent`` (local backend: the runtime has its resize request, the store does not record it yet),
``token-written`` (a first start: the new token is written, not yet in place as the token file).
Unset, a fault point costs one dictionary lookup."""
from __future__ import annotations

import os
import signal

FAULT_ENV = "DLSCHED_FAULT_AT"


def fault_point(name: str) -> None:
    if os.environ.get(FAULT_ENV) == name:
        os.kill(os.getpid(), signal.SIGKILL)
