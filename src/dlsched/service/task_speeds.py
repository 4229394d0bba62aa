"""A queued job's speed before its first step: the speed model of its task's last finished job.

A job that never trained has no speed model, so the forecast gave it no start past its turn and no finish: `status`
showed nothing for a job queued behind an identical one that had just finished (found by an operator queueing
jobs on a 2-slot service). A job of the same task (the same entry or command, strategy and params, whatever its
epochs or samples) trains at the same speed per configuration; its own steps replace the stand-in once it runs.

The forecast takes it, the live policy does not: the policy decides on what the job itself showed. Kept in memory:
a restart forgets it until a job of the task finishes again.
"""
from __future__ import annotations

from dlsched.policy.base import ThroughputModel
from dlsched.spec import JobSpec

# params that set how much a job trains, not how fast: two runs differing only in them share a speed
BUDGET_PARAMS = frozenset({"epochs", "num_samples", "samples", "total_samples", "steps", "max_steps"})


def task_key(spec: JobSpec) -> str:
    params = sorted((k, repr(v)) for k, v in spec.params.items() if k not in BUDGET_PARAMS)
    return repr((spec.kind, spec.entry, tuple(spec.command or ()), spec.strategy, spec.num_servers,
                 spec.max_local_batch, params))


class TaskSpeeds:
    def __init__(self) -> None:
        self._by_task: dict[str, ThroughputModel] = {}

    def finished(self, spec: JobSpec, speed: ThroughputModel | None) -> None:
        """``spec``'s job finished with ``speed`` (None: it had none)."""
        if speed is not None:
            self._by_task[task_key(spec)] = speed

    def of(self, spec: JobSpec) -> ThroughputModel | None:
        return self._by_task.get(task_key(spec))
