"""Which evaluation (``metrics``) and ``epoch_end`` records are a restart's replay, to be recorded once.

A restart from a checkpoint replays the steps after it: the script evaluates again at the steps it evaluated at
before, and ends again the epochs it ended. Those records are in progress.jsonl already; written again they
counted twice (the service's metric points and the target fit's, the epoch lines of ``dlsched logs``). A replayed
step record is kept: its generation tells which one counts (``data.ROLLBACKS``). An evaluation at a step already
evaluated at is dropped only while a restore replays it: one after a resize (no restore) is new, and kept.
"""
from __future__ import annotations

from collections import Counter
from typing import Iterable


class ReplayedRecords:
    def __init__(self):
        self.evaluations: Counter[int] = Counter()   # step -> metrics records kept at it
        self.ended: set[int] = set()                 # epochs whose epoch_end is kept: an epoch ends once
        self.replaying: Counter[int] = Counter()     # step -> metrics records the restored group will emit again

    @classmethod
    def from_log(cls, records: Iterable[dict], restored_step: int) -> "ReplayedRecords":
        """A resumed run's: the records an earlier run kept, replayed from the checkpoint of ``restored_step``."""
        replays = cls()
        for rec in records:
            replays.keep(rec)
        replays.restored(restored_step)
        return replays

    def restored(self, step: int) -> None:
        """A group restarts from the checkpoint of ``step``: the evaluations recorded from that step on come again
        (one at the checkpoint's own step too, when the checkpoint was written before it)."""
        self.replaying = Counter({s: n for s, n in self.evaluations.items() if s >= step})

    def keep(self, rec: dict) -> bool:
        """Whether ``rec`` is recorded (False: a replay of one that is)."""
        kind, step = rec.get("event"), rec.get("step")
        if kind is None and isinstance(step, int):   # an evaluation comes before the next step: the replay is past it
            for s in [s for s in self.replaying if s < step]:
                del self.replaying[s]
        elif kind == "epoch_end":
            if rec.get("epoch") in self.ended:
                return False
            self.ended.add(rec.get("epoch"))
        elif kind == "metrics":
            if self.replaying[step] > 0:
                self.replaying[step] -= 1
                return False
            self.evaluations[step] += 1
        return True
