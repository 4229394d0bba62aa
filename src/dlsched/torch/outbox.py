"""A script's progress records on their way to the coordinator (or, standalone, to the user's terminal).

A push is a store round trip (about a millisecond on a busy machine, more when the coordinator waits for a
core), which a 10 ms step would pay in full and its peers with it at the next all-reduce; a daemon thread
pushes instead, woken every ``FLUSH_S`` or by an event. ``flush`` pushes at once (before an End or an exit).
"""
from __future__ import annotations

import atexit
import json
import threading
import time
from collections import deque

from dlsched.torch.terminal_echo import TerminalEcho
from dlsched.train.protocol import PROGRESS_QUEUE
from dlsched.train.store_client import connect_store

FLUSH_S = 0.25  # step records reach progress.jsonl at most about this late


class ProgressOutbox:
    def __init__(self, store_address: str | None):
        self.records: deque[dict] = deque()  # not yet pushed; append/popleft are atomic across threads
        self.flushed = time.perf_counter()
        self.store = connect_store(store_address) if store_address else None  # None: standalone
        self.terminal = TerminalEcho() if self.store is None else None
        self.lock = threading.Lock()  # one push at a time: the coordinator gets the records in emit order
        self.due = threading.Event()
        self.closed = False
        if self.store is not None:
            self.thread = threading.Thread(target=self._run, name="dlsched-progress", daemon=True)
            self.thread.start()
            atexit.register(self.close)  # a thread still inside the store client at interpreter exit aborts it
        else:
            atexit.register(self.terminal.flush)  # the run's last step, when no event followed it

    def emit(self, record: dict) -> None:
        if self.terminal is not None:
            self.terminal.emit(record)
            return
        self.records.append(record)
        if "event" in record or time.perf_counter() - self.flushed >= FLUSH_S:
            self.flushed = time.perf_counter()
            self.due.set()

    def flush(self) -> None:
        """Push every record emitted so far before returning."""
        if self.terminal is not None:
            self.terminal.flush()
        else:
            with self.lock:
                self._push()

    def close(self) -> None:
        if self.store is None or self.closed:
            return
        self.closed = True
        self.due.set()
        self.thread.join(timeout=5)
        try:
            self.flush()
        except (RuntimeError, OSError):
            pass  # the coordinator is gone: nobody to tell

    def _push(self) -> None:
        batch = []
        while self.records:
            batch.append(self.records.popleft())
        if batch:
            self.store.queue_push(PROGRESS_QUEUE, json.dumps(batch))

    def _run(self) -> None:
        try:
            while not self.closed:
                self.due.wait()
                self.due.clear()
                with self.lock:
                    self._push()
        except (RuntimeError, OSError):
            return  # the coordinator is gone: the step path notices (its parent changed) and exits
