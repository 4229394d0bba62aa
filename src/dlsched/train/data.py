"""Exactly-once data: a partition table with offsets, owned by the coordinator.

Each epoch the sample ids are shuffled deterministically (seed, epoch) and cut into logical
partitions; every partition has an offset that only moves forward when a synchronous step that
trained those samples has committed. A global step takes the next ``B`` unconsumed samples (in
partition order) and splits them among the current ranks by their local batch sizes. Because the
global order does not depend on how many workers there are, a resize re-splits the unfinished
remainder without skipping or repeating a sample, and (in fixed-global-batch mode) without even
changing which samples form each global batch — so the loss curve continues as if nothing happened.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np

from dlsched.train.files import read_json_lines
from dlsched.train.progress_log import iter_records


@lru_cache(maxsize=4)
def epoch_order(num_samples: int, seed: int, epoch: int) -> np.ndarray:
    """The deterministic per-epoch shuffle: same (seed, epoch) -> same order on every process.

    Cached (it is asked for every step) and read-only, so a caller cannot corrupt the cache."""
    order = np.random.default_rng([seed, epoch]).permutation(num_samples)
    order.flags.writeable = False
    return order


@dataclass
class PartitionTable:
    """Partition offsets for one epoch. ``bounds[p]..bounds[p+1]`` are partition p's positions in the epoch order.

    Plain int lists, not arrays: a script reads and advances the table every step, where numpy's per-call
    cost (tens of microseconds on a cache the step's own compute has just evicted) was most of the bookkeeping."""

    num_samples: int
    seed: int
    epoch: int
    bounds: list[int]
    offsets: list[int]  # consumed count per partition
    shuffle: bool = True  # False: every epoch in id order
    # samples trained in the epochs before this one (None: each whole), and in the one before where a loop broke out
    # of it early (a script's step limit): counted as whole, the job's progress jumped at each epoch's end and its
    # budget counted samples it would never train
    before: int | None = None
    cut: int | None = None
    steps_before: int | None = None   # a script's reference-batch steps in the epochs before (its LR pace), with before
    limit: int | None = None   # samples an epoch trains (a script's steps_per_epoch): its first ones in take order

    @property
    def epoch_size(self) -> int:
        return self.num_samples if self.limit is None else min(self.num_samples, self.limit)

    @classmethod
    def fresh(cls, num_samples: int, seed: int, epoch: int, num_partitions: int = 16,
              shuffle: bool = True) -> "PartitionTable":
        parts = max(1, min(num_partitions, num_samples))
        bounds = np.linspace(0, num_samples, parts + 1).round().astype(np.int64).tolist()
        return cls(num_samples, seed, epoch, bounds, [0] * parts, shuffle)

    @property
    def consumed(self) -> int:
        return sum(self.offsets)

    @property
    def trained(self) -> int:
        """Samples trained in every epoch so far (a step record's ``samples``)."""
        return (self.epoch * self.epoch_size if self.before is None else self.before) + self.consumed

    def planned(self, epochs: int) -> int:
        """Samples trained by the end of ``epochs`` epochs: whole ones, or, once an epoch was cut short, each epoch
        from this one on as long as that one."""
        per = self.cut or self.epoch_size
        return self.trained - self.consumed + max(self.consumed, per) + max(0, epochs - self.epoch - 1) * per

    @property
    def remaining(self) -> int:
        return self.epoch_size - self.consumed

    @property
    def done(self) -> bool:
        return self.remaining == 0

    def _order(self) -> np.ndarray:
        return epoch_order(self.num_samples, self.seed, self.epoch) if self.shuffle else np.arange(self.num_samples)

    def _next_spans(self, n: int) -> list[tuple[int, int, int]]:
        """(partition, position in the epoch order, count) of the next ``n`` unconsumed samples."""
        spans = []
        for p in range(len(self.offsets)):
            if n <= 0:
                break
            start = self.bounds[p] + self.offsets[p]
            k = min(n, self.bounds[p + 1] - start)
            if k > 0:
                spans.append((p, start, k))
                n -= k
        return spans

    def take(self, n: int) -> np.ndarray:
        """Mark the next ``n`` unconsumed samples as consumed and return their ids."""
        order = self._order()
        spans = self._next_spans(n)
        for p, _, k in spans:
            self.offsets[p] += k
        return np.concatenate([order[start:start + k] for _, start, k in spans]) if spans else np.empty(0, np.int64)

    def remaining_ids(self) -> np.ndarray:
        """Every unconsumed id, in the order successive ``take`` calls hand them out."""
        order = self._order()
        ids = np.concatenate([order[b + o:e] for b, o, e in zip(self.bounds[:-1], self.offsets, self.bounds[1:])])
        return ids if self.limit is None else ids[:self.remaining]

    def advance(self, n: int) -> None:
        """``take(n)`` without the ids (a script's step path)."""
        for p, _, k in self._next_spans(n):
            self.offsets[p] += k

    def next_epoch(self) -> "PartitionTable":
        table = PartitionTable.fresh(self.num_samples, self.seed, self.epoch + 1, len(self.offsets), self.shuffle)
        table.limit = self.limit
        if self.before is not None or not self.done:
            table.before, table.cut = self.trained, None if self.done else self.consumed
        return table

    def copy(self) -> "PartitionTable":
        return PartitionTable(self.num_samples, self.seed, self.epoch, list(self.bounds), list(self.offsets),
                              self.shuffle, before=self.before, cut=self.cut, limit=self.limit,
                              steps_before=self.steps_before)

    def snapshot(self) -> dict:
        snap = {"num_samples": self.num_samples, "seed": self.seed, "epoch": self.epoch,
                "bounds": list(self.bounds), "offsets": list(self.offsets), "shuffle": self.shuffle}
        if self.before is not None:
            snap.update(before=self.before, cut=self.cut, steps_before=self.steps_before)
        if self.limit is not None:
            snap["limit"] = self.limit
        return snap

    @classmethod
    def from_snapshot(cls, snap: dict) -> "PartitionTable":
        before, cut, limit, steps = snap.get("before"), snap.get("cut"), snap.get("limit"), snap.get("steps_before")
        return cls(int(snap["num_samples"]), int(snap["seed"]), int(snap["epoch"]),
                   [int(b) for b in snap["bounds"]], [int(o) for o in snap["offsets"]],
                   bool(snap.get("shuffle", True)), before=None if before is None else int(before),
                   cut=None if cut is None else int(cut), limit=None if limit is None else int(limit),
                   steps_before=None if steps is None else int(steps))


def _share_ends(n: int, local_sizes: list[int]) -> np.ndarray:
    """Where each rank's share of an ``n``-sample global batch ends: in proportion to ``local_sizes``."""
    return np.round(n * np.cumsum(local_sizes) / sum(local_sizes)).astype(np.int64)


def split_global_batch(ids: np.ndarray, local_sizes: list[int]) -> list[np.ndarray]:
    """Give rank r its share of a global batch: ``local_sizes[r]`` ids, or a proportional share of a short last batch."""
    return np.split(ids, _share_ends(len(ids), local_sizes)[:-1])


def rank_shares(table: PartitionTable, global_batch: int, local_sizes: list[int], rank: int
                ) -> list[tuple[int, list[int]]]:
    """The rest of ``table``'s epoch as successive ``take(global_batch)`` would split it: per step, the global
    batch's size and ``rank``'s ids. Computed at once (the full batches as one array slice), so a step only
    reads its entry."""
    ids = table.remaining_ids()
    full = len(ids) // global_batch
    cuts = [0, *_share_ends(global_batch, local_sizes)]
    rows = ids[:full * global_batch].reshape(full, global_batch)[:, cuts[rank]:cuts[rank + 1]].tolist()
    shares = [(global_batch, row) for row in rows]
    if len(ids) > full * global_batch:
        rest = ids[full * global_batch:]
        shares.append((len(rest), split_global_batch(rest, local_sizes)[rank].tolist()))
    return shares


def record_path(job_dir: Path, worker_id: int) -> Path:
    return Path(job_dir) / "samples" / f"worker-{worker_id}.jsonl"


# the events after which a group went back to an earlier step -> the field naming that step
ROLLBACKS = {"worker_lost": "restored_step", "resumed": "restored_step", "shrunk": "step"}


def committed_sample_ids(job_dir: Path) -> Counter:
    """Multiset of sample ids trained into the final model, from the workers' sample records.

    Workers record ``{"generation", "step", "ids"}`` just before each step's all-reduce (only when the job
    runs with ``record_samples``). A restore from a checkpoint (a ``worker_lost`` event, or ``resumed`` when a
    new coordinator took the job over, each with ``new_generation`` and ``restored_step`` in progress.jsonl)
    discards what earlier generations trained after that step; so does an in-memory shrink (``shrunk``, its
    ``step`` the last one the survivors committed): the step the lost peer cut was recorded before its all-reduce
    and never committed, and the smaller group trains it again. A step recorded twice in a run and generation
    counts as its last record (a script's loop that broke out mid-step retracts it with ``ids: []``). A torn
    last line (a kill mid-write) is skipped.
    """
    job_dir = Path(job_dir)
    rollbacks = [(rec["new_generation"], rec[ROLLBACKS[rec["event"]]])
                 for rec in iter_records(job_dir, bad=lambda *_: None)
                 if rec.get("event") in ROLLBACKS]   # a damaged line mid-file: the resume passed over it too
    seen: Counter = Counter()
    for path in sorted((job_dir / "samples").glob("worker-*.jsonl")):
        last: dict[tuple, list[int]] = {}   # a step dropped before its optimizer step is recorded again, ids []
        for rec in read_json_lines(path):
            if any(rec["generation"] < g and rec["step"] > s for g, s in rollbacks):
                continue
            last[(rec.get("run"), rec["generation"], rec["step"])] = rec["ids"]
        for ids in last.values():
            seen.update(ids)
    return seen
