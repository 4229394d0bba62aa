"""Rank 0's view of the coordinator's stop flag, read off the step path.

A store round trip per read costs about a millisecond on a busy machine, which a 10 ms step would pay in
full; a daemon thread with its own store connection polls every ``FLAG_POLL_S`` instead, and the step only
reads the last value. The value is tagged with the generation it was read for, so a flag read just before a
regroup is never taken for the next generation's.
"""
from __future__ import annotations

import atexit
import threading

from dlsched.train.protocol import stop_key
from dlsched.train.store_client import connect_store

FLAG_POLL_S = 0.1  # a resize or preemption waits at most about this long for rank 0 to see its flag (each
# poll wakes this thread and the store's: fewer polls preempt the workers less often)


class FlagWatch:
    def __init__(self, store_address: str, session):
        self.address, self.s = store_address, session  # its generation, rank and whether it has joined
        self.seen: tuple[int, float] = (-1, 0.0)  # (generation, flag) of the last poll
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._poll, name="dlsched-flag-watch", daemon=True)
        self.thread.start()
        atexit.register(self.stop)  # a thread still inside the store client at interpreter exit aborts it

    def stop(self) -> None:
        self.stopped.set()
        self.thread.join(timeout=5)

    def flag(self, generation: int) -> float:
        seen_generation, value = self.seen
        return value if seen_generation == generation else 0.0

    def _poll(self) -> None:
        try:
            store = connect_store(self.address)
            while not self.stopped.is_set():
                s = self.s
                if s.joined and s.rank == 0:
                    generation = s.generation
                    key = stop_key(generation)
                    self.seen = (generation, float(store.get(key)) if store.check([key]) else 0.0)
                self.stopped.wait(FLAG_POLL_S)
        except (RuntimeError, OSError):
            return  # the coordinator is gone: the step path notices (its parent changed) and exits
