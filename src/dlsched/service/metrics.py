"""Prometheus metrics of the service (``GET /metrics``, text exposition format), read from the store at scrape time.

What an operator graphs and alerts on: jobs per state; the cluster's slots and those allocated, per node with its
health; each active job's state, slots, speed, progress and predicted finish, and its stated target's chance by the
budget and predicted time with its 80 % band (or that it has no prediction yet); the scheduling rounds (how many, how many raised, a histogram of
their wall time, the last one's phases) and the errors the cluster's own bands are made of; and the scheduler's
events by kind (starts, resizes, preemptions, failures). Times are Unix timestamps (``time() -
dlsched_job_submit_timestamp_seconds`` is a queue wait in PromQL), durations seconds. A job's labels are its id and
name, for active jobs only: an ended job leaves the per-job series, so they stay as many as the live queue. The
events table only grows, so its counts are read on from the last row counted (the first scrape reads it whole).
"""
from __future__ import annotations

import threading
from typing import Callable, Iterable, Sequence

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from dlsched import __version__
from dlsched.policy.base import NodeView
from dlsched.service.finish_times import shown_times, stated_targets
from dlsched.service.store import (ACTIVE, RESCALING, RUNNING, TERMINAL, JobRecord, Store, event_counts,
                                   job_counts)

JOB_LABELS = ["job", "name"]
TARGET_LABELS = [*JOB_LABELS, "metric"]


def allocated_slots(jobs: Iterable[JobRecord]) -> dict[str, int]:
    """Slots per node the scheduler has given running jobs (a rescaling job's target: it never double-gives)."""
    used: dict[str, int] = {}
    for j in jobs:
        if j.state in (RUNNING, RESCALING):
            for node, n in j.placement.items():
                used[node] = used.get(node, 0) + n
    return used


