import pytest

from dlsched.paths import shared_data


@pytest.fixture(scope="session")
def data_dir():
    """The real data shipped beside the repo (../shared/data)."""
    return shared_data()
