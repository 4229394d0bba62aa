import re

import pytest

from dlsched.paths import shared_data


@pytest.fixture(scope="session")
def data_dir():
    """The real data shipped beside the repo (../shared/data)."""
    return shared_data()


_RAY = re.compile(r"(^|_)ray(_|$)")


def _group(item: pytest.Item) -> str:
    if "multinode" in item.path.parts:
        return "multinode"
    if any(_RAY.search(n) for n in (item.path.stem, *item.fixturenames)):
        return "ray"
    return item.nodeid.split("::")[0]


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Groups for ``pytest -n 2 --dist loadgroup`` (make test): a module's tests run on one worker, so its
    module fixtures (a service, a cluster) start once; the tests that start a local Ray cluster run on one
    worker, one cluster at a time (they share /tmp/ray and the host's ports). The multi-node clusters live in
    network and mount namespaces of their own, so they are a group of their own."""
    for item in items:
        item.add_marker(pytest.mark.xdist_group(_group(item)))
