import signal

import pytest

from dlsched.paths import shared_data

# A suite started in the background by a non-interactive shell (`make test &`) inherits SIGINT ignored, and so does
# every process a test starts (an ignored signal survives exec): the Ctrl-C tests' runtimes then rightly ignore Ctrl-C,
# as a background job's, and trained to the end (exit 0). A test stands in for a terminal's foreground job.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


# `make test` runs pytest-xdist with --dist loadfile: a file's tests run on one worker, so its module fixtures (a
# service, a cluster) start once. The local Ray cluster is a module fixture (tests/backends/conftest.py) of three
# files, tests/backends/test_ray*.py, so they run on three workers at once, a cluster each with its own session
# folder and ports (only the autoscaler monitor's metrics port is fixed: a second cluster's monitor logs it taken and
# runs on); as one file they were the suite's longest (~950 s of a 1042 s CI run, on one worker). The
# multi-node clusters are tests/multinode/test_cluster.py's. (--dist loadgroup does not group under pytest 9.2:
# xdist 3.8 writes a test's group into item._nodeid, which pytest 9.2 no longer reads, so every test was scheduled
# on its own.)


@pytest.fixture(scope="session")
def data_dir():
    """The real data shipped beside the repo (../shared/data)."""
    return shared_data()


# The longest files first. `make test` has xdist hand files to its workers in collection order
# (--no-loadscope-reorder; by default it orders them by their number of tests), so a long file collected late ran
# on alone after the other workers had finished (the multi-node file: 3 tests, ~200 s, started at ~520 s of
# ~720 s). Listing only the 3 longest left tests/torch and tests/train, collected last, to the end: the suite's
# last ~15 minutes (of 36, under load) ran their gloo jobs with the rest done. The 30 longest by the sum of their
# tests' --durations in a full run, longest first (the rest follow in collection order, the short ones filling
# in at the end); re-derive them from such a run when files grow (last: a full -n 3 run at load 9-16, 2 808 s, each
# test's setup+call+teardown wall summed per file). Test order within a file is kept.
LONGEST_FILES_FIRST = tuple(f"tests/{f}.py" for f in (
    "torch/test_elastic_script", "backends/test_ray_service", "backends/test_ray_node_loss", "train/test_elastic",
    "service/test_restart_options", "train/test_ps", "torch/test_accumulation", "multinode/test_cluster",
    "backends/test_ray", "service/test_script_job", "commands/test_service_commands", "bench/test_quality_args",
    "commands/test_predict_curve", "train/test_fleet_job", "commands/test_train_command",
    "train/test_autoscale_engine", "sim/test_simulate_cli", "service/test_dashboard",
    "commands/test_ensemble_command", "test_docs", "service/test_restart", "service/test_faults",
    "torch/test_loader", "commands/test_predict", "torch/test_adaptive_batch", "service/test_api",
    "service/test_cli", "torch/test_noise", "train/test_resume_log", "perf/test_speed"))

def pytest_collection_modifyitems(config, items):
    rank = {path: i for i, path in enumerate(LONGEST_FILES_FIRST)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::")[0], len(rank)))
