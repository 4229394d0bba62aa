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

# the run a row came from (``dlsched simulate`` adds them): in summary.csv and --json/--csv, not in the printed tables
RUN_CONTEXT = ("workload", "trace_jobs", "cluster", "cluster_gpus", "interval", "restart_penalty", "placement", "horizon")
# What each column means, as the engine computes it (sim/metrics.py): report.md carries these, so a number can be
# checked by hand from jobs-<policy>.csv (the table's columns were defined nowhere a user could read)
DEFINITIONS = {
    "finished": "jobs completed (by --horizon, when given); `jobs` in summary.csv counts every job simulated",
    "avg_jct": "mean of finish - submit over the finished jobs (JCT)",
    "p50_jct": "median JCT of the finished jobs (numpy percentile, linear interpolation)",
    "p99_jct": "99th percentile JCT of the finished jobs (numpy percentile, linear interpolation)",
    "makespan": "last finish - first submit (finished jobs)",
    "avg_queue_delay": "mean of start - submit over the finished jobs: the wait until the first start (a "
                       "preempted job's later waits are not in it)",
    "gpu_utilisation": "GPU-seconds held / (cluster GPUs x span), from timeline-<policy>.csv: a decision's "
                       "allocation (gpus_allocated) holds until the next decision (a finished job's GPUs count until then, restart pauses too) and the span runs "
                       "from the later of the first arrival and the first decision to the last decision; so it can "
                       "differ slightly from sum(gpu_seconds) / (GPUs x makespan)",
    "restarts": "node-map changes after a job's first start, summed over jobs (each costs --restart-penalty s)",
    "workload": "the trace simulated (its file)", "trace_jobs": "the jobs read from it",
    "cluster": "nodes / GPUs simulated", "cluster_gpus": "the cluster's GPUs",
    "interval": "--interval: seconds between scheduling decisions", "restart_penalty": "--restart-penalty (s)",
    "placement": "--placement, for jobs a policy does not place", "horizon": "--horizon (s), empty without one",
    "remaining": "what the policy knew of each job's remaining work (oracle / predicted / none / noise:SIGMA; "
                 "'none for N/M jobs': jobs the predictor has nothing to predict from; 'none (not read)': the "
                 "policy orders jobs without it, e.g. FIFO by submission, Tiresias by attained service)",
}
JOB_COLUMNS = {
    "id": "the trace's job name (Philly-style: its job_id, jobid, id or name column, else philly-LINE, the file's "
          "line)",
    "submit": "submission time (s; Philly: after the trace's earliest timestamp)",
    "start": "first start (s); empty if it never ran",
    "finish": "completion (s); empty if unfinished by --horizon",
    "gpus": "GPUs the trace requested (an elastic policy may give more or fewer: gpu_seconds is what it held)",
    "restarts": "node-map changes after its first start",
    "gpu_seconds": "GPU-seconds it held, restart pauses included",
    "app": "its Pollux application (empty for a duration-only job)",
    "jct": "finish - submit",
    "queue_delay": "start - submit",
}

# summary.csv, --json and --csv carry the keys, not the headers: their units were stated nowhere (0.7 read as 0.7 %)
MACHINE_UNITS = ("summary.csv (and `simulate --json` / `--csv`) has these columns under their keys (avg_jct, p50_jct, "
                 "p99_jct, makespan, avg_queue_delay in s; gpu_utilisation a fraction, 0.7 = 70 %).")


def summary_frame(results: Sequence[SimResult], horizon: float | None = None) -> pd.DataFrame:
    rows = []
    for r in results:
        s = {"policy": r.policy, **r.summary()}
        if horizon is not None:
            s["finished_by_horizon"] = int((r.finished.finish <= horizon).sum())
        rows.append(s)
    return pd.DataFrame(rows)


def print_summary(frame: pd.DataFrame, title: str = "simulation", wide: bool = False) -> None:
    """The comparison table; no number or policy name is ever cut (``display.py``)."""
    from dlsched.display import Column, table

    keys = [k for k, _ in COLUMNS if k in frame] + [k for k in frame
                                                    if k not in dict(COLUMNS) and k != "jobs" and k not in RUN_CONTEXT]
    # the remaining-work mode is in the title too; finished_by_horizon only with --horizon
    low_value = {"avg_queue_delay": 1, "finished_by_horizon": 1, "p50_jct": 2, "restarts": 3, "remaining": 4}
    # headers broken where they may be: one-line headers overflowed 80 columns, and rich then folded the
    # cells, policy names included ("goodput-fa" / "ir")
    headers = dict(COLUMNS) | {"finished_by_horizon": "finished by horizon"}
    cols = [Column(headers.get(k, k).replace(" (s)", "\n(s)").replace(" by ", "\nby "),
                   "left" if k == "policy" else "right", low_value.get(k, 0)) for k in keys]
    rows = []
    for _, row in frame.iterrows():
        rows.append([f"{row[k]:.1%}" if k == "gpu_utilisation" else f"{row[k]:,.2f}" if k == "avg_jct"
                     else f"{row[k]:,.0f}" if isinstance(row[k], float) else str(row[k]) for k in keys])
    table(cols, rows, title=title, wide=wide, show_all="--wide shows all")


