"""The jobs that finished here as the policy sees them (``ClusterView.finished``): what a policy without remaining
work learns job sizes from (``policy/gittins.py``). The simulator shows its policy its newest ``FINISHED_SHOWN``;
the live rounds and the forecast showed theirs none, so the same policy ranked live jobs by age where simulated ones
were ranked by the index. Each is shown as the policy last saw it running (``job_models.job_view``): its run time,
GPU service and request, and its speed model where that makes its run time its size. Those read back from the store
at a restart have no speed model (none is kept), so the index, which needs one, passes them over until jobs finish
again."""
from __future__ import annotations

from typing import Callable

from dlsched.policy.base import FINISHED_SHOWN, JobView, ThroughputModel
from dlsched.policy.gittins import sized_by_run_time
from dlsched.service.store import JobRecord, Store, newest_finished


class FinishedJobs:
    """The newest ``limit`` finished jobs' views, oldest first. The forecast thread reads them while the loop adds:
    the tuple is replaced, never changed in place."""

    def __init__(self, store: Store | None, view: Callable[[JobRecord, ThroughputModel | None], JobView],
                 limit: int = FINISHED_SHOWN):
        """``view``: a record and its speed model -> the policy's view (``job_models.job_view``)."""
        self._view, self.limit = view, limit
        self.views: tuple[JobView, ...] = tuple(view(j, None) for j in newest_finished(store, limit)) \
            if store is not None else ()

    def add(self, job: JobRecord, speed: ThroughputModel | None) -> None:
        """``job`` (its stored record at its end) finished, last modelled at ``speed``: kept only where its run time
        measures its work (``gittins.sized_by_run_time``, asked once here), as the simulator gives a speed model to
        duration jobs alone: otherwise every decision (each round's, each of the forecast's) asks it again of every
        finished job, and a fitted all-reduce model answers it slowly."""
        view = self._view(job, speed)
        if speed is not None and not sized_by_run_time(view):
            view = self._view(job, None)
        self.views = (self.views + (view,))[-self.limit:]
