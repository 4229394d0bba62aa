"""A job's stored progress as columns in memory, extended with the rows stored since (``Store.progress``'s
``after_id``).

The live loop refits a job every round it trained. Read whole from the store and walked record by record, a day
at one step a second (100 000 rows) cost about 0.5 s of SQLite rows turned into dicts and 0.35 s of per-record
Python in the refit, per job and 2 s round. The columns cost 13 floats a row, and a round reads only its new rows.
"""
from __future__ import annotations

import math
from typing import Iterable

import numpy as np

from dlsched.numbers import is_number

FIELDS = ("time", "step", "epoch", "samples", "loss", "samples_per_s", "workers", "batch_size", "lr", "lr_factor",
          "grad_sqr", "grad_var", "noise_batch")
INTEGER_FIELDS = frozenset({"step", "epoch", "workers", "batch_size", "noise_batch"})


class ProgressHistory:
    """Progress records as float columns, a missing value NaN; ``last_id``: the newest store row read."""

    def __init__(self, columns: dict[str, np.ndarray] | None = None, last_id: int = 0):
        self._cols = columns or {f: np.empty(0) for f in FIELDS}
        self.last_id = last_id

    @classmethod
    def of(cls, records: Iterable[dict]) -> "ProgressHistory":
        history = cls()
        history.extend(list(records))
        return history

    def extend(self, rows: list[dict]) -> None:
        """Append records (a store row's ``id`` advances ``last_id``)."""
        if not rows:
            return
        for f in FIELDS:
            new = np.array([_number(r.get(f)) for r in rows], float)
            self._cols[f] = np.concatenate([self._cols[f], new])
        self.last_id = max([self.last_id] + [r["id"] for r in rows if r.get("id") is not None])

    def __len__(self) -> int:
        return len(self._cols["time"])

    def column(self, name: str) -> np.ndarray:
        return self._cols[name]

    def where(self, keep: np.ndarray) -> "ProgressHistory":
        """The records ``keep`` selects (itself when it selects them all)."""
        if keep.all():
            return self
        return ProgressHistory({f: c[keep] for f, c in self._cols.items()}, self.last_id)

    def tail(self, n: int) -> list[dict]:
        """The newest ``n`` records as dicts, as the store gives them: None where missing, integers as ints."""
        start = max(0, len(self) - n)
        cols = {f: self._cols[f][start:].tolist() for f in FIELDS}
        return [{f: _value(f, cols[f][i]) for f in FIELDS} for i in range(len(self) - start)]


def _number(v) -> float:
    return float(v) if is_number(v) else math.nan


def _value(field: str, v: float):
    if math.isnan(v):
        return None
    return int(v) if field in INTEGER_FIELDS else v