def markdown_report(summary: pd.DataFrame, title: str = "dlsched simulation") -> str:
    frame = summary.drop(columns=["jobs", *RUN_CONTEXT], errors="ignore")
    if "gpu_utilisation" in frame:
        frame["gpu_utilisation"] = (100 * frame["gpu_utilisation"]).round(1)
    frame = frame.rename(columns=dict(COLUMNS) | {"gpu_utilisation": "GPU util (%)"})
    headers = dict(COLUMNS) | {"gpu_utilisation": "GPU util (%)"}
    defined = [f"- **{headers.get(k, k)}**: {DEFINITIONS[k]}" for k in summary if k in DEFINITIONS]
    jobs = [f"- `{k}`: {v}" for k, v in JOB_COLUMNS.items()]
    return "\n".join([f"# {title}", "", frame.to_markdown(index=False, floatfmt=",.1f"), "", "## Columns", "",
                      *defined, "", MACHINE_UNITS, "", "## jobs-&lt;policy&gt;.csv (one row per job, times in s)", "",
                      *jobs, "",
                      "timeline-&lt;policy&gt;.csv: one row per decision: time, gpus_allocated (held until the next "
                      "row), active and finished jobs.", "",
                      "![JCT CDF](jct_cdf.png)", "", "![GPU allocation](gpu_allocation.png)", ""])


def jct_cdf(r: SimResult) -> tuple[np.ndarray, np.ndarray]:
    """The JCT CDF's points: finished jobs' JCTs, sorted, and the share of all jobs submitted by the run's end done by
    each. Over the finished ones only, a policy that finished a third of its jobs by --horizon (the short ones)
    reached 1.0 first; jobs submitted after the horizon could not have finished, so they do not count."""
    jct = np.sort(r.finished.jct.to_numpy())
    return jct, np.arange(1, len(jct) + 1) / max(int((r.jobs.submit <= r.end_time).sum()), 1)


def plot_allocation(ax, r: SimResult) -> None:
    """GPUs allocated over time (hours). A decision's allocation holds until the next one (``where="post"``), as
    ``SimResult.gpu_utilisation`` counts it: the area under the curve is the allocated GPU-hours."""
    tl = r.timeline
    ax.fill_between(tl.time / 3600, tl.gpus_allocated, step="post", alpha=0.45)
    ax.step(tl.time / 3600, tl.gpus_allocated, where="post", lw=0.8)
    ax.axhline(r.total_gpus, color="grey", lw=0.8, ls="--")
    ax.set_ylim(0, r.total_gpus * 1.05 or 1)
    ax.set_ylabel("GPUs")
    ax.set_title(f"{r.policy}: GPUs allocated (dashed: cluster size)", fontsize=9, loc="left")


def stale_report_files(out: Path, written: Sequence[Path], policies: Sequence[str]) -> list[Path]:
    """Files an earlier report left in ``out`` that this one did not write: per-policy CSVs of policies not run now,
    a skipped.txt of rows this run did not skip. They sat beside the new report.md as if they were its (a script
    reading jobs-*.csv mixed two runs). Only names a report writes (``policies``: every registered name), and only
    where a report.md is."""
    if not (out / "report.md").is_file():
        return []
    mine = [out / f"{kind}-{p}.csv" for p in policies for kind in ("jobs", "timeline")] + [out / "skipped.txt"]
    keep = {p.resolve() for p in written}
    return sorted(p for p in mine if p.is_file() and p.resolve() not in keep)


def write_report(results: Sequence[SimResult], out: str | Path, horizon: float | None = None,
                 summary: pd.DataFrame | None = None, title: str = "dlsched simulation") -> list[Path]:
    """Write summary.csv, jobs-<policy>.csv, timeline-<policy>.csv, jct_cdf.png, gpu_allocation.png and report.md
    (the table and what each column means) under ``out``.
    ``summary``: the comparison as printed (default ``summary_frame(results, horizon)``), so that the files carry
    every column of the printed table (the remaining-work mode the CLI adds included)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    written = [out / "summary.csv"]
    summary = summary_frame(results, horizon) if summary is None else summary
    summary.to_csv(written[0], index=False)
    for r in results:
        p = out / f"jobs-{r.policy}.csv"
        r.jobs.to_csv(p, index=False)
        written.append(p)
    for r in results:   # GPU util is computed from it: without it no one could check that figure by hand
        p = out / f"timeline-{r.policy}.csv"
        r.timeline.to_csv(p, index=False)
        written.append(p)
    fig, ax = plt.subplots(figsize=(6, 4))
    for r in results:
        ax.step(*jct_cdf(r), where="post", label=r.policy)
    ax.set(xscale="log", xlabel="job completion time (s)", ylabel="fraction of jobs submitted finished within it",
           title="JCT CDF (unfinished jobs: the gap below 1)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(out / "jct_cdf.png", dpi=120)
    plt.close(fig)
    # one panel per policy: overlaid step lines of several policies cannot be told apart
    fig, axes = plt.subplots(len(results) or 1, 1, figsize=(8, 1.6 + 1.5 * max(len(results), 1)), sharex=True,
                             squeeze=False)
    for ax, r in zip(axes[:, 0], results):
        plot_allocation(ax, r)
    axes[-1, 0].set_xlabel("time (h)")
    fig.tight_layout()
    fig.savefig(out / "gpu_allocation.png", dpi=120)
    plt.close(fig)
    (out / "report.md").write_text(markdown_report(summary, title))
    written += [out / "jct_cdf.png", out / "gpu_allocation.png", out / "report.md"]
    return written
