"""What the service shows of an ensemble job: each member's state and the flotillas now running, read back from the
events the FLEET runtime reported through ``progress.jsonl`` (``flotillas``, ``member_converged``)."""
from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, Iterable, Mapping

if TYPE_CHECKING:   # the CLI imports ``summary``: no store (sqlite) at every ``dlsched`` start
    from dlsched.service.member_progress import Measured
    from dlsched.service.store import Store


STOPPED = "stopped at max_epochs"     # left at its epoch cap, not converged
CANCELLED = "cancelled"                 # cancelled alone (``dlsched cancel JOB --member NAME``)
LEFT = ("converged", STOPPED, CANCELLED)


def _number(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def _counts(x) -> bool:
    return isinstance(x, dict) and all(_number(v) for v in x.values())


def well_formed(e: dict) -> bool:
    """Whether an event read here has the shape the FLEET runtime writes. Job code writes them (progress.jsonl): a
    profile without a member, or a flotilla list that is text, raised in every job list, job page and forecast."""
    d, kind = e["detail"], e["kind"]
    if kind == "job_profiled":
        return (isinstance(d.get("profiles", []), list) and _counts(d.get("max_samples", {}))
                and all(isinstance(p, dict) and isinstance(p.get("member"), str)
                        and (isinstance(p.get("rates", []), list) and all(map(_number, p.get("rates", []))))
                        for p in d.get("profiles", [])))
    if kind == "job_flotillas":
        fl = d.get("flotillas", [])
        return (isinstance(fl, list) and _counts(d.get("samples_done", {})) and isinstance(d.get("waiting", []), list)
                and all(isinstance(f, dict) and _counts(f.get("members", {}))
                        and (f.get("rate") is None or _number(f["rate"])) for f in fl)
                and all(isinstance(m, str) for m in d.get("waiting", [])))
    if kind == "job_member_converged":
        return isinstance(d.get("member"), str)
    return _counts(d.get("samples_done", {}))


def _trained(name: str, plan_done: float, speed: Mapping[str, float], since: float, now: float | None,
             measured: Mapping[str, "Measured"]) -> float:
    """A member's samples at ``now``: as measured where it reported steps in its running flotilla, else its plan's
    count gone on at the flotilla's profiled rate."""
    m = measured.get(name) if name in speed else None
    return m.at(now) if m is not None and now is not None else plan_done + speed.get(name, 0.0) * since


def _rates(name: str, rates: tuple[float, ...], speed: Mapping[str, float],
           measured: Mapping[str, "Measured"]) -> tuple[float, ...]:
    """A member's profiled samples/s on 1..m slots, scaled by its measured over its flotilla's profiled rate once it
    has one: the profiles give the shape, the measurement the level (``forecast.rate_for`` does so for a job's
    speed model)."""
    m = measured.get(name)
    planned = speed.get(name, 0.0)
    if m is None or m.rate is None or planned <= 0:
        return rates
    return tuple(r * m.rate / planned for r in rates)


def ensemble_status(events: Iterable[dict], now: float | None = None,
                    measured: Mapping[str, "Measured"] | None = None) -> dict[str, Any]:
    """``{"members": {name: "training"|"waiting"|"stopped"|"converged"|"stopped at max_epochs"}, "flotillas": [...],
    "share": slots, "fraction_done": f, "results": {name: {"epochs", "best_acc", "left", "best_checkpoint"}}}`` from a
    job's events, oldest first; ``results`` has each member that left: its epochs, best validation accuracy, why it
    left and the file of its best weights (null from a runtime that did not say): what ``dlsched ensemble run`` puts
    in its report; only the events had it for a service job. ``fraction_done``: of the samples every
    member would train to its epoch cap, those trained by the last plan (or by a stop, which says), a member that
    left counted whole (it has no work left), and at ``now`` what the running flotillas trained since their plan at
    their rate, as ``members_left`` counts it (the plan's alone stood still between plans: 0 % for minutes, then a
    jump); a member of the running flotillas that has reported steps since (``measured``: ``member_progress``) is
    counted where it stands, gone on at its measured rate; None before the runtime profiled its members, 1 once the
    job finished."""
    members: dict[str, str] = {}
    flotillas: list[dict] = []
    share = None
    cap: dict[str, float] = {}
    done: dict[str, float] = {}
    results: dict[str, dict] = {}
    speed: dict[str, float] = {}
    planned_at = now
    ended = False
    for e in filter(well_formed, events):
        d = e["detail"]
        if e["kind"] == "job_profiled":
            members.update({p["member"]: members.get(p["member"], "waiting") for p in d.get("profiles", [])})
            cap = {k: float(v) for k, v in d.get("max_samples", {}).items()}
        elif e["kind"] == "job_flotillas":
            flotillas, share = d.get("flotillas", []), d.get("share")
            done.update({k: float(v) for k, v in d.get("samples_done", {}).items()})
            speed = {m: float(f.get("rate") or 0.0) for f in flotillas for m in f.get("members", {})}
            planned_at = float(e["time"])
            running = {m for f in flotillas for m in f.get("members", {})}
            for m in running | set(d.get("waiting", [])):
                if members.get(m) not in LEFT:
                    members[m] = "training" if m in running else "waiting"
        elif e["kind"] == "job_member_converged":
            members[d["member"]] = {"max_epochs": STOPPED, "cancelled": CANCELLED}.get(d.get("reason"), "converged")
            results[d["member"]] = {"epochs": d.get("epoch"), "best_acc": d.get("best_acc"), "left": members[d["member"]],
                                    "best_checkpoint": d.get("best_checkpoint")}
        elif e["kind"] in ("job_finished", "job_stopped"):
            flotillas, speed = [], {}
            done.update({k: float(v) for k, v in d.get("samples_done", {}).items()})   # where the stop left each
            ended = e["kind"] == "job_finished"
            # checkpointed (a cancel, a preemption): no longer training until a next plan says so
            members.update({m: "stopped" for m, st in members.items() if st not in LEFT})
    total = sum(cap.values())
    since = max(0.0, now - planned_at) if now is not None and planned_at is not None else 0.0
    trained = sum(c if members.get(m) in LEFT else min(c, _trained(m, done.get(m, 0.0), speed, since, now, measured or {}))
                  for m, c in cap.items())
    fraction = 1.0 if ended else trained / total if total > 0 else None
    return {"members": members, "flotillas": flotillas, "share": share, "fraction_done": fraction,
            "results": {m: results[m] for m in members if m in results}}


# the events ensemble_status reads: a job list asks per ensemble, so its checkpoints and the rest stay unread
ENSEMBLE_EVENTS = ("job_profiled", "job_flotillas", "job_member_converged", "job_finished", "job_stopped")


# what members_left reads: the profiles (rates, epoch caps), each plan (samples done, flotilla rates), departures
MEMBER_WORK_EVENTS = ("job_profiled", "job_flotillas", "job_member_converged")


def members_left(events: Iterable[dict], now: float,
                 measured: Mapping[str, "Measured"] | None = None) -> tuple[tuple[str, tuple[float, ...], float], ...]:
    """Each still-training member as (name, samples/s on 1..m slots, samples left to its epoch cap), from a job's
    events, oldest first: its profiled rates and what it trained since the last plan at its flotilla's rate, or, once
    it reported steps in its running flotilla (``measured``), where it stands and its rates scaled to its measured
    rate (a member that stops early by patience leaves sooner). Empty before the runtime profiled its members."""
    rates: dict[str, tuple[float, ...]] = {}
    cap: dict[str, float] = {}
    done: dict[str, float] = {}
    speed: dict[str, float] = {}
    gone: set[str] = set()
    planned_at = now
    for e in filter(well_formed, events):
        d = e["detail"]
        if e["kind"] == "job_profiled":
            rates = {p["member"]: tuple(float(r) for r in p["rates"]) for p in d.get("profiles", []) if "rates" in p}
            cap = {k: float(v) for k, v in d.get("max_samples", {}).items()}
        elif e["kind"] == "job_flotillas":
            done = {k: float(v) for k, v in d.get("samples_done", {}).items()}
            speed = {m: float(f.get("rate") or 0.0) for f in d.get("flotillas", []) for m in f.get("members", {})}
            planned_at = float(e["time"])
        elif e["kind"] == "job_member_converged":
            gone.add(d["member"])
    since, measured = max(0.0, now - planned_at), measured or {}
    return tuple((name, _rates(name, r, speed, measured),
                  max(1.0, cap[name] - _trained(name, done.get(name, 0.0), speed, since, now, measured)))
                 for name, r in rates.items() if name not in gone and name in cap)


def ensemble_of(store: "Store", job_id: int) -> dict[str, Any]:
    """``ensemble_status`` of a stored job, at the time it last held slots where it holds none now: a runtime that
    died without a ``stopped`` record (a failure, SIGKILL) was counted training on at its last plan's rate, its DONE
    growing to 100 % while it sat failed or re-queued."""
    from dlsched.service.member_progress import member_progress

    events = store.events(job_id, limit=1_000_000, kinds=ENSEMBLE_EVENTS)
    last = store.allocations(job_id)[-1:]
    idle_since = last[0]["time"] if last and last[0]["num_gpus"] == 0 else None
    ens = ensemble_status(events, now=time.time() if idle_since is None else idle_since,
                          measured=member_progress(store, job_id, events))
    if idle_since is not None:   # nothing trains now, whatever its last plan said
        ens["members"] = {m: "stopped" if st == "training" else st for m, st in ens["members"].items()}
        ens["flotillas"] = []
    return ens


def summary(ens: dict[str, Any]) -> str:
    """One line for tables: "3/8 converged, 1 stopped at max_epochs, flotillas a+b | c"."""
    m = ens["members"]
    if not m:   # "0/0 converged" read as an ensemble of no models
        return "no member profiled"
    done = sum(1 for s in m.values() if s == "converged")
    stopped = sum(1 for s in m.values() if s == STOPPED)
    cancelled = sum(1 for s in m.values() if s == CANCELLED)
    fl = " | ".join("+".join(f"{d}:{g}" for d, g in f["members"].items()) for f in ens["flotillas"])
    return (f"{done}/{len(m)} converged" + (f", {stopped} {STOPPED}" if stopped else "")
            + (f", {cancelled} {CANCELLED}" if cancelled else "") + (f", flotillas {fl}" if fl else ""))
