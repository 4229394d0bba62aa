"""An ensemble job's LOSS (``status``, the dashboard, the API's ``last_loss``): the lowest of its members' newest
losses, not the loss of whichever member reported last. Its members are different models trained by turns in
flotillas (``train.fleet_job``): the newest step row's loss jumped between them from one refresh to the next (a
trained member's, then a starting one's) and read as the job's loss rising and falling."""
from __future__ import annotations

import math
from typing import TYPE_CHECKING, Iterable

from dlsched.numbers import is_number
from dlsched.service.store import member_losses

if TYPE_CHECKING:
    from dlsched.service.store import Store


class MemberLosses:
    """Each ensemble job's members' newest losses, read from the store once (a restarted service), then kept from
    the step rows the loop reads."""

    def __init__(self, store: "Store"):
        self._store = store
        self._losses: dict[int, dict[str, float]] = {}

    def best(self, job_id: int, records: Iterable[dict], otherwise: float | None) -> float | None:
        """The lowest newest loss of the job's members, ``records`` (its new step rows, oldest first) included;
        ``otherwise`` where no row names a member (not an ensemble, or none reported a loss yet)."""
        known = self._losses.get(job_id)
        for r in records:
            member, loss = r.get("member"), r.get("loss")
            if not isinstance(member, str) or not is_number(loss) or not math.isfinite(loss):
                continue
            if known is None:
                known = self._losses[job_id] = member_losses(self._store, job_id)
            known[member] = float(loss)
        return min(known.values()) if known else otherwise

    def forget(self, job_id: int) -> None:
        self._losses.pop(job_id, None)
