"""A running job keeps its allocation until it has paid back its last (re)start (docs/policies.md, "A job keeps
its allocation until its restart has paid").

A start or resize pauses a job: it makes no progress from the change (``attrs["changed_at"]``) until its first
step at the new size (``attrs["settled_at"]``; absent or None while none came). Changing it again before it has
trained at least as long as that pause lasted would pay a second pause for the first one's nothing: live, a job was
started and stopped four times in 30 s at the same step. So until ``now >= settled_at + (settled_at - changed_at)``
the job is held where it is: no preemption, no resize, its batch kept. Only what the operator asked overrides it (a
``dlsched resize`` whose range leaves out its size; a cancel takes it out of the round) and what the cluster forces
(fewer GPUs than the held jobs hold: every job may wait again, as for non-preemptible jobs).

Drivers that give no ``changed_at`` hold nothing. The simulator's pause is its ``restart_penalty`` (30 s) and its
decisions come every ``interval`` (60 s): a job started at one decision has paid at the next, so the hold never
binds there and the published figures are those without it.
"""
from __future__ import annotations

from typing import Iterable, Mapping

from dlsched.policy.base import JobView


def settling(job: JobView, now: float) -> bool:
    """Whether running ``job`` has not yet trained as long as its last (re)start paused it."""
    changed = job.attrs.get("changed_at")
    if changed is None or not job.placement:
        return False
    settled = job.attrs.get("settled_at")
    return settled is None or now < settled + max(settled - changed, 0.0)


def held_here(job: JobView, g_min: int, g_max: int, now: float) -> bool:
    """``settling`` and its size still inside [``g_min``, ``g_max``] (an operator's resize outside it wins)."""
    return settling(job, now) and g_min <= job.num_gpus <= g_max


def held_gpus(jobs: Iterable[JobView], ranges: Mapping, type_of: Mapping[str, str], now: float) -> dict[str, int]:
    """GPUs per type that held jobs (``held_here`` within ``ranges[job.id]``) keep this round."""
    out: dict[str, int] = {}
    for job in jobs:
        rng = ranges[job.id]
        if held_here(job, rng.g_min, rng.g_max, now):
            t = type_of.get(next(iter(job.placement)))
            out[t] = out.get(t, 0) + job.num_gpus
    return out
