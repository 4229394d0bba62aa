"""GPUs the books show free while a job's processes may still use them: the round's cluster view goes without
them, so no other job is placed onto slots whose workers still train.

* A cancel that lands between a round's observe and its decide leaves the job's processes running until the next
  observe stops them. The decide drops such a job from the policy's view (a job with a cancel pending is never
  scheduled); without the hold its GPUs looked free, and another job grew onto slots whose workers still trained.
* A grow given up past ``resize_timeout_s`` (``resize_deadline``) returns the job's books to the GPUs it held
  before, but the runtime may already have formed the larger group (its first step there not yet recorded), or
  still have newcomers preparing there: until it confirms it runs at the smaller size, the slots it asked back
  (``JobRecord.releasing``, stored, so a restarted service holds them too) stay out of the rounds. A job that
  stops (finished, failed, re-queued, cancelled) has no processes left: the store drops its hold then.

The count keeps the rounds' view honest; which slots are held is the backend's to know: the give-back's resize asks
it to keep them booked (``Launch.hold_given_back``), and ``release_confirmed`` frees them once the store has
recorded the confirmation (a service that goes in between finds them booked still: ``recovery`` releases them).
"""
from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Callable, Iterable, Mapping

from dlsched.backends.base import Backend
from dlsched.policy.base import ClusterView
from dlsched.service.store import RESCALING, RUNNING, JobRecord


def extra_slots(target: Mapping[str, int], held: Mapping[str, int]) -> dict[str, int]:
    """Per node, the slots of ``target`` beyond ``held`` (what a given-up grow asks back)."""
    return {n: k - held.get(n, 0) for n, k in target.items() if k > held.get(n, 0)}


def released(job: JobRecord, samples: Iterable[dict]) -> bool:
    """Whether one of ``samples`` (step records read after the give-back) confirms that ``job`` trains at no more
    than its books' size. The torch runtime tags each step with the newest control generation it had taken in
    (``control_generation``): only a step at that size under the give-back's request (or a later one) counts, not a
    last step of the old group drained while the larger one formed. A runtime that tags none applies a request
    before its next step, so its next step at that size counts."""
    for s in samples:
        workers, tag = s.get("workers"), s.get("control_generation")
        if isinstance(workers, int) and workers <= job.num_gpus and (not isinstance(tag, int) or tag >= job.generation):
            return True
    return False


def release_confirmed(backend: Backend, job_dir: Callable[[int], Path], job_ids: list[int]) -> None:
    """The backend frees the slots it held back for ``job_ids`` (their holds ``released``, the store's write
    committed); the list is emptied. A pass that raised left its ids: the next one confirms them again anyway (the
    progress it rolled back is read again)."""
    for job_id in job_ids:
        backend.release(job_id, job_dir(job_id))
    job_ids.clear()


def without_held(view: ClusterView, jobs: Iterable[JobRecord]) -> ClusterView:
    """``view`` less the GPUs (per node) that jobs' processes may use past their books: the whole placement of a
    job with a cancel pending, the slots a running job is asked to give back (``releasing``)."""
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
