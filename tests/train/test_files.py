import json
import tracemalloc

import pytest

from dlsched.errors import UserError
from dlsched.train.files import (MAX_PLAN_POINTS, MAX_RECORD_BYTES, atomic_file, atomic_write_json, read_control,
                                 read_lr_plan, read_status, write_control)
from dlsched.train.progress_log import read_progress


def test_control_round_trip_and_validation(tmp_path):
    assert read_control(tmp_path) is None
    write_control(tmp_path, 3, None, 2)
    ctl = read_control(tmp_path)
    assert (ctl.workers, ctl.batch_size, ctl.generation) == (3, None, 2)
    (tmp_path / "control.json").write_text('{"workers": 0, "generation": 1}')
    with pytest.raises(UserError, match=r"control.json: field workers=0"):
        read_control(tmp_path)
    (tmp_path / "control.json").write_text('{"workers": 2, "generation": 1, "batch_size": "big"}')
    with pytest.raises(UserError, match="field batch_size='big'"):
        read_control(tmp_path)
    (tmp_path / "control.json").write_text('{"workers": 3}')   # written by hand: the generation says how to fill it
    with pytest.raises(UserError, match=r"field generation=None must be an integer \(a resize by hand: 1 \+ status"):
        read_control(tmp_path)


def test_atomic_file_leaves_the_old_file_whole_when_the_write_fails(tmp_path):
    path = tmp_path / "status.json"
    atomic_write_json(path, {"state": "running"})
    with pytest.raises(RuntimeError):
        with atomic_file(path) as f:
            f.write('{"state": "fin')
            raise RuntimeError("crash mid-write")
    assert read_status(tmp_path) == {"state": "running"}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["status.json"]  # no temp file left behind
    assert read_status(tmp_path / "missing") is None


def test_control_carries_the_granted_devices(tmp_path):
    write_control(tmp_path, 2, None, 1)
    assert read_control(tmp_path).devices is None  # absent: the job keeps the devices it has
    write_control(tmp_path, 2, None, 1, devices=["0", "3"])
    assert read_control(tmp_path).devices == ("0", "3")
    (tmp_path / "control.json").write_text('{"workers": 2, "generation": 1, "devices": [0, 3]}')
    with pytest.raises(UserError, match=r"control.json: field devices=\[0, 3\]"):
        read_control(tmp_path)


def test_progress_reader_skips_a_torn_last_line_only(tmp_path, caplog):
    (tmp_path / "progress.jsonl").write_text('{"step": 1}\n{"step": 2}\n{"step": 3, "lo')
    assert read_progress(tmp_path) == [{"step": 1}, {"step": 2}]
    assert "torn last line 3" in caplog.text
    (tmp_path / "progress.jsonl").write_text('{"step": 1}\n{"st\n{"step": 3}\n')
    with pytest.raises(UserError, match=r"progress.jsonl:2: unreadable record"):
        read_progress(tmp_path)


def test_a_control_watch_applies_each_generation_once_and_reports_a_bad_file_once_per_content(tmp_path):
    from dlsched.train.files import ControlWatch, write_control

    heard = []
    watch = ControlWatch(tmp_path, heard.append)
    assert watch.poll() is None                                  # no file yet
    write_control(tmp_path, 2, None, 0)
    assert watch.poll().workers == 2 and watch.poll() is None    # a level: applied once
    for _ in range(3):
        (tmp_path / "control.json").write_text('{"workers": "two"}')
        assert watch.poll() is None
    (tmp_path / "control.json").write_text('{"workers": -1, "generation": 5}')
    assert watch.poll() is None and watch.poll() is None
    assert len(heard) == 2 and all("control.json" in h for h in heard)
    write_control(tmp_path, 3, 64, 1)
    assert (watch.poll().batch_size, watch.generation) == (64, 1)


def test_a_rejection_names_the_content_it_is_remembered_by(tmp_path):
    """The file is read once per poll: a replacement between a parse and a second read cannot pin one file's
    error on the other's content (seen under load: the second rejection repeated the first one's error)."""
    from dlsched.train.files import ControlWatch

    heard = []
    watch = ControlWatch(tmp_path, heard.append)
    for content in ('{"workers": "two", "generation": 1}', "not json", b"\xff\xfe", '{"workers": "two", "generation": 1}'):
        (tmp_path / "control.json").write_bytes(content if isinstance(content, bytes) else content.encode())
        watch.poll()
        watch.poll()
    assert len(heard) == 4 and "workers" in heard[0] and "not JSON" in heard[1] and "not JSON" in heard[2]


