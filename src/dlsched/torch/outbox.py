"""A script's progress records on their way to the coordinator (or, standalone, to the user's terminal)."""
from __future__ import annotations

import json
import time

from dlsched.train.protocol import PROGRESS_QUEUE

FLUSH_S = 0.25
SHOWN_STANDALONE = ("event", "step", "epoch", "loss", "lr", "metrics", "from_batch", "to_batch", "goodput",
                    "efficiency", "rule", "factor")  # step records reach progress.jsonl at most this late


class ProgressOutbox:
    def __init__(self, store):
        self.store = store  # None: standalone
        self.records: list[dict] = []  # not yet pushed to the coordinator
        self.flushed = 0.0

    def emit(self, record: dict) -> None:
        if self.store is None:  # standalone: the user's terminal, every event and every 50th step
            if "event" not in record and record["step"] % 50 and not record["metrics"]:
                return
            shown = {k: v for k, v in record.items() if k in SHOWN_STANDALONE}
            print("dlsched:", json.dumps(shown), flush=True)
            return
        self.records.append(record)
        if "event" in record or time.perf_counter() - self.flushed >= FLUSH_S:
            self.flush()

    def flush(self) -> None:
        """Step records go to the coordinator in batches (one store round trip), events at once."""
        if self.records and self.store is not None:
            self.store.queue_push(PROGRESS_QUEUE, json.dumps(self.records))
        self.records, self.flushed = [], time.perf_counter()
