"""What a simulation run produces: per-job records, a GPU-allocation timeline, and summary figures."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd


@dataclass(frozen=True)
class SimResult:
    """``jobs``: one row per job (id, submit, start, finish, jct, queue_delay, gpus, restarts, gpu_seconds);
    ``timeline``: one row per decision (time, gpus_allocated, active, finished)."""

    policy: str
    jobs: pd.DataFrame
    timeline: pd.DataFrame
    total_gpus: int
    end_time: float
    horizon: float | None = None

    @staticmethod
    def from_jobs(policy, jobs, timeline, total_gpus, end_time, horizon=None) -> "SimResult":
        rows = [{
            "id": j.spec.id, "submit": j.spec.submit_time, "start": j.start, "finish": j.finish,
            "gpus": j.spec.requested_gpus, "restarts": max(j.restarts, 0), "gpu_seconds": j.attained,
            "app": j.spec.app,
        } for j in sorted(jobs, key=lambda j: j.idx)]
        df = pd.DataFrame(rows, columns=["id", "submit", "start", "finish", "gpus", "restarts", "gpu_seconds", "app"])
        df["start"] = df["start"].astype(float)
        df["finish"] = df["finish"].astype(float)
        df["jct"] = df["finish"] - df["submit"]
        df["queue_delay"] = df["start"] - df["submit"]
        tl = pd.DataFrame(timeline, columns=["time", "gpus_allocated", "active", "finished"])
        return SimResult(policy, df, tl, total_gpus, float(end_time), horizon)

    @property
    def finished(self) -> pd.DataFrame:
        return self.jobs[self.jobs.finish.notna()]

    def jct(self) -> dict[str, float]:
        """JCTs keyed by job id (finished jobs only)."""
        return dict(zip(self.finished.id, self.finished.jct))

    @property
    def avg_jct(self) -> float:
        return float(self.finished.jct.mean())

    def gpu_utilisation(self) -> float:
        """Allocated GPU-seconds / available GPU-seconds from the first arrival to the last decision.

        (The span used to start at the first decision, t = interval, however late the first job arrived: one
        100 s job submitted at 10 h on one GPU read 0.3 %. Nothing is allocated before the first arrival, so
        only the span changes.)"""
        tl = self.timeline
        if len(tl) < 2:
            return 0.0
        t = tl.time.to_numpy()
        used = tl.gpus_allocated.to_numpy()[:-1] * np.diff(t)
        first = float(self.jobs.submit.min()) if len(self.jobs) else t[0]
        span = t[-1] - max(t[0], first)
        return float(used.sum() / (self.total_gpus * span)) if span > 0 else 0.0

    def summary(self) -> dict[str, float]:
        f = self.finished
        jct = f.jct.to_numpy()
        first = float(self.jobs.submit.min()) if len(self.jobs) else 0.0
        return {
            "jobs": int(len(self.jobs)),
            "finished": int(len(f)),
            "avg_jct": float(jct.mean()) if len(jct) else float("nan"),
            "p50_jct": float(np.percentile(jct, 50)) if len(jct) else float("nan"),
            "p99_jct": float(np.percentile(jct, 99)) if len(jct) else float("nan"),
            "makespan": float(f.finish.max() - first) if len(f) else float("nan"),
            "avg_queue_delay": float(f.queue_delay.mean()) if len(f) else float("nan"),
            "gpu_utilisation": self.gpu_utilisation(),
            "restarts": int(self.jobs.restarts.sum()),
        }
