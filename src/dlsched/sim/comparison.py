"""Comparison of simulation results: a rich table, CSVs and plots (JCT CDF per policy, GPUs allocated over time)."""
from __future__ import annotations

from pathlib import Path
from typing import Sequence

import numpy as np
import pandas as pd

from dlsched.sim.metrics import SimResult

COLUMNS = [("policy", "policy"), ("finished", "finished"), ("avg_jct", "avg JCT (s)"), ("p50_jct", "p50 JCT (s)"),
           ("p99_jct", "p99 JCT (s)"), ("makespan", "makespan (s)"), ("avg_queue_delay", "avg queue (s)"),
           ("gpu_utilisation", "GPU util"), ("restarts", "restarts")]


def summary_frame(results: Sequence[SimResult], horizon: float | None = None) -> pd.DataFrame:
    rows = []
    for r in results:
        s = {"policy": r.policy, **r.summary()}
        if horizon is not None:
            s["finished_by_horizon"] = int((r.finished.finish <= horizon).sum())
        rows.append(s)
    return pd.DataFrame(rows)


def rich_table(frame: pd.DataFrame, title: str = "simulation"):
    from rich.table import Table

    table = Table(title=title)
    cols = [(k, h) for k, h in COLUMNS if k in frame] + [(k, k) for k in frame if k not in dict(COLUMNS) and k != "jobs"]
    for _, header in cols:
        table.add_column(header, justify="left" if header == "policy" else "right")
    for _, row in frame.iterrows():
        cells = []
        for key, _ in cols:
            v = row[key]
            cells.append(f"{v:.1%}" if key == "gpu_utilisation" else f"{v:,.2f}" if key == "avg_jct" else f"{v:,.0f}" if isinstance(v, float) else str(v))
        table.add_row(*cells)
    return table


def write_report(results: Sequence[SimResult], out: str | Path, horizon: float | None = None) -> list[Path]:
    """Write summary.csv, jobs-<policy>.csv, jct_cdf.png and gpu_allocation.png under ``out``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    written = [out / "summary.csv"]
    summary_frame(results, horizon).to_csv(written[0], index=False)
    for r in results:
        p = out / f"jobs-{r.policy}.csv"
        r.jobs.to_csv(p, index=False)
        written.append(p)
    fig, ax = plt.subplots(figsize=(6, 4))
    for r in results:
        jct = np.sort(r.finished.jct.to_numpy())
        ax.step(jct, np.arange(1, len(jct) + 1) / max(len(jct), 1), where="post", label=r.policy)
    ax.set(xscale="log", xlabel="job completion time (s)", ylabel="fraction of jobs", title="JCT CDF")
    ax.legend()
    fig.tight_layout()
    fig.savefig(out / "jct_cdf.png", dpi=120)
    plt.close(fig)
    fig, ax = plt.subplots(figsize=(7, 4))
    for r in results:
        tl = r.timeline
        ax.step(tl.time / 3600, tl.gpus_allocated, where="pre", label=r.policy)
    ax.axhline(results[0].total_gpus if results else 0, color="grey", lw=0.8, ls="--")
    ax.set(xlabel="time (h)", ylabel="GPUs allocated", title="GPU allocation over time")
    ax.legend()
    fig.tight_layout()
    fig.savefig(out / "gpu_allocation.png", dpi=120)
    plt.close(fig)
    written += [out / "jct_cdf.png", out / "gpu_allocation.png"]
    return written
