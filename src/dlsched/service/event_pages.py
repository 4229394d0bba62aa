"""The newest events, a page at a time: ``GET /events?tail=N`` and ``GET /jobs/{id}/events?tail=N``.

Events were only ever read oldest first (``after`` an id, 1 000 a request): on a service that had run for months,
``dlsched events`` printed the 1 000 first events it ever stored and nothing since, and ``-f`` paged through all
of them before it showed a new one. ``tail`` answers the newest ``N`` below ``before`` (in id order, as every
events answer is), and the id to ask the next older page with.
"""
from __future__ import annotations

import json
from typing import Iterable

from dlsched.service.store import Store


def newest_events(store: Store, n: int, job_id: int | None = None, before: int | None = None,
                  kinds: Iterable[str] | None = None, after_id: int = 0) -> tuple[list[dict], int | None]:
    """The newest ``n`` events with an id in (``after_id``, ``before``), of ``job_id`` and ``kinds`` where given, oldest
    first; and the ``before`` of the next older page (None: there is none)."""
    q, args = "SELECT * FROM events WHERE id > ?", [after_id]
    for cond, value in (("job_id = ?", job_id), ("id < ?", before)):
        if value is not None:
            q, args = f"{q} AND {cond}", args + [value]
    if kinds is not None:
        kinds = list(kinds)
        q, args = q + f" AND kind IN ({','.join('?' * len(kinds))})", args + kinds
    rows = store._conn().execute(q + " ORDER BY id DESC LIMIT ?", args + [n + 1]).fetchall()
    page = [dict(r) | {"detail": json.loads(r["detail"])} for r in reversed(rows[:n])]
    return page, page[0]["id"] if len(rows) > n else None
