"""Small hand-made policies registered under test-only names, so the service tests do not depend on the
policy engineers' modules (the real ones run through the same registry)."""
from __future__ import annotations

from dlsched.policy.base import _REGISTRY, Allocation, JobAllocation, Policy, register


class GreedyFifo(Policy):
    """Arrival order; each job gets its requested GPUs if they are free (backfilling smaller ones)."""

    name = "test-fifo"

    def decide(self, jobs, cluster):
        free, out = cluster.total_gpus, {}
        for j in sorted(jobs, key=lambda j: (not j.is_running, j.submit_time, int(j.id))):
            n = j.num_gpus or j.requested_gpus
            if n <= free:
                out[j.id] = JobAllocation(n, batch_size=j.current_batch_size or j.batch_size)
                free -= n
        return Allocation(out)


class GreedyElastic(Policy):
    """Everyone in arrival order gets ``min_gpus``; left-over GPUs go to the oldest elastic jobs up to ``max_gpus``."""

    name = "test-elastic"

    def decide(self, jobs, cluster):
        free, give = cluster.total_gpus, {}
        order = sorted(jobs, key=lambda j: (j.submit_time, int(j.id)))
        for j in order:
            if j.min_gpus <= free:
                give[j.id] = j.min_gpus
                free -= j.min_gpus
        for j in order:
            if j.id in give:
                extra = min(free, (j.max_gpus or j.min_gpus) - give[j.id])
                give[j.id] += extra
                free -= extra
        # the batch a policy that chooses none keeps (an operator's held batch wins)
        return Allocation({k: JobAllocation(n, batch_size=next(j.kept_batch for j in jobs if j.id == k))
                           for k, n in give.items()})


class Sized(Policy):
    """Each job gets ``gpus[id]`` GPUs, set by the test (none when absent)."""

    name = "test-sized"
    gpus: dict[int, int] = {}

    def decide(self, jobs, cluster):
        return Allocation({j.id: JobAllocation(Sized.gpus[int(j.id)]) for j in jobs if Sized.gpus.get(int(j.id))})


for _p in (GreedyFifo, GreedyElastic, Sized):
    if _p.name not in _REGISTRY:
        register(_p.name)(_p)
