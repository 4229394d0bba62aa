"""The CLI's reads of the service's events (``dlsched events``): the newest first, back only as far as it shows.

A service that ran for months has hundreds of thousands of events; ``events`` printed the 1 000 oldest of them.
Now it shows the newest ``--limit`` (checkpoints summarised and ``--since`` applied, as before), asking the service
for older pages (``tail`` and ``before``: ``service/event_pages.py``) only until it has them."""
from __future__ import annotations

from typing import Callable

PAGE = 1000


def newest_events(client, path: str, params: dict, limit: int, shown: Callable[[dict], bool],
                  since: float | None) -> tuple[list[dict], bool]:
    """The events (all kinds the query names, oldest first) from the oldest of the newest ``limit`` that ``shown``
    keeps; and whether older ones were left unread."""
    rows: list[dict] = []
    before = None
    while True:
        r = client.request("GET", path, params={**params, "tail": PAGE, **({"before": before} if before else {})})
        rows = r.json() + rows
        before = r.headers.get("x-next-before")
        kept = [i for i, e in enumerate(rows) if shown(e)]
        if len(kept) >= limit:
            return rows[kept[-limit]:], True
        if before is None or (since is not None and rows and rows[0]["time"] < since):
            return rows, before is not None and since is None


def every_event(client, path: str, params: dict, after: int = 0) -> list[dict]:
    """Every event after id ``after``, oldest first (``--limit 0``)."""
    rows: list[dict] = []
    while True:
        page = client.get(path, params={**params, "after": after, "limit": PAGE})
        rows += page
        if len(page) < PAGE:
            return rows
        after = page[-1]["id"]
