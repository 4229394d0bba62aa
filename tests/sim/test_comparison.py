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
