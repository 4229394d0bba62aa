"""The job folder is written by other processes (and by hand): a malformed control.json is reported once per
distinct content, never once per poll (it flooded ~48 events a second into the log and the store)."""
import time

import pytest

from dlsched.train.files import atomic_file

from .helpers import events, finish, start_job, wait_for_event, wait_for_step

pytestmark = pytest.mark.slow


def test_a_malformed_control_file_is_reported_once_per_content(tmp_path):
    proc = start_job(tmp_path, 1, "--param", "num_samples=480", "--param", "batch_size=12", "--param", "throttle_s=0.1")
    wait_for_step(tmp_path, 1, proc)
    with atomic_file(tmp_path / "control.json") as f:
        f.write('{"workers": "two", "generation": 1}')
    wait_for_event(tmp_path, "control_rejected", 1, proc)
    time.sleep(1.0)          # ~50 polls of the same bad file (a negative check: waiting longer cannot fail it)
    assert len(events(tmp_path, "control_rejected")) == 1
    with atomic_file(tmp_path / "control.json") as f:
        f.write("not json")
    wait_for_event(tmp_path, "control_rejected", 2, proc)
    finish(proc)
    rejected = events(tmp_path, "control_rejected")
    assert len(rejected) == 2 and "workers" in rejected[0]["error"] and "not JSON" in rejected[1]["error"]
