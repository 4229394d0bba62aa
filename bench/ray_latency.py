"""Ray backend vs local backend, side by side in one run, with the real runtime and the same job.

1. submit -> first training step: POST /jobs to a running service, until the first progress record of
   the job (its own timestamp). Same service, same policy, same job; only the backend differs.
2. resize pause: a running job is grown 1 -> 2 workers through the backend the loop uses; we print
   the time from the resize call to the first step with 2 workers, and the runtime's own ``pause_s``
   (request seen -> first step of the new generation) and ``stall_s`` (the part during which nobody
   trained: stop flag -> first step of the new generation).
3. stop: the same job stopped through the backend (a preemption or a cancel: the scheduling round waits on it),
   from the call until it returns. No ``--standby``: on Ray every worker needs a
   bundle the scheduler granted, so the joining worker is started on demand on both backends.

On Ray the workers run in their bundles (one actor per worker, ``dlsched.train.launcher.RayLauncher``):
the coordinator connects to the cluster as a driver and each worker is a fresh interpreter in an actor,
where the local backend forks them from a forkserver that has torch loaded. The Ray cluster is local
(``ray.cluster_utils.Cluster``: a head + two fake nodes with 2 ``gpu_slot`` each), so the figure is Ray's
own overhead (placement groups, actors, driver connection, fresh worker interpreters), not the network.
No target is stated in issue 8; the figure to watch is the Ray - local difference.

Usage: PYTHONPATH=src python bench/ray_latency.py [--repeats 1]
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import httpx

from dlsched.backends.base import Launch
from dlsched.backends.local import LocalBackend
from dlsched.policy.base import Allocation, JobAllocation, Policy
from dlsched.service.server import Service, free_port
from dlsched.spec import ClusterSpec, JobSpec

REPO = Path(__file__).resolve().parents[1]
RUNTIME = [sys.executable, "-m", "dlsched.train.run", "--threads", "1"]
JOB = {"name": "mlp", "entry": "examples/mlp.py:make_job", "gpus": 2,
       "params": {"num_samples": 100_000, "batch_size": 16, "throttle_s": 0.05}}


class ArrivalOrder(Policy):
    """Requested GPUs in arrival order while they fit: the same trivial decision for both backends."""

    name = "bench-arrival-order"

    def decide(self, jobs, cluster):
        free, out = cluster.total_gpus, {}
        for j in sorted(jobs, key=lambda j: (not j.is_running, j.submit_time)):
            n = j.num_gpus or j.requested_gpus
            if n <= free:
                out[j.id], free = JobAllocation(n), free - n
        return Allocation(out)


def first_step_time(job_dir: Path, timeout: float = 180.0, workers: int | None = None, after: float = 0.0) -> float:
    deadline = time.monotonic() + timeout
    path = job_dir / "progress.jsonl"
    while time.monotonic() < deadline:
        if path.exists():
            for line in path.read_text().splitlines():
                try:
                    rec = json.loads(line)
                except ValueError:
                    continue
                if "step" in rec and "event" not in rec and rec["time"] >= after and (workers is None or rec["workers"] == workers):
                    return rec["time"]
        time.sleep(0.01)
    raise TimeoutError(f"{path}: no step (workers={workers}) within {timeout} s")


def submit_to_first_step(kind: str, backend, tmp: Path) -> float:
    spec = ClusterSpec(nodes=[{"name": "n1", "gpus": 2}, {"name": "n2", "gpus": 2}], policy="fifo",
                       interval_s=0.1, backend=kind)
    svc = Service(spec, tmp / f"state-{kind}", port=free_port(), runtime=RUNTIME, workdir=REPO,
                  policy=ArrivalOrder(), backend=backend).start()
    try:
        t0 = time.time()
        r = httpx.post(f"{svc.url}/jobs", json=JOB, headers=svc.headers, timeout=10)
        job_id = r.json()["id"]
        return first_step_time(svc.state_dir / "jobs" / str(job_id)) - t0
    finally:
        svc.thread.stop()                  # the loop first: it would restart a job stop_all() ends
        svc.thread.join(timeout=30)
        svc.backend.stop_all()
        svc.close()


def resize_pause_and_stop(backend, tmp: Path, tag: str) -> tuple[float, float, float, float]:
    """(resize call -> first 2-worker step, the runtime's pause_s, its stall_s, stop call -> returned)."""
    job_dir = tmp / f"resize-{tag}"
    spec = JobSpec.model_validate({**JOB, "gpus": 1})
    job = Launch(1, spec, job_dir, 1, None, {}, 1)
    backend.start(job)
    try:
        first_step_time(job_dir)
        time.sleep(1.0)                                    # a few steady steps at 1 worker
        t0 = time.time()
        backend.resize(replace(job, num_gpus=2, generation=2))
        t1 = first_step_time(job_dir, workers=2, after=t0)
        deadline = time.monotonic() + 30
        while not (ev := [json.loads(x) for x in (job_dir / "progress.jsonl").read_text().splitlines()
                          if '"resized"' in x]):
            if time.monotonic() > deadline:
                raise TimeoutError("no resized event")
            time.sleep(0.05)
    except BaseException:
        backend.stop(1, job_dir)
        raise
    t2 = time.monotonic()
    backend.stop(1, job_dir)    # SIGTERM: the runtime checkpoints its step and exits; the call returns after
    return t1 - t0, ev[-1]["pause_s"], ev[-1]["stall_s"], time.monotonic() - t2


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=1)
    a = ap.parse_args()
    import ray
    from ray.cluster_utils import Cluster

    from dlsched.backends.ray import RayBackend

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
    for name in ("n1", "n2"):
        cluster.add_node(num_cpus=1, resources={"gpu_slot": 2}, labels={"dlsched.io/node": name})
    cluster.wait_for_nodes()
    results: dict[str, dict[str, list[float]]] = {"local": {}, "ray": {}}
    try:
        rb = RayBackend(address=cluster.address, gpu_resource="gpu_slot", runtime=RUNTIME, cwd=REPO)
        with tempfile.TemporaryDirectory() as d:
            tmp = Path(d)
            for i in range(a.repeats):
                for kind in ("local", "ray"):
                    r = results[kind]
                    r.setdefault("submit", []).append(submit_to_first_step(kind, rb if kind == "ray" else None, tmp / str(i)))
                    be = rb if kind == "ray" else LocalBackend(runtime=RUNTIME, cwd=REPO)
                    for m, v in zip(("resize", "pause", "stall", "stop"), resize_pause_and_stop(be, tmp / str(i), kind)):
                        r.setdefault(m, []).append(v)
        rb.stop_all()
    finally:
        ray.shutdown()
        cluster.shutdown()

    med = {k: {m: statistics.median(v) for m, v in r.items()} for k, r in results.items()}
    print(f"real runtime (examples/mlp.py, 2 workers, gloo on CPU; Ray: workers in their bundles' actors), {a.repeats} repeat(s), medians:")
    print(f"  submit -> first step   local {med['local']['submit']:6.2f} s   ray {med['ray']['submit']:6.2f} s   "
          f"ray/local {med['ray']['submit'] / med['local']['submit']:.2f}x  (ray overhead {med['ray']['submit'] - med['local']['submit']:+.2f} s)")
    print(f"  resize 1->2, call -> first 2-worker step   local {med['local']['resize']:6.2f} s   ray {med['ray']['resize']:6.2f} s   "
          f"ray/local {med['ray']['resize'] / med['local']['resize']:.2f}x")
    print(f"  resize pause reported by the runtime (pause_s)   local {med['local']['pause']:6.2f} s   ray {med['ray']['pause']:6.2f} s")
    print(f"  of which training stood still (stall_s: stop flag -> first step at 2)   local {med['local']['stall']:6.2f} s   "
          f"ray {med['ray']['stall']:6.2f} s   (the rest: the joining worker starts while the old group trains on)")
    print(f"  stop of a running job (SIGTERM, the runtime checkpoints its step and exits) until the call returns   "
          f"local {med['local']['stop']:6.2f} s   ray {med['ray']['stop']:6.2f} s   (grace: local 10 s, ray STOP_GRACE_S 10 s)")
    print("  target: none stated in issue 8 (report the figures); the Ray - local difference is Ray's overhead")


if __name__ == "__main__":
    main()
