"""The live service's policy forecast: when it is made (its own thread, or inline when cheap), one at a time,
with the start/resize delays measured here; the roll-forward itself is ``service/forecast.py``."""
from __future__ import annotations

import collections
import copy
import dataclasses
import logging
import statistics
import threading
import time
from typing import Callable

from dlsched.policy.base import ClusterView, Policy
from dlsched.service.ensemble_view import ensemble_view_of
from dlsched.service.failure_log import RepeatedFailures
from dlsched.service.forecast import RESIZE_S, START_S, Forecast, forecast
from dlsched.service.job_models import JobModels, job_view
from dlsched.service.off_cluster import hold_out
from dlsched.service.store import ACTIVE, Store

log = logging.getLogger("dlsched.service")

INLINE_FORECAST_S = 0.05   # a forecast that took less is remade inside the round, with the rates just refitted
FORECAST_EVERY_S = 2.0     # wall seconds between policy forecasts, at least twice what the last one took
FORECAST_BUDGET_S = 2.0    # wall time one forecast may take; jobs it did not reach show no forecast finish
DELAYS_KEPT = 20           # the newest start/resize delays the typical one is taken over


class Forecaster:
    """Makes and stores the current policy forecast; reads the loop's models, never its caches."""

    def __init__(self, store: Store, policy: Policy, models: JobModels, cluster_view: Callable[[float], ClusterView],
                 step_s: float, every_s: float = FORECAST_EVERY_S):
        self.store = store
        self.policy = copy.deepcopy(policy)   # its own instance: policies keep caches not meant to be shared
        self.models = models
        self.cluster_view = cluster_view
        self.step_s = step_s
        self.every_s = every_s
        self.latest: Forecast | None = None
        self.made_at: float | None = None
        self.took: float | None = None        # wall seconds of the last forecast
        self._lock = threading.Lock()
        self._delays = {k: collections.deque(maxlen=DELAYS_KEPT) for k in ("start", "resize")}
        self.failures = RepeatedFailures("policy forecast", log)   # inline and in its thread: one log of them

    def record_delay(self, kind: str, seconds: float) -> None:
        self._delays[kind].append(seconds)

    def typical_delay(self, kind: str, default: float) -> float:
        """Median seconds from a start/resize decision to the first step at the new size, over the newest ones
        measured here (``default`` until one is): what the forecast charges a job for changing allocation."""
        seen = list(self._delays[kind])
        return float(statistics.median(seen)) if seen else default

    def refresh(self, now: float, budget_s: float | None = FORECAST_BUDGET_S) -> Forecast:
        """Roll the policy forward from the store's current state and store it as the current forecast."""
        with self._lock:
            return self._refresh(now, budget_s)

    def refresh_if_cheap(self, now: float) -> None:
        """Remake the forecast inside the round when the last one was cheap (a small queue), so it uses the rates
        just refitted; a large queue keeps the forecast thread's. Never waits for a forecast in progress."""
        if self.took is None or self.took >= INLINE_FORECAST_S or not self._lock.acquire(blocking=False):
            return
        try:
            self._refresh(now, budget_s=2 * INLINE_FORECAST_S)
            self.failures.succeeded()
        except Exception as e:
            self.failures.failed(e)
        finally:
            self._lock.release()

    def _refresh(self, now: float, budget_s: float | None) -> Forecast:
        t0 = time.perf_counter()
        speeds, rates, totals, changes = self.models.forecast_inputs()
        # a job placed on a node the cluster lacks is left out (``off_cluster``), its GPUs on the others taken
        jobs, cluster, _ = hold_out(self.cluster_view(now), [j for j in self.store.jobs(states=ACTIVE)
                                                             if not j.cancel_requested])
        views = []
        for j in jobs:
            speed = speeds.get(j.id) or (self.models.task_speeds.of(j.spec) if not j.samples else None)
            v = job_view(j, speed, self.typical_delay("resize", RESIZE_S), changes.get(j.id))
            if v.kind == "ensemble":
                v = ensemble_view_of(self.store, j.id, v, now)
            elif v.remaining_samples is None and j.id in totals:
                v = dataclasses.replace(v, remaining_samples=max(0.0, totals[j.id] - j.samples))
            views.append(v)
        f = forecast(views, cluster, self.policy, now,
                     observed={str(k): r for k, r in rates.items()}, step_s=self.step_s, budget_s=budget_s,
                     start_s=self.typical_delay("start", START_S), resize_s=self.typical_delay("resize", RESIZE_S))
        self.store.set_forecast(now, {int(k): (f.start[k], f.finish[k]) for k in f.finish})
        self.latest, self.made_at = f, now
        self.took = time.perf_counter() - t0
        return f

    def run(self, stopping: threading.Event, clock: Callable[[], float]) -> None:
        """Thread body: a forecast every ``every_s``, or twice as long as the last one took, so a large queue's
        forecast takes at most a third of a core from the scheduler; a failure is logged, never fatal."""
        took = 0.0
        while not stopping.wait(max(self.every_s, 2 * took)):
            t0 = time.perf_counter()
            try:
                self.refresh(clock())
                self.failures.succeeded()
            except Exception as e:
                self.failures.failed(e)
            took = time.perf_counter() - t0
        self.store.close()
