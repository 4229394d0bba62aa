"""What the service shows of an ensemble job: each member's state and the flotillas now running, read back from the
events the FLEET runtime reported through ``progress.jsonl`` (``flotillas``, ``member_converged``)."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Iterable

if TYPE_CHECKING:   # the CLI imports ``summary``: no store (sqlite) at every ``dlsched`` start
    from dlsched.service.store import Store


STOPPED = "stopped at max_epochs"     # left at its epoch cap, not converged
LEFT = ("converged", STOPPED)


def ensemble_status(events: Iterable[dict]) -> dict[str, Any]:
    """``{"members": {name: "training"|"waiting"|"converged"|"stopped at max_epochs"}, "flotillas": [...],
    "share": slots}`` from a job's events, oldest first."""
    members: dict[str, str] = {}
    flotillas: list[dict] = []
    share = None
    for e in events:
        d = e["detail"]
        if e["kind"] == "job_profiled":
            members.update({p["member"]: members.get(p["member"], "waiting") for p in d.get("profiles", [])})
        elif e["kind"] == "job_flotillas":
            flotillas, share = d.get("flotillas", []), d.get("share")
            running = {m for f in flotillas for m in f.get("members", {})}
            for m in running | set(d.get("waiting", [])):
                if members.get(m) not in LEFT:
                    members[m] = "training" if m in running else "waiting"
        elif e["kind"] == "job_member_converged":
            members[d["member"]] = STOPPED if d.get("reason") == "max_epochs" else "converged"
        elif e["kind"] in ("job_finished", "job_stopped"):
            flotillas = []
    return {"members": members, "flotillas": flotillas, "share": share}


# the events ensemble_status reads: a job list asks per ensemble, so its checkpoints and the rest stay unread
ENSEMBLE_EVENTS = ("job_profiled", "job_flotillas", "job_member_converged", "job_finished", "job_stopped")


def ensemble_of(store: "Store", job_id: int) -> dict[str, Any]:
    return ensemble_status(store.events(job_id, limit=1_000_000, kinds=ENSEMBLE_EVENTS))


def summary(ens: dict[str, Any]) -> str:
    """One line for tables: "3/8 converged, 1 stopped at max_epochs, flotillas a+b | c"."""
    m = ens["members"]
    done = sum(1 for s in m.values() if s == "converged")
    stopped = sum(1 for s in m.values() if s == STOPPED)
    fl = " | ".join("+".join(f"{d}:{g}" for d, g in f["members"].items()) for f in ens["flotillas"])
    return (f"{done}/{len(m)} converged" + (f", {stopped} {STOPPED}" if stopped else "")
            + (f", flotillas {fl}" if fl else ""))
