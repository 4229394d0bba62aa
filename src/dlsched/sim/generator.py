"""Synthetic workloads over the Pollux applications' real traces, with the knobs that decide what elastic batch
scaling can gain over GPU-only scaling (Saxena et al., MASCOTS'20):

* ``load`` — offered GPU-seconds per second over the cluster's GPUs (Poisson arrivals): an idle cluster lets
  jobs grow, a saturated one leaves nothing to grow into;
* ``apps`` — which applications (their measured scalability: cifar10 and imagenet scale, ncf does not);
* ``batch`` — the user's batch: ``"initial"`` (the smallest traced batch: GPU-only scaling can then add only
  batch // min_local_batch GPUs) or ``"traced"`` (uniform over the traced batch sizes).

A job's size is its isolated run at its request (``sim.fairness.isolated_jcts``), so ``load`` is measured in the
simulator's own units, not assumed.
"""
from __future__ import annotations

import numpy as np

from dlsched.errors import UserError
from dlsched.perf.profile import POLLUX_APPS
from dlsched.policy.base import ClusterView
from dlsched.perf.pollux import load_app
from dlsched.sim.workload import WorkloadJob

BATCH_CHOICES = ("initial", "traced")


def generate(num_jobs: int, load: float, cluster: ClusterView, apps: tuple[str, ...] = ("cifar10",),
             batch: str = "initial", seed: int = 0) -> list[WorkloadJob]:
    """``num_jobs`` single-GPU requests with Poisson arrivals at the rate that offers ``load`` of the cluster."""
    from dlsched.sim.fairness import isolated_jcts

    if num_jobs < 1 or not load > 0:
        raise UserError(f"generate: num_jobs must be >= 1 and load > 0, got {num_jobs}, {load}")
    if batch not in BATCH_CHOICES:
        raise UserError(f"generate: batch must be one of {', '.join(BATCH_CHOICES)}, got {batch!r}")
    unknown = [a for a in apps if a not in POLLUX_APPS]
    if unknown or not apps:
        raise UserError(f"generate: apps {unknown or apps} not among {', '.join(POLLUX_APPS)}")
    rng = np.random.default_rng(seed)
    chosen = rng.choice(list(apps), num_jobs)
    jobs = []
    for i, app_name in enumerate(chosen):
        app = load_app(str(app_name))
        b = (app.init_batch_size if batch == "initial"
             else int(rng.choice([x for x in app.batch_sizes if x <= app.max_local_bsz])))
        jobs.append(WorkloadJob(f"{app_name}-{i}", 0.0, 1, app=str(app_name), batch_size=int(b)))
    alone = isolated_jcts(jobs, cluster)
    gpu_seconds = np.mean([alone[j.id] * j.requested_gpus for j in jobs])
    rate = load * cluster.total_gpus / gpu_seconds                  # arrivals per second
    times = np.cumsum(rng.exponential(1.0 / rate, num_jobs)) - 0.0
    return [WorkloadJob(j.id, float(round(t)), j.requested_gpus, app=j.app, batch_size=j.batch_size)
            for j, t in zip(jobs, times)]
