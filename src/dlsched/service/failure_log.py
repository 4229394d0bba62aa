"""A failure that repeats every round, logged without flooding the log.

A scheduling round that raises is logged and retried next round (``LoopThread``); the policy forecast likewise. A
cause that lasts (a full disk, a database another process keeps locked) failed every round the same way, and each
failure wrote its whole traceback: 288 tracebacks, 6 000 lines, in a few minutes of a full disk at the default 2 s
interval, on the disk that was full. Now the first failure of a kind (its exception type and message) is logged with
its traceback; the same again only as one line every ``every_s``, with how many times; the first success after says
so. A different failure is logged in full at once.
"""
from __future__ import annotations

import logging
import threading
import time
from typing import Callable

REPEAT_EVERY_S = 600.0   # one line per 10 minutes of the same failure: present in any log window an operator reads


class RepeatedFailures:
    def __init__(self, what: str, log: logging.Logger, every_s: float = REPEAT_EVERY_S,
                 clock: Callable[[], float] = time.monotonic):
        self.what, self.log, self.every_s, self.clock = what, log, every_s, clock
        self._lock = threading.Lock()
        self._key: tuple[str, str] | None = None
        self._count = 0
        self._said = 0.0

    def failed(self, e: BaseException) -> None:
        key, now = (type(e).__name__, str(e)), self.clock()
        with self._lock:
            if key != self._key:
                self._key, self._count, self._said = key, 1, now
                self.log.error("%s failed", self.what, exc_info=e)
                return
            self._count += 1
            if now - self._said < self.every_s:
                return
            self._said = now
            count = self._count
        self.log.error("%s failed %d times so far, the same way: %s: %s", self.what, count, *key)

    def succeeded(self) -> None:
        with self._lock:
            if self._key is None:
                return
            count, self._key = self._count, None
        self.log.warning("%s succeeds again after %d failure(s)", self.what, count)
