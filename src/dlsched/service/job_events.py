"""The events a job's own processes write into its ``progress.jsonl``, bounded before the store copies them.

Each was a row of the store's ``events`` table, whatever its size and however many: a script that called
``dlsched.torch.report()`` between steps in a loop, or wrote its own lines there, added up to 4 MiB of rows a round,
for as long as it ran (retention only purges jobs that ended). Now:

* one event's fields are at most ``MAX_DETAIL_BYTES`` of JSON: past it, each field over ``MAX_FIELD_BYTES`` is left
  out and named in ``dropped_fields``;
* the frequent kinds (``checkpoint``, ``metrics``, ``straggler``, a malformed line, a kind the runtime never writes)
  are copied at ``RATE_PER_S`` a job on average, ``BURST`` at once; the rest (a resize, a loss, the end: rare, and
  what ``dlsched events`` and the loop read) always are;
* a read copies at most ``MAX_PER_READ`` events of a job.

What is left out stays in the job's ``progress.jsonl``; each job's drops are logged in one line, then at most every
``REPORT_EVERY_S`` with the counts since, and stored as one ``events_dropped`` event at the same pace.
"""
from __future__ import annotations

import json
import logging
from collections import Counter

from dlsched.numbers import finite
from dlsched.service.store import Store, on_rollback
from dlsched.train.protocol import EVENTS

log = logging.getLogger("dlsched.service")

EVENTS_DROPPED = "events_dropped"
FREQUENT = frozenset({"checkpoint", "metrics", "straggler", "malformed_progress"})
MAX_DETAIL_BYTES = 16 << 10
MAX_FIELD_BYTES = 1 << 10
RATE_PER_S = 1.0
BURST = 300
MAX_PER_READ = 1000
REPORT_EVERY_S = 600.0


def bounded_detail(detail: dict) -> dict:
    """``detail`` as stored: whole when its JSON is at most ``MAX_DETAIL_BYTES``, else without its large fields."""
    sizes = {k: len(json.dumps(finite(v), default=str)) for k, v in detail.items()}
    if sum(sizes.values()) + 4 * len(sizes) <= MAX_DETAIL_BYTES:
        return detail
    big = sorted(k for k, n in sizes.items() if n > MAX_FIELD_BYTES)
    return {k: v for k, v in detail.items() if k not in big} | {"dropped_fields": big}


class JobEvents:
    """Stores the events of each read of a job's progress file, within the bounds above."""

    def __init__(self, store: Store):
        self.store = store
        self._tokens: dict[int, tuple[float, float]] = {}   # job -> (tokens, at)
        self._dropped: dict[int, Counter] = {}
        self._reported: dict[int, float] = {}
        self._bad_fields: set[tuple[int, str]] = set()     # (job, field) a malformed_progress event named

    def store_read(self, job_id: int, records: list[dict], now: float) -> None:
        """The events among one read's ``records`` (each ``{"event": kind, ...}``), in order. Inside a transaction
        that rolls back, the job's books are put back as they were: the retry reads the same records again (its
        offset was not stored), and a full disk's failed rounds had spent the job's budget on them (13 of 376
        checkpoint events stored) and counted them dropped once a round."""
        on_rollback(self.store, self._books(job_id))
        stored, dropped = 0, Counter()
        for r in records:
            kind = str(r["event"])[:64]   # a kind is a short name; a line can make it anything
            if "field" in r and kind == "malformed_progress":   # once per job and field, not every read
                if (job_id, r["field"]) in self._bad_fields:
                    continue
                self._bad_fields.add((job_id, r["field"]))
            if stored >= MAX_PER_READ or (kind in FREQUENT or kind not in EVENTS) and not self._take(job_id, now):
                dropped[kind] += 1
                continue
            self.store.event(f"job_{kind}", job_id, now, **bounded_detail({k: v for k, v in r.items() if k != "event"}))
            stored += 1
        if dropped:
            self._dropped.setdefault(job_id, Counter()).update(dropped)
        self._report(job_id, now)

    def _books(self, job_id: int):
        """A function that puts ``job_id``'s books back as they are now."""
        tokens, dropped, reported = self._tokens.get(job_id), Counter(self._dropped.get(job_id, ())), \
            self._reported.get(job_id)
        bad = {f for f in self._bad_fields if f[0] == job_id}

        def restore() -> None:
            for books, value in ((self._tokens, tokens), (self._dropped, dropped or None),
                                 (self._reported, reported)):
                books.pop(job_id, None)
                if value is not None:
                    books[job_id] = value
            self._bad_fields.difference_update({f for f in self._bad_fields if f[0] == job_id} - bad)
        return restore

    def forget(self, job_id: int, now: float) -> None:
        """The job ended: say what was left out since the last report, then drop its books."""
        self._report(job_id, now, final=True)
        self._tokens.pop(job_id, None)
        self._reported.pop(job_id, None)

    def _take(self, job_id: int, now: float) -> bool:
        tokens, at = self._tokens.get(job_id, (float(BURST), now))
        tokens = min(float(BURST), tokens + max(0.0, now - at) * RATE_PER_S)
        ok = tokens >= 1.0
        self._tokens[job_id] = (tokens - 1.0 if ok else tokens, now)
        return ok

    def _report(self, job_id: int, now: float, final: bool = False) -> None:
        counts = self._dropped.get(job_id)
        last = self._reported.get(job_id)
        if not counts or not final and last is not None and now - last < REPORT_EVERY_S:
            return
        n = sum(counts.values())
        kinds = ", ".join(f"{k}: {c}" for k, c in counts.most_common(5))
        log.warning("job %s: %d events its processes wrote were not stored (%s): over %g a second on average "
                    "(%d at once) or %d a read; they stay in its progress.jsonl", job_id, n, kinds, RATE_PER_S, BURST,
                    MAX_PER_READ)
        self.store.event(EVENTS_DROPPED, job_id, now, count=n, kinds=dict(counts.most_common(20)))
        self._dropped.pop(job_id)
        self._reported[job_id] = now
