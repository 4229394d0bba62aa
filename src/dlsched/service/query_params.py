"""A query parameter the route does not take is refused (422, one line naming it and what the route takes): it was
ignored, and the answer was what no parameter asks for: ``/jobs/7/progress?after_id=500`` (the route's is ``after``)
answered every row from the first, ``/events?job=7`` every job's events."""
from __future__ import annotations

import difflib

from fastapi import Request
from starlette.exceptions import HTTPException

ANY_ROUTE = ("token",)   # the dashboard page's ?token=, which its script moves into the session at once


def _taken(dependant) -> list[str]:
    return [p.alias for p in dependant.query_params] + [n for d in dependant.dependencies for n in _taken(d)]


async def known_query(request: Request) -> None:
    """A FastAPI dependency of every route (the app's)."""
    route = request.scope.get("route")
    dependant = getattr(route, "dependant", None)
    if dependant is None or not request.query_params:
        return
    taken = _taken(dependant)
    for name in request.query_params:
        if name not in taken and name not in ANY_ROUTE:
            hint = difflib.get_close_matches(name, taken, n=1)
            raise HTTPException(422, f"query: unknown parameter {name[:40]!r}"
                                + (f"; did you mean {hint[0]!r}?" if hint else
                                   f" ({request.url.path[:80]} takes: {', '.join(taken) or 'none'})"))
