"""``target_reached``: the event the service records once per job, at the first refit whose stated target (``submit
--target``, ``--target-loss``) the job's log has got to, with where and when it got there
(``finish_times.stated_target``): ``dlsched events --type target_reached``, the dashboard's event list, and
``dlsched_events_total{kind="target_reached"}`` for an alert."""
from __future__ import annotations

from dlsched.service.finish_times import stated_target
from dlsched.service.store import Store

TARGET_REACHED = "target_reached"


class TargetReached:
    """Records each job's ``target_reached`` once; a job told before a restart is not told again."""

    def __init__(self, store: Store):
        self.store = store
        self._told: set[int] = set()

    def check(self, job_id: int, now: float, loss_fit: dict | None) -> None:
        target = stated_target({"loss_fit": loss_fit})
        if target is None or not target["reached"] or job_id in self._told:
            return
        self._told.add(job_id)
        if not self.store.events(job_id, kinds=[TARGET_REACHED], limit=1):
            self.store.event(TARGET_REACHED, job_id, now, metric=target["metric"], value=target["value"],
                             step=target["step"], time=target["time"])