class ServiceCollector:
    """A ``prometheus_client`` collector over the service's store, its cluster and its scheduling loop."""

    def __init__(self, store: Store, nodes: Callable[[], Sequence[NodeView]],
                 lost: Callable[[], frozenset[str]] = frozenset, loop_thread=None, policy: str = ""):
        """``nodes``/``lost``: the cluster's nodes and the names of the lost ones, as the dashboard gets them."""
        self.store, self.nodes, self.lost, self.loop_thread, self.policy = store, nodes, lost, loop_thread, policy
        self._events: dict[str, int] = {}
        self._events_seen = 0
        self._lock = threading.Lock()   # two scrapes at once must not count the same events twice

    def collect(self):
        yield self._jobs()
        active = self.store.jobs(states=ACTIVE)   # the ended ones are counted in SQL, never decoded
        yield from self._nodes(active)
        yield from self._active(active)
        yield from self._rounds()
        yield from self._own_bands()
        yield self._event_counts()
        info = GaugeMetricFamily("dlsched_build_info", "The service's version and policy", labels=["version", "policy"])
        info.add_metric([__version__, self.policy], 1)
        yield info

    def _jobs(self) -> GaugeMetricFamily:
        g = GaugeMetricFamily("dlsched_jobs", "Jobs in each state", labels=["state"])
        for state, n in (dict.fromkeys(ACTIVE + TERMINAL, 0) | job_counts(self.store)).items():
            g.add_metric([state], n)
        return g

    def _nodes(self, jobs: list[JobRecord]):
        # allocated from the same read of the jobs as every other series (the node table's own count is a round
        # behind them)
        used, lost = allocated_slots(jobs), self.lost()
        nodes = [(n.name, n.gpu_type, n.num_gpus, used.get(n.name, 0), n.name not in lost) for n in self.nodes()]
        slots = GaugeMetricFamily("dlsched_node_slots", "GPU slots of the node", labels=["node", "gpu_type"])
        allocated = GaugeMetricFamily("dlsched_node_slots_allocated", "Slots the scheduler has given jobs",
                                      labels=["node"])
        up = GaugeMetricFamily("dlsched_node_up", "1 while the node is up, 0 once lost", labels=["node"])
        for name, gpu_type, n, used, alive in nodes:
            slots.add_metric([name, gpu_type], n)
            allocated.add_metric([name], used)
            up.add_metric([name], int(alive))
        yield from (slots, allocated, up)
        yield GaugeMetricFamily("dlsched_cluster_slots", "GPU slots of the nodes that are up",
                                value=sum(n for _, _, n, _, alive in nodes if alive))
        yield GaugeMetricFamily("dlsched_cluster_slots_allocated", "Slots the scheduler has given jobs",
                                value=sum(used for *_, used, _ in nodes))

    def _active(self, jobs: list[JobRecord]):
        preds, forecasts = self.store.latest_predictions(j.id for j in jobs), self.store.forecasts()
        families = {
            "gpus": GaugeMetricFamily("dlsched_job_gpus", "Slots the job trains on", labels=JOB_LABELS),
            "speed": GaugeMetricFamily("dlsched_job_samples_per_second", "The job's samples/s over its newest steps, "
                                       "wall clock (what its remaining time assumes)", labels=JOB_LABELS),
            "done": GaugeMetricFamily("dlsched_job_progress_ratio", "Samples trained / the job's total (0-1)",
                                      labels=JOB_LABELS),
            "loss": GaugeMetricFamily("dlsched_job_loss", "The job's last reported loss", labels=JOB_LABELS),
            "submit": GaugeMetricFamily("dlsched_job_submit_timestamp_seconds", "When the job was submitted",
                                        labels=JOB_LABELS),
            "finish": GaugeMetricFamily("dlsched_job_predicted_finish_timestamp_seconds",
                                        "The finish the service predicts (as `dlsched status` shows)",
                                        labels=JOB_LABELS),
            "stalled": GaugeMetricFamily("dlsched_job_stalled_since_timestamp_seconds",
                                         "Since when the job, its processes alive, has made no progress (stall_after_s;"
                                         " absent while it progresses)", labels=JOB_LABELS),
        }
        # a stated target (`submit --target` / `--target-loss`): its value, the chance by the budget, and when
        targets = {
            "value": GaugeMetricFamily("dlsched_job_target", "The target the job states", labels=TARGET_LABELS),
            "chance": GaugeMetricFamily("dlsched_job_target_chance", "Chance the job reaches its target by its budget",
                                        labels=TARGET_LABELS),
            "time": GaugeMetricFamily("dlsched_job_target_predicted_timestamp_seconds",
                                      "When the job is predicted to reach its target at today's rate (none: not by "
                                      "the budget, or past its predicted final value)", labels=TARGET_LABELS),
            "early": GaugeMetricFamily("dlsched_job_target_early_timestamp_seconds",
                                       "The early end of the 80 % band of when the job reaches its target",
                                       labels=TARGET_LABELS),
            "late": GaugeMetricFamily("dlsched_job_target_late_timestamp_seconds",
                                      "The late end of the 80 % band of when the job reaches its target",
                                      labels=TARGET_LABELS),
        }
        # a target of a reported metric the job states that is not predicted yet (the API's target_pending, whose
        # why says what is missing): the alert "a target stated an hour ago has no prediction" had no series to read
        pending = GaugeMetricFamily("dlsched_job_target_pending", "A target the job states that has no prediction "
                                    "yet (its value; `dlsched show ID`'s target_pending says why)", labels=TARGET_LABELS)
        # the job's state as a label (kube-state-metrics' phase): `count by (state)` of the live queue, or a queued
        # job's wait joined on (job) with the submit time
        state = GaugeMetricFamily("dlsched_job_state", "1, labelled with the job's state", labels=[*JOB_LABELS, "state"])
        for j in jobs:
            labels = [str(j.id), j.name]
            state.add_metric([*labels, j.state], 1)
            _, finish = shown_times(j, preds.get(j.id), forecasts.get(j.id))
            values = {"gpus": j.held_gpus, "speed": j.samples_per_s, "loss": j.last_loss, "submit": j.submit_time,
                      "done": j.samples / j.total_samples if j.total_samples else None, "finish": finish,
                      "stalled": j.stalled_since}
            _add(families, labels, values)
            target, waiting = stated_targets(j, preds.get(j.id), finish)
            if target is not None:
                band = target["time_80"] or (None, None)
                # past the predicted final value the time is the budget's, not a predicted crossing (the chance says
                # how likely the run beats its prediction): an alert on it read the budget as the prediction
                when = None if target["beyond"] else target["time"]
                _add(targets, labels + [target["metric"]], target | {"early": band[0], "late": band[1], "time": when})
            if waiting is not None:
                pending.add_metric(labels + [waiting["metric"]], waiting["value"])
        yield state
        yield from families.values()
        yield from targets.values()
        yield pending

    def _rounds(self):
        t = self.loop_thread
        if t is None:   # an API without a loop (tests, tools): no round series rather than zeros that look alive
            return
        yield CounterMetricFamily("dlsched_rounds", "Scheduling rounds run", value=t.rounds)
        yield CounterMetricFamily("dlsched_round_failures", "Scheduling rounds that raised (logged)",
                                  value=t.failed_rounds)
        yield from t.round_seconds.collect()
        stats = t.last_stats
        if stats is not None:
            last = GaugeMetricFamily("dlsched_last_round_seconds", "The last round's time, by phase", labels=["phase"])
            for phase in ("decide", "act", "observe", "predict"):
                last.add_metric([phase], getattr(stats, f"{phase}_s"))
            yield last

    def _own_bands(self):
        """The errors each pool of the cluster's own bands holds (the loop's ``JobModels.bands``)."""
        models = getattr(getattr(self.loop_thread, "loop", None), "models", None)
        if models is None:   # no loop: no finished jobs' errors to count
            return
        for steps, name, what in ((False, "dlsched_own_band_errors", "Final-value errors"),
                                  (True, "dlsched_own_steps_band_errors", "Errors of the steps to a stated target")):
            own = GaugeMetricFamily(name, f"{what} kept of the jobs that ran to their budget here, per pool; 9 at a "
                                    "fraction make its band the cluster's own (service/own_calibration.py)",
                                    labels=["kind", "table", "fraction"])
            for (kind, table, f), n in sorted(models.bands.counts(steps).items(), key=str):
                own.add_metric([str(kind), table, f"{f:g}"], n)
            yield own

    def _event_counts(self) -> CounterMetricFamily:
        with self._lock:
            counts, self._events_seen = event_counts(self.store, after_id=self._events_seen)
            for kind, n in counts.items():
                self._events[kind] = self._events.get(kind, 0) + n
            c = CounterMetricFamily("dlsched_events", "Scheduler events by kind (`dlsched events`)", labels=["kind"])
            for kind, n in sorted(self._events.items()):
                c.add_metric([kind], n)
        return c


def _add(families: dict[str, GaugeMetricFamily], labels: list[str], values: dict) -> None:
    """One sample per family whose value is known (a missing series, not a made-up 0)."""
    for key, family in families.items():
        if values.get(key) is not None:
            family.add_metric(labels, values[key])


def metrics_registry(collector: ServiceCollector) -> CollectorRegistry:
    """A registry of its own (not the process-global one: a process may serve several stores, as tests do)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    return registry
