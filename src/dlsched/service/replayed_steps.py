"""A restore's replayed steps replace the rows of the steps it rolled back, so each step is stored once.

A restore from a checkpoint (a lost worker, a resumed coordinator) trains the steps after the checkpoint again; the
runtime logs them again, under the new generation. Appended as they came, the store held two rows for each such
step: samples were counted right (the newest record's), but the curve drawn and the loss fit saw each replayed step
twice, the rolled-back value beside the committed one. A job's steps (not an ensemble member's: its ``step`` counts
every member's) only grow within what its model holds, so a record at a step at or below a stored one means the
rows from that step on were rolled back: they are deleted, and the replay's rows stored in their place.
"""
from __future__ import annotations

import sqlite3


def _step(rec: dict) -> int | None:
    step = rec.get("step")
    if rec.get("member") is not None or not isinstance(step, int) or isinstance(step, bool):
        return None
    return step


def drop_rolled_back(c: sqlite3.Connection, job_id: int, records: list[dict]) -> tuple[list[dict], int]:
    """``records`` less those a later record of the same read rolls back, and the count of stored rows deleted for
    being rolled back (in the caller's transaction)."""
    if all(_step(r) is None for r in records):
        return records, 0
    last = c.execute("SELECT step FROM progress WHERE job_id = ? AND member IS NULL AND step IS NOT NULL "
                     "ORDER BY id DESC LIMIT 1", (job_id,)).fetchone()
    stored_top = last[0] if last else None
    kept: list[dict] = []
    deleted = 0
    for rec in records:
        step = _step(rec)
        if step is not None:
            while kept and _step(kept[-1]) is not None and _step(kept[-1]) >= step:
                kept.pop()
            if stored_top is not None and stored_top >= step:
                deleted += _delete_from(c, job_id, step)
                stored_top = None   # every stored row left is below ``step``
        kept.append(rec)
    return kept, deleted


def _delete_from(c: sqlite3.Connection, job_id: int, step: int) -> int:
    """Delete the job's newest rows back to the first below ``step`` (the rolled-back ones: a checkpoint's worth)."""
    ids = []
    rows = c.execute("SELECT id, step FROM progress WHERE job_id = ? AND member IS NULL ORDER BY id DESC", (job_id,))
    for row_id, s in rows:
        if s is not None and s < step:
            break
        ids.append(row_id)
    rows.close()
    c.executemany("DELETE FROM progress WHERE id = ?", [(i,) for i in ids])
    return len(ids)
