"""GPUs a cancelled job still holds: a cancel that lands between a round's observe and its decide leaves the job's
processes running until the next observe stops them, so that round must not hand their GPUs to anyone else.

The decide drops such a job from the policy's view (a job with a cancel pending is never scheduled); without this
its GPUs looked free, and another job grew onto slots whose workers were still training."""
from __future__ import annotations

import dataclasses
from typing import Iterable

from dlsched.policy.base import ClusterView
from dlsched.service.store import JobRecord


def without_cancelling(view: ClusterView, jobs: Iterable[JobRecord]) -> ClusterView:
    """``view`` less the GPUs (per node) of the jobs with a cancel pending that still hold some."""
    held: dict[str, int] = {}
    for j in jobs:
        if j.cancel_requested and j.num_gpus:   # num_gpus: a rescaling job's target, what its books reserve
            for node, k in j.placement.items():
                held[node] = held.get(node, 0) + k
    if not held:
        return view
    return dataclasses.replace(view, nodes=tuple(
        dataclasses.replace(n, num_gpus=max(0, n.num_gpus - held.get(n.name, 0))) for n in view.nodes))
