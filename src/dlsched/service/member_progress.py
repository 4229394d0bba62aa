"""An ensemble's members as measured: where each member of the running flotillas stands and its samples/s, from the
step records the FLEET runtime writes for it (``member``, ``member_step``; ``store.member_reports``).

The flotillas are planned on profiles from short runs, which miss under load (the status, taking a profiled rate
~1.8x too high, showed ``LEFT -0s`` while the member still trained). Ordinary jobs' DONE and speed are their measured
progress; an ensemble's members' are too once they have reported some since their flotillas were planned
(``fleet_status``)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterable, Mapping

from dlsched.numbers import is_number

if TYPE_CHECKING:
    from dlsched.service.store import Store


@dataclass(frozen=True)
class Measured:
    time: float           # its newest step record (the runtime's clock)
    samples: float        # samples it had trained by then
    rate: float | None    # samples/s between its first and newest record of the plan; None: one record so far

    def at(self, now: float) -> float:
        """Its samples at ``now``, gone on at its measured rate."""
        return self.samples + (self.rate or 0.0) * max(0.0, now - self.time)


def measured(reports: Mapping[str, tuple[dict, dict]], since: float | None = None,
             planned: Mapping[str, float] | None = None) -> dict[str, Measured]:
    """``store.member_reports``' (first, newest) rows per member as ``Measured``; a member whose rows have no number
    of samples (job code writes them) is left out, and a rate is only taken over time that passed. With a single
    row, its rate is from the plan (at ``since``, each member at its ``planned`` samples) to it: its start-up
    counted in, until a second row says (the profile's rate had it finished at once: LEFT overdue)."""
    out = {}
    for name, (first, last) in reports.items():
        if not all(is_number(r.get(k)) for r in (first, last) for k in ("time", "member_step", "batch_size")):
            continue
        samples = float(last["member_step"] * last["batch_size"])
        dt, steps = last["time"] - first["time"], last["member_step"] - first["member_step"]
        rate = steps * last["batch_size"] / dt if dt > 0 and steps > 0 else None
        start = (planned or {}).get(name)
        if rate is None and since is not None and is_number(start) and last["time"] > since and samples > start:
            rate = (samples - start) / (last["time"] - since)
        out[name] = Measured(float(last["time"]), samples, rate)
    return out


def newest_plan(events: Iterable[dict]) -> tuple[float, dict] | None:
    """(when, each member's samples done then) of the running flotillas' plan: the newest ``job_flotillas`` event,
    its time on the runtime's clock (its step records' ``time``: its own), else when the service stored it."""
    plans = [e for e in events if e["kind"] == "job_flotillas"]
    if not plans:
        return None
    t, done = plans[-1]["detail"].get("time"), plans[-1]["detail"].get("samples_done")
    return float(t) if is_number(t) else float(plans[-1]["time"]), done if isinstance(done, dict) else {}


def member_progress(store: "Store", job_id: int, events: Iterable[dict]) -> dict[str, Measured]:
    """The members of ``job_id``'s running flotillas as measured since they were planned (its ``events``, oldest
    first); {} before the first plan."""
    from dlsched.service.store import member_reports

    plan = newest_plan(events)
    return {} if plan is None else measured(member_reports(store, job_id, plan[0]), *plan)
