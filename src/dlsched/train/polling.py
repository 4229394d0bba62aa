"""Polling for what another process sets (a store key, a rank count), at a falling rate.

Each poll is a store round trip, and on a shared machine a waiter's polls take CPU from the processes it waits
for. So a wait starts at about a millisecond, where most waits between the steps of a resize end, and slows to
``cap_s`` as it goes on: a worker kept waiting for seconds (started before its plan, or on standby) costs little,
and is at most ``cap_s`` late.
"""
from __future__ import annotations

import time


class Backoff:
    """``sleep()`` between polls: ``first_s``, growing by ``factor`` per poll to ``cap_s``."""

    def __init__(self, first_s: float = 0.001, cap_s: float = 0.02, factor: float = 1.5):
        self.delay, self.cap_s, self.factor = first_s, cap_s, factor

    def sleep(self) -> None:
        time.sleep(self.delay)
        self.delay = min(self.delay * self.factor, self.cap_s)
