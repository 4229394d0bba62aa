"""sim/metrics.py: the summary figures mean what they say."""
import pytest

from dlsched.policy.base import ClusterView
from dlsched.sim import run
from tests.sim.helpers import job


def test_gpu_utilisation_does_not_depend_on_when_the_first_job_arrives():
    """The span started at the first decision (t = interval), not the first arrival: the same job on the same
    cluster read 100 % when submitted at 0 s and 0.28 % when submitted at 10 h."""
    utils = [run([job("a", t, 1, 100)], "fifo", ClusterView.homogeneous(1, 1), interval=10,
                 restart_penalty=0).gpu_utilisation() for t in (0.0, 36000.0)]
    assert utils == [pytest.approx(1.0), pytest.approx(1.0)]
    late = run([job("a", 36005, 1, 100)], "fifo", ClusterView.homogeneous(1, 1), interval=10, restart_penalty=0)
    assert late.gpu_utilisation() == pytest.approx(100 / 105)   # seen at the decision 5 s after it arrived
