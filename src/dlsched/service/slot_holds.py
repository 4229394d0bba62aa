"""GPUs the books show free while a job's processes may still use them: the round's cluster view goes without
them, so no other job is placed onto slots whose workers still train.

* A cancel that lands between a round's observe and its decide leaves the job's processes running until the next
  observe stops them. The decide drops such a job from the policy's view (a job with a cancel pending is never
  scheduled); without the hold its GPUs looked free, and another job grew onto slots whose workers still trained.
* A resize that takes slots from a job (``held_after``): a shrink the policy decides, a move to other slots (the
  policy's ``Move``, or a resize whose node map changed: a grow that moves workers), or a grow given up past
  ``resize_timeout_s`` (``resize_deadline``), returns the job's books to the target at once, but the group before
  it trains on there until the runtime has formed the new one (a move's or grow's newcomers prepare meanwhile): until
  a step of the group formed for that request confirms it (``released``), the slots it leaves (``JobRecord.releasing``,
  stored, so a restarted service holds them too) stay out of the rounds. The policy takes a resize to free its slots
  at once: the same round's starts, grows and moves onto them wait for a later round (``clear_of_holds``). A job that
  stops (finished, failed, re-queued, cancelled) has no processes left: the store drops its hold then.

The count keeps the rounds' view honest; which slots are held is the backend's to know: the resize asks it to keep
them booked (``Launch.hold_given_back``), and ``release_confirmed`` frees them once the store has recorded the
confirmation (a service that goes in between finds them booked still: ``recovery`` releases them).
"""
from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Callable, Iterable, Mapping, Sequence

from dlsched.backends.base import Backend
from dlsched.policy.base import ClusterView
from dlsched.round import Action, Decision, Move, Resize, Start
from dlsched.service.store import RESCALING, RUNNING, JobRecord


def extra_slots(target: Mapping[str, int], held: Mapping[str, int]) -> dict[str, int]:
    """Per node, the slots of ``target`` beyond ``held`` (what a resize from ``target`` to ``held`` gives back)."""
    return {n: k - held.get(n, 0) for n, k in target.items() if k > held.get(n, 0)}


def held_after(job: JobRecord, placement: Mapping[str, int]) -> dict[str, int]:
    """``job``'s hold once a resize to ``placement`` is asked: an earlier resize's hold, still unconfirmed, less the
    slots ``placement`` takes back (``taken_back``), plus the slots its books leave (a step under the newest request
    confirms them all)."""
    held = taken_back(job, placement)
    for node, k in extra_slots(job.placement, placement).items():
        held[node] = held.get(node, 0) + k
    return held


def waits_for_hold(job: JobRecord, placement: Mapping[str, int]) -> bool:
    """Whether a resize of ``job`` to ``placement`` waits for its hold to clear: it takes a slot the job's books
    lack (a grow, a move) while slots it left are unconfirmed. So a step under the newest request confirms every
    hold, and the only slots a resize books back are those a given-up one returns to (the backend's ``before``)."""
    return bool(job.releasing) and bool(extra_slots(placement, job.placement))


def in_slots(sample: dict) -> dict:
    """Step record ``sample`` with ``workers`` counting the slots its group holds, as the books do: a parameter-server
    job's records count its workers, and its servers hold slots too (a ps job resized to 2 slots trained at 1 worker,
    never matched its books, and showed ``rescaling`` till it ended; its speed was fitted per worker, sized per slot)."""
    servers = sample.get("servers")
    if isinstance(servers, int) and isinstance(sample.get("workers"), int):
        return {**sample, "workers": sample["workers"] + servers}
    return sample


def answers(job: JobRecord, sample: dict) -> bool:
    """Whether step record ``sample`` is of a group formed for ``job``'s newest control request or a later one. The
    torch runtime tags each step with the request its group was formed for (``control_generation``): a last step of
    the group before the resize, drained while the new one formed, is not the new one's, at the same size either (a
    move). A runtime that tags none applies a request before its next step, so its next step counts."""
    tag = sample.get("control_generation")
    return not isinstance(tag, int) or tag >= job.generation


def released(job: JobRecord, samples: Iterable[dict]) -> bool:
    """Whether one of ``samples`` (step records read after the resize that left slots) confirms that ``job`` trains
    as its books say: a step at no more than their size under the resize's request or a later one (no grow or move
    comes while a hold stands: ``waits_for_hold``)."""
    return any(isinstance(s.get("workers"), int) and s["workers"] <= job.num_gpus and answers(job, s) for s in samples)


def taken_back(job: JobRecord, placement: Mapping[str, int]) -> dict[str, int]:
    """``job``'s hold less the slots ``placement`` books to it again (a resize the runtime gave up returns to the
    slots its group trains on; a move back onto slots it left)."""
    back = extra_slots(placement, job.placement)
    return {n: k - back.get(n, 0) for n, k in (job.releasing or {}).items() if k > back.get(n, 0)}


def clear_of_holds(decision: Decision, jobs: Sequence[JobRecord], view: ClusterView) -> list[Action]:
    """``decision``'s actions less the starts, grows and moves onto a node that this round's own shrinks and moves
    leave short (``jobs``: those the policy saw, ``view``: what it saw); the next rounds' view has the holds. An action
    is dropped whole: its job keeps what it holds on every node, so no node comes short for it (the slots a dropped
    move would have left were counted as used, so no other action relies on them)."""
    by_id = {str(j.id): j for j in jobs}
    used: dict[str, int] = {}
    for job_id in by_id:
        for node, k in decision.nodes(job_id).items():
            used[node] = used.get(node, 0) + k
    for act in decision.actions:
        if isinstance(act, (Resize, Move)):
            for node, k in extra_slots(by_id[act.job_id].placement, act.nodes).items():
                used[node] = used.get(node, 0) + k
    free = {n.name: n.num_gpus for n in view.nodes}
    short = {node for node, k in used.items() if k > free.get(node, 0)}

    def takes_short(act: Action) -> bool:
        before = by_id[act.job_id].placement if isinstance(act, (Resize, Move)) else {}
        return isinstance(act, (Start, Resize, Move)) and any(act.nodes.get(n, 0) > before.get(n, 0) for n in short)

    return [a for a in decision.actions if not takes_short(a)]


def release_confirmed(backend: Backend, job_dir: Callable[[int], Path], job_ids: list[int]) -> None:
    """The backend frees the slots it held back for ``job_ids`` (their holds ``released``, the store's write
    committed); the list is emptied. A pass that raised left its ids: the next one confirms them again anyway (the
    progress it rolled back is read again)."""
    for job_id in job_ids:
        backend.release(job_id, job_dir(job_id))
    job_ids.clear()


def without_held(view: ClusterView, jobs: Iterable[JobRecord]) -> ClusterView:
    """``view`` less the GPUs (per node) that jobs' processes may use past their books: the whole placement of a
    job with a cancel pending, the slots a running job gave back, unconfirmed (``releasing``)."""
    held: dict[str, int] = {}
    for j in jobs:
        holds = [j.placement] if j.cancel_requested and j.num_gpus else []   # a rescaling job's target: its books
        if j.releasing and j.state in (RUNNING, RESCALING):
            holds.append(j.releasing)
        for hold in holds:
            for node, k in hold.items():
                held[node] = held.get(node, 0) + k
    if not held:
        return view
    return dataclasses.replace(view, nodes=tuple(
        dataclasses.replace(n, num_gpus=max(0, n.num_gpus - held.get(n.name, 0))) for n in view.nodes))
