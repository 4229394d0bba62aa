"""sim/comparison.py: what the report draws agrees with the table it prints."""
import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

from dlsched.policy.base import ClusterView  # noqa: E402
from dlsched.sim import run  # noqa: E402
from dlsched.sim.comparison import plot_allocation  # noqa: E402
from tests.sim.helpers import job  # noqa: E402


def _area(vertices: np.ndarray) -> float:
    x, y = vertices[:, 0], vertices[:, 1]
    return abs(float(np.dot(x, np.roll(y, -1)) - np.dot(y, np.roll(x, -1)))) / 2


def test_allocation_plot_area_is_the_utilisation_of_the_table():
    """The plot drew each decision's allocation over the stretch *before* it (step 'pre'): after an idle gap the
    simulator skips, the next job's GPUs were drawn over the whole gap (here 9.8 idle hours drawn busy), so the
    picture contradicted the table's GPU util."""
    r = run([job("a", 0, 1, 100), job("b", 36000, 1, 100)], "fifo", ClusterView.homogeneous(1, 1), interval=10,
            restart_penalty=0)
    fig, ax = plt.subplots()
    plot_allocation(ax, r)
    drawn_gpu_hours = sum(_area(p.vertices) for p in ax.collections[0].get_paths())
    plt.close(fig)
    tl = r.timeline
    table_gpu_hours = r.gpu_utilisation() * r.total_gpus * (tl.time.iloc[-1] - tl.time.iloc[0]) / 3600
    assert table_gpu_hours > 0 and drawn_gpu_hours == pytest.approx(table_gpu_hours, rel=1e-9)
    assert drawn_gpu_hours < 0.1   # 200 GPU-seconds, not the 10 hours between the jobs


def test_the_comparison_at_80_columns_folds_no_policy_name_or_number(monkeypatch, capsys):
    """At 80 columns the one-line headers overflowed, and rich folded the cells: 'goodput-fa' over 'ir',
    'predicte' over 'd', 'finishe' over 'd'."""
    from dlsched.sim.comparison import print_summary, summary_frame

    monkeypatch.setenv("COLUMNS", "80")
    jobs = [job("a", 0, 1, 100), job("b", 50, 2, 300)]
    results = [run(jobs, p, ClusterView.homogeneous(1, 2), interval=10, restart_penalty=0)
               for p in ("elastic-gpu-only", "goodput-fair", "fifo")]
    frame = summary_frame(results, horizon=10_000).assign(remaining="predicted")
    print_summary(frame, "t")
    out = capsys.readouterr().out
    rows = [line.split() for line in out.splitlines()]
    assert max(len(line) for line in out.splitlines()) <= 80
    for r in results:   # each policy's row whole on one line, its numbers beside it
        row = next(x for x in rows if x and x[0] == r.policy)
        assert row[1] == str(len(r.finished)) and f"{100 * r.gpu_utilisation():.1f}%" in row


def test_every_summary_figure_follows_its_written_definition_from_the_report_files(tmp_path):
    """The table's columns were defined nowhere a user could read, and GPU util could not be checked by hand (it
    differs from sum(gpu_seconds) / (GPUs x makespan)). report.md now defines each column, and every figure of
    summary.csv is recomputed here from jobs-<policy>.csv and timeline-<policy>.csv as written there."""
    import pandas as pd

    from dlsched.sim.comparison import DEFINITIONS, RUN_CONTEXT, write_report

    jobs = [job("a", 0, 2, 100), job("b", 5, 2, 300), job("c", 130, 1, 40), job("d", 131, 4, 10)]
    results = [run(jobs, p, ClusterView.homogeneous(2, 2), interval=60, restart_penalty=30) for p in ("fifo", "srtf")]
    write_report(results, tmp_path)
    md = (tmp_path / "report.md").read_text()
    assert all(f"**{h}**" in md for h in ("avg JCT (s)", "makespan (s)", "avg queue (s)", "GPU util (%)"))
    # the CLI adds the remaining-work mode and the run's context columns (tests/commands/test_simulate_command.py)
    assert all(d in md for k, d in DEFINITIONS.items() if k not in ("remaining", *RUN_CONTEXT))
    # summary.csv's keys carry no units: 0.7 of gpu_utilisation read as 0.7 % beside the report's "GPU util (%)"
    assert "gpu_utilisation a fraction, 0.7 = 70 %" in md and "avg_queue_delay in s" in md
    summary = pd.read_csv(tmp_path / "summary.csv").set_index("policy")
    for r in results:
        j = pd.read_csv(tmp_path / f"jobs-{r.policy}.csv")
        tl = pd.read_csv(tmp_path / f"timeline-{r.policy}.csv")
        s = summary.loc[r.policy]
        f = j[j.finish.notna()]
        assert s.avg_jct == pytest.approx((f.finish - f.submit).mean())
        assert s.p99_jct == pytest.approx(np.percentile(f.finish - f.submit, 99))
        assert s.makespan == pytest.approx(f.finish.max() - j.submit.min())
        assert s.avg_queue_delay == pytest.approx((f.start - f.submit).mean())
        held = (tl.gpus_allocated.iloc[:-1].to_numpy() * np.diff(tl.time)).sum()
        span = tl.time.iloc[-1] - max(tl.time.iloc[0], j.submit.min())
        assert s.gpu_utilisation == pytest.approx(held / (4 * span))


def test_the_jct_cdf_counts_every_job_so_unfinished_ones_keep_it_below_one():
    """The CDF was over finished jobs only: with --horizon, a policy that finished one short job of three drew a
    curve reaching 1.0 at 10 s, above one that finished all three."""
    from dlsched.sim.comparison import jct_cdf

    jobs = [job("a", 0, 1, 10), job("b", 0, 1, 500), job("c", 0, 1, 500), job("late", 5000, 1, 10)]
    r = run(jobs, "fifo", ClusterView.homogeneous(1, 1), interval=10, restart_penalty=0, horizon=100)
    x, y = jct_cdf(r)   # "late" arrives after the horizon: it could not have finished
    assert list(x) == [20.0] and list(y) == pytest.approx([1 / 3])
    full = run(jobs, "fifo", ClusterView.homogeneous(1, 1), interval=10, restart_penalty=0)
    assert list(jct_cdf(full)[1]) == pytest.approx([1 / 4, 2 / 4, 3 / 4, 1.0])
