"""The policy's view of an ensemble job, from its members' profiles: what the forecast rolls forward, so the live
policy and the forecast see one ensemble. Its speed is its still-training members' FLEET plan on g slots
(``forecast.members_speed``), never a fit of the total samples/s it reported: that total depends on which members
happened to run (its linear member alone ~28k samples/s on 1 slot, a 3-member flotilla ~6.5k/s on 3), and the
elastic policy, seeing a speed curve that flipped with it, resized one job 13 times in 2 minutes."""
from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from dlsched.policy.base import JobView
from dlsched.policy.fleet import ModelProfile
from dlsched.service.fleet_status import MEMBER_WORK_EVENTS, members_left
from dlsched.service.forecast import on_members, with_members
from dlsched.service.member_progress import Measured, member_progress

if TYPE_CHECKING:
    from dlsched.service.store import Store


def ensemble_view(view: JobView, events: list[dict], now: float, measured: dict[str, Measured] | None = None) -> JobView:
    """``view`` of an ensemble job with its members from its events (oldest first; ``fleet_status.
    MEMBER_WORK_EVENTS``) at ``now``: capped to the slots its still-training members can use (each its
    ``max_workers``: its profile's length; at least 1, the last member's end is the job's: no grow, no preemption
    while it finishes), at the speed their profiles give, their samples left its remaining work. Unchanged before
    the runtime profiled its members (it trains nothing before). ``measured``: the running members' measured
    progress (``member_progress``), which sets where they stand and their speed once they have some."""
    profiled = [float(e["time"]) for e in events if e["kind"] == "job_profiled"]
    if not profiled:
        return view
    changed = view.attrs.get("changed_at")
    if changed is not None and changed < profiled[-1]:
        # its (re)start's pause included profiling its members, which a resize does not repeat (the profiles are
        # cached): counted in, the restart hold kept a 3-slot ensemble on 1 slot for as long again as it profiled
        view = replace(view, attrs={**view.attrs, "changed_at": profiled[-1]})
    members = members_left(events, now, measured)
    if not members and view.placement:
        # every member left: the runtime writes its report and exits. Shrunk to 1 or preempted there (the job's
        # finish not read yet), it was re-queued and started again to say it had finished (a digits ensemble, live)
        held = sum(view.placement.values())
        return replace(view, requested_gpus=held, min_gpus=held, max_gpus=held, preemptible=False,
                       remaining_samples=0.0)
    view = on_members(view, [ModelProfile(name, tuple(rates)) for name, rates, _ in members], at_least=1)
    return with_members(view, members) if members else view


def ensemble_view_of(store: "Store", job_id: int, view: JobView, now: float) -> JobView:
    """``ensemble_view`` from the job's events in ``store``."""
    events = store.events(job_id, limit=1_000_000, kinds=MEMBER_WORK_EVENTS)
    return ensemble_view(view, events, now, member_progress(store, job_id, events))
