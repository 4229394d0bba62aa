"""What the service shows of an ensemble job: each member's state and the flotillas now running, read back from the
events the FLEET runtime reported through ``progress.jsonl`` (``flotillas``, ``member_converged``)."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Iterable

if TYPE_CHECKING:   # the CLI imports ``summary``: no store (sqlite) at every ``dlsched`` start
    from dlsched.service.store import Store


def ensemble_status(events: Iterable[dict]) -> dict[str, Any]:
    """``{"members": {name: "training"|"waiting"|"converged"}, "flotillas": [...], "share": slots}`` from a job's
    events, oldest first."""
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
                if members.get(m) != "converged":
                    members[m] = "training" if m in running else "waiting"
        elif e["kind"] == "job_member_converged":
            members[d["member"]] = "converged"
        elif e["kind"] in ("job_finished", "job_stopped"):
            flotillas = []
    return {"members": members, "flotillas": flotillas, "share": share}


def ensemble_of(store: "Store", job_id: int) -> dict[str, Any]:
    return ensemble_status(store.events(job_id, limit=1_000_000))


def summary(ens: dict[str, Any]) -> str:
    """One line for tables: "3/8 converged, flotillas a+b | c"."""
    m = ens["members"]
    done = sum(1 for s in m.values() if s == "converged")
    fl = " | ".join("+".join(f"{d}:{g}" for d, g in f["members"].items()) for f in ens["flotillas"])
    return f"{done}/{len(m)} converged" + (f", flotillas {fl}" if fl else "")
