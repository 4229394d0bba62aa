"""What an idle or half-sent connection may hold: uvicorn's HTTP/1.1 protocol with a deadline for a request's head
and a cap on open connections (the trust model is ``docs/security.md``).

uvicorn closes a connection idle *between* requests (``timeout_keep_alive``), but not one that never finishes its
first request's head: a peer without the token that opened connections and sent half a request line held each
for good. 256 of them made uvicorn answer every request 503 (``limit_concurrency`` counts connections), and ~1 000
ran the service out of file descriptors (``ulimit -n`` 1024): no request was answered and the scheduling loop could
open neither a job's files nor a coordinator's pipes. Now a connection whose request head is not in within
``head_s`` of its opening (or of its last answer, plus the keep-alive) is closed, and one opened past
``max_connections`` is closed at once, so the descriptors the loop needs stay free.
"""
from __future__ import annotations

import asyncio
import logging
import resource
import time

from uvicorn.protocols.http.h11_impl import H11Protocol

log = logging.getLogger("dlsched.service")
HEAD_S = 10.0              # a client sends its request head in one write; a loaded machine still does so in ms
MAX_CONNECTIONS = 1024
# asyncio accepts up to the listen backlog in one go before any connection is looked at: uvicorn's 2048 took the
# process past 1 024 descriptors at once (EMFILE) whatever the cap
BACKLOG = 128
WARN_EVERY_S = 60.0        # a peer hammering the cap: one line a minute, not one per connection


def connection_cap(limit: int = MAX_CONNECTIONS) -> int:
    """Open connections allowed: ``limit``, or a quarter of the process's descriptor limit where that is lower (the
    rest: the database, job logs, coordinators' pipes, and a burst accepted before any is closed, ``BACKLOG``)."""
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    return limit if soft == resource.RLIM_INFINITY else max(16, min(limit, soft // 4))


def deadline_protocol(head_s: float = HEAD_S, max_connections: int | None = None,
                      keep_alive_s: float = 5.0) -> type[H11Protocol]:
    """An ``H11Protocol`` (``uvicorn.Config(http=...)``) that closes a connection whose request head is late, and one
    opened past the cap (default ``connection_cap()``)."""
    cap = connection_cap() if max_connections is None else max_connections

    class DeadlineH11(H11Protocol):
        _head_timer: asyncio.TimerHandle | None = None
        _warned_at = -WARN_EVERY_S

        def connection_made(self, transport) -> None:   # type: ignore[override]
            super().connection_made(transport)
            if len(self.connections) > cap:
                if time.monotonic() - DeadlineH11._warned_at >= WARN_EVERY_S:
                    DeadlineH11._warned_at = time.monotonic()
                    log.warning("connection from %s closed: %d connections open, the cap is %d (more refused "
                                "silently for %g s)", self.client, len(self.connections) - 1, cap, WARN_EVERY_S)
                transport.abort()
                return
            self._arm(head_s)

        def _arm(self, seconds: float) -> None:
            if self._head_timer is not None:
                self._head_timer.cancel()
            self._head_timer = self.loop.call_later(seconds, self._head_overdue)

        def _head_overdue(self) -> None:
            self._head_timer = None
            # a request in progress (its head was in) is the app's to answer; otherwise nothing came in time
            if (self.cycle is None or self.cycle.response_complete) and not self.transport.is_closing():
                self.transport.close()

        def on_response_complete(self) -> None:
            super().on_response_complete()
            # the next request's head: idle up to the keep-alive (uvicorn closes then), then head_s to send it
            self._arm(keep_alive_s + head_s)

        def connection_lost(self, exc) -> None:
            if self._head_timer is not None:
                self._head_timer.cancel()
                self._head_timer = None
            super().connection_lost(exc)

    return DeadlineH11