@pytest.mark.parametrize("bad", [
    {"step": 3, "batch_size": 8, "steps": [4, 5], "lr": [0.1]},            # one LR short
    {"step": 3, "batch_size": 8, "steps": [5, 4], "lr": [0.1, 0.1]},       # steps not increasing
    {"step": 5, "batch_size": 8, "steps": [4, 6], "lr": [0.1, 0.1]},       # a step not after the plan's
    {"step": 3, "batch_size": 8, "steps": [4, 5], "lr": [0.1, -1]},        # a negative LR
    {"step": 3, "batch_size": 8, "steps": [4, "5"], "lr": [0.1, 0.1]},     # a string
    {"step": 3, "steps": [4, 5], "lr": [0.1, 0.1]},                        # no batch
    [1, 2],
])
def test_an_lr_plan_that_is_not_well_formed_is_no_plan(tmp_path, bad):
    """The service reads the runtime's lr_plan.json every round: a bad one must be ignored, never raise."""
    assert read_lr_plan(tmp_path) is None                                   # none written
    atomic_write_json(tmp_path / "lr_plan.json", {"step": 3, "batch_size": 8, "steps": [4, 5], "lr": [0.1, 0.01]})
    assert read_lr_plan(tmp_path)["lr"] == [0.1, 0.01]
    atomic_write_json(tmp_path / "lr_plan.json", bad)
    assert read_lr_plan(tmp_path) is None
    (tmp_path / "lr_plan.json").write_text('{"step": 3, "batch_size": 8, "steps": [4, 5], "lr": [0.1, NaN]}')
    assert read_lr_plan(tmp_path) is None


@pytest.mark.parametrize("place, kept", [
    ({"samples": 24, "lr_factor": 1.5}, True),
    ({"samples": 24, "lr_factor": 0}, False),        # no factor divides an LR
    ({"samples": -1, "lr_factor": 1.0}, False),
    ({"samples": "24", "lr_factor": 1.0}, False),
    ({"samples": 24}, False),                        # one without the other places nothing
    ({}, False),                                     # an older runtime's plan
])
def test_a_plans_samples_and_lr_factor_are_kept_only_together_and_well_formed(tmp_path, place, kept):
    """They place the plan at another batch (``service.progress_axis``); without them it is still a plan at its own."""
    atomic_write_json(tmp_path / "lr_plan.json", {"step": 3, "batch_size": 8, "steps": [4, 5], "lr": [0.1, 0.01], **place})
    plan = read_lr_plan(tmp_path)
    assert plan["lr"] == [0.1, 0.01]
    assert ("samples" in plan and "lr_factor" in plan) == kept and ("samples" in plan or "lr_factor" in plan) == kept


def test_the_progress_tail_reads_only_what_was_appended_since_its_last_read(tmp_path):
    """The autoscale engine re-read and re-parsed the whole progress.jsonl at every 0.2 s poll (0.4 s at 50 000 steps:
    a core of a 2-core host, slowing the throughput it measures); it now reads the bytes appended since."""
    from dlsched.train.progress_log import ProgressTail

    log = tmp_path / "progress.jsonl"
    log.write_text("".join(json.dumps({"step": i}) + "\n" for i in range(3)))
    tail = ProgressTail(tmp_path, from_end=True)
    assert tail.read() == [] and tail.offset == log.stat().st_size   # the earlier run's records are not news
    with open(log, "a") as f:
        f.write(json.dumps({"step": 3}) + "\n" + '{"step": ')   # a record, and one being written
    assert tail.read() == [{"step": 3}]
    with open(log, "a") as f:
        f.write("4}\n")
    assert tail.read() == [{"step": 4}] and tail.read() == []


def _peak_bytes(read):
    """``read()``'s answer and the most memory Python allocated while it ran."""
    tracemalloc.start()
    try:
        return read(), tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize("name, read", [("status.json", read_status), ("lr_plan.json", read_lr_plan)])
def test_a_job_folder_record_job_code_made_huge_is_no_record_and_is_not_read_whole(tmp_path, name, read):
    """The service reads status.json and lr_plan.json every round, and job code may write them: a 144 MB lr_plan.json
    took a real service from 0.2 to 2.5 GB and stopped its rounds for 100 s. Past 1 MiB one is malformed, read no
    further (a sparse 256 MiB file: what was read would be counted here)."""
    record = {"state": "running"} if name == "status.json" else {"step": 3, "batch_size": 8, "steps": [4], "lr": [0.1]}
    path = tmp_path / name
    path.write_text(json.dumps(record) + " " * MAX_RECORD_BYTES)   # well formed, padded past the limit
    assert read(tmp_path) is None
    with open(path, "w") as f:
        f.write(json.dumps(record))
        f.truncate(256 << 20)
    answer, peak = _peak_bytes(lambda: read(tmp_path))
    assert answer is None and peak < 4 * MAX_RECORD_BYTES


def test_an_lr_plan_of_more_points_than_the_runtime_writes_is_no_plan(tmp_path):
    """~800 points when dlsched.torch writes it; 70 000 (under 1 MiB) slowed each of a real service's rounds 40 %."""
    n = MAX_PLAN_POINTS + 1
    atomic_write_json(tmp_path / "lr_plan.json", {"step": 0, "batch_size": 8, "steps": list(range(1, n + 1)),
                                                  "lr": [0.1] * n})
    assert read_lr_plan(tmp_path) is None
