"""GPUs the books show free while a job's processes may still use them: the round's cluster view goes without
them, so no other job is placed onto slots whose workers still train.

* A cancel that lands between a round's observe and its decide leaves the job's processes running until the next
  observe stops them. The decide drops such a job from the policy's view (a job with a cancel pending is never
  scheduled); without the hold its GPUs looked free, and another job grew onto slots whose workers still trained.
* A resize that takes slots from a job (``held_after``): a shrink the policy decides, or a grow given up past
  ``resize_timeout_s`` (``resize_deadline``), returns the job's books to fewer GPUs at once, but its larger group
  trains on there until the runtime has formed the smaller one (the grow's newcomers may still prepare there): until
  a step at the smaller size confirms it (``released``), the slots it gives back (``JobRecord.releasing``, stored,
  so a restarted service holds them too) stay out of the rounds. The policy takes a shrink to free its slots at
  once: the same round's starts and grows onto them wait for a later round (``clear_of_holds``). A job that stops
  (finished, failed, re-queued, cancelled) has no processes left: the store drops its hold then.

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
from dlsched.round import Action, Decision, Resize, Start
from dlsched.service.store import RESCALING, RUNNING, JobRecord


def extra_slots(target: Mapping[str, int], held: Mapping[str, int]) -> dict[str, int]:
    """Per node, the slots of ``target`` beyond ``held`` (what a resize from ``target`` to ``held`` gives back)."""
    return {n: k - held.get(n, 0) for n, k in target.items() if k > held.get(n, 0)}


def held_after(job: JobRecord, placement: Mapping[str, int]) -> dict[str, int]:
    """``job``'s hold once a resize to fewer GPUs on ``placement`` is asked: the slots its books give back, added
    to an earlier resize's hold, still unconfirmed (a step at the smaller size confirms both)."""
    held = dict(job.releasing or {})
    for node, k in extra_slots(job.placement, placement).items():
        held[node] = held.get(node, 0) + k
    return held


def released(job: JobRecord, samples: Iterable[dict]) -> bool:
    """Whether one of ``samples`` (step records read after the resize that gave slots back) confirms that ``job``
    trains at no more than its books' size. The torch runtime tags each step with the newest control generation it
    had taken in (``control_generation``): only a step at that size under the resize's request (or a later one: no
    grow comes while a hold stands, ``LiveLoop.act``) counts, not a last step of the larger group drained while the
    smaller one formed. A runtime that tags none applies a request before its next step, so its next step at that
    size counts."""
    for s in samples:
        workers, tag = s.get("workers"), s.get("control_generation")
        if isinstance(workers, int) and workers <= job.num_gpus and (not isinstance(tag, int) or tag >= job.generation):
            return True
    return False


def taken_back(job: JobRecord, placement: Mapping[str, int]) -> dict[str, int]:
    """``job``'s hold once its books return to ``placement`` because the runtime gave its resize up: the slots a
    shrink gave back are the job's again (its larger group trains on there)."""
    back = extra_slots(placement, job.placement)
    return {n: k - back.get(n, 0) for n, k in (job.releasing or {}).items() if k > back.get(n, 0)}


def clear_of_holds(decision: Decision, jobs: Sequence[JobRecord], view: ClusterView) -> list[Action]:
    """``decision``'s actions less the starts and grows onto a node this round's own shrinks leave short (``jobs``:
    those the policy saw, ``view``: what it saw); the next rounds' view has the holds. An action is dropped whole:
    its job keeps what it holds on every node, so no node comes short for it."""
    by_id = {str(j.id): j for j in jobs}
    used: dict[str, int] = {}
    for job_id in by_id:
        for node, k in decision.nodes(job_id).items():
            used[node] = used.get(node, 0) + k
    for act in decision.actions:
        if isinstance(act, Resize) and act.num_gpus < by_id[act.job_id].num_gpus:
            for node, k in extra_slots(by_id[act.job_id].placement, act.nodes).items():
                used[node] = used.get(node, 0) + k
    free = {n.name: n.num_gpus for n in view.nodes}
    short = {node for node, k in used.items() if k > free.get(node, 0)}

    def takes_short(act: Action) -> bool:
        before = by_id[act.job_id].placement if isinstance(act, Resize) else {}
        return isinstance(act, (Start, Resize)) and any(act.nodes.get(n, 0) > before.get(n, 0) for n in short)

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
