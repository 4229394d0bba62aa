import pytest

from dlsched.paths import shared_data


# `make test` runs pytest-xdist with --dist loadfile: a file's tests run on one worker, so its module fixtures (a
# service, a cluster) start once, and the tests that start a local Ray cluster (all in tests/backends/test_ray.py:
# they share /tmp/ray and the host's ports) run one cluster at a time; the multi-node clusters are
# tests/multinode/test_cluster.py's. (--dist loadgroup does not group under pytest 9.2: xdist 3.8 writes a test's
# group into item._nodeid, which pytest 9.2 no longer reads, so every test was scheduled on its own.)


@pytest.fixture(scope="session")
def data_dir():
    """The real data shipped beside the repo (../shared/data)."""
    return shared_data()
