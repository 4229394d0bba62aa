"""progress.jsonl rotated into segments (``train.progress_log``): every reader follows one logical stream, no record
lost or read twice, whoever reads from an offset taken before a rotation."""
import json

from dlsched.backends.base import read_progress as service_read
from dlsched.train.progress_log import (ProgressLog, ProgressTail, iter_records, read_lines, read_progress, segment_name,
                                        segments)
from dlsched.train.resume_log import read_resume_log


def step(i):
    return {"time": 1000.0 + i, "step": i, "samples": 32 * i, "loss": 1.0 / i, "workers": 1, "batch_size": 32,
            "control_generation": 0}


def drain(job_dir, offset, max_bytes=-1):
    """What the service reads from ``offset`` until nothing new: its records and the offset it ends at."""
    out = []
    while True:
        records, end = service_read(job_dir, offset, max_bytes)
        out += records
        if end == offset:
            return out, offset
        offset = end


def test_a_rotated_log_reads_as_one_stream_from_any_offset(tmp_path, monkeypatch):
    monkeypatch.setenv("DLSCHED_PROGRESS_ROTATE_BYTES", "1000")
    log = ProgressLog(tmp_path, first=True)
    rank = ProgressLog(tmp_path)          # a second writer (a ps rank's commit) opened before any rotation
    for i in range(1, 11):
        log.write(step(i))
    first, offset = drain(tmp_path, 0, max_bytes=300)   # the service, a few lines a read
    for i in range(11, 41):
        (rank if i % 3 == 0 else log).write(step(i))
    assert len(segments(tmp_path)) >= 3                 # rotated, each segment named by its first byte's offset
    rest, _ = drain(tmp_path, offset, max_bytes=300)
    steps = [r["step"] for r in first + rest]
    assert steps == list(range(1, 41))                  # the rank's lines too: none went into a rotated file
    assert [r["step"] for r in read_progress(tmp_path)] == list(range(1, 41))
    assert not [r for r in first + rest if "event" in r]   # the live file's header line is no record
    # offsets are logical: each segment's name is where it starts, and it ends where the next one begins
    bases = [b for b, _ in segments(tmp_path)]
    assert all(b + (tmp_path / segment_name(b)).stat().st_size == nxt for b, nxt in zip(bases, bases[1:]))
    tail = ProgressTail(tmp_path, from_end=True)
    log.write(step(41))
    assert [r["step"] for r in tail.read()] == [41]
    # a resume's summary (its offset logical) taken, then more rotations: the next resume reads only what is new
    assert read_resume_log(tmp_path, 41).answered == 0
    for i in range(42, 60):
        log.write(step(i))
    seen = []
    assert read_resume_log(tmp_path, 59).batch == 32
    summary = json.loads((tmp_path / "progress.resume.json").read_text())
    list(iter_records(tmp_path, offset=summary["offset"], seen=seen.append))
    assert seen == []                                   # the summary's offset is the log's end


def test_a_segment_gone_is_said_and_skipped_not_waited_on(tmp_path, monkeypatch):
    monkeypatch.setenv("DLSCHED_PROGRESS_ROTATE_BYTES", "600")
    log = ProgressLog(tmp_path, first=True)
    for i in range(1, 21):
        log.write(step(i))
    (base, gone), *_ = segments(tmp_path)
    size = gone.stat().st_size
    gone.unlink()                                       # an operator compressed it away
    records, end = service_read(tmp_path, 0)
    assert end == base + size and records[0]["event"] == "malformed_progress" and f"bytes 0-{size}" in records[0]["line"]
    rest, _ = drain(tmp_path, end)
    assert [r["step"] for r in rest] == [r["step"] for r in read_progress(tmp_path)]
    assert rest[0]["step"] > 1 and rest[-1]["step"] == 20
    assert read_lines(tmp_path, 10 ** 12)[1] == 10 ** 12   # past the end: nothing, the offset stays


def test_without_rotation_the_log_is_the_one_file_it_always_was(tmp_path, monkeypatch):
    monkeypatch.setenv("DLSCHED_PROGRESS_ROTATE_BYTES", "0")
    log = ProgressLog(tmp_path, first=True)
    for i in range(1, 30):
        log.write(step(i))
    assert segments(tmp_path) == [] and (tmp_path / "progress.jsonl").read_text().splitlines()[0] == json.dumps(step(1))
    records, end = service_read(tmp_path, 0)
    assert len(records) == 29 and end == (tmp_path / "progress.jsonl").stat().st_size


def test_predict_curve_on_a_job_folder_reads_its_rotated_segments(tmp_path, monkeypatch):
    from dlsched.perf.curve_readers import read_curve

    monkeypatch.setenv("DLSCHED_PROGRESS_ROTATE_BYTES", "700")
    log = ProgressLog(tmp_path, first=True)
    for i in range(1, 31):
        log.write(step(i))
    assert segments(tmp_path)
    for where in (tmp_path, tmp_path / "progress.jsonl"):
        assert list(read_curve(where, x="step", y="loss").x) == list(range(1, 31))


def test_a_rotation_cut_short_before_its_rename_is_finished_by_the_next(tmp_path, monkeypatch):
    """Killed between the hard link and the rename, a rotation leaves one file under both names: readers take it
    as the live file, and the next rotation goes on from there."""
    import os

    monkeypatch.setenv("DLSCHED_PROGRESS_ROTATE_BYTES", "800")
    log = ProgressLog(tmp_path, first=True)
    for i in range(1, 6):
        log.write(step(i))
    os.link(tmp_path / "progress.jsonl", tmp_path / segment_name(0))
    first, offset = drain(tmp_path, 0)
    for i in range(6, 21):
        log.write(step(i))
    rest, _ = drain(tmp_path, offset)
    assert [r["step"] for r in first + rest] == list(range(1, 21)) == [r["step"] for r in read_progress(tmp_path)]
    assert len(segments(tmp_path)) >= 2


def test_one_read_after_the_job_ends_gets_every_record_past_a_rotation(tmp_path, monkeypatch):
    # the service reads a finished job once more, after its exit: a read that stopped at a segment's end lost every
    # record the live file got after the rotation (a real-runtime job under load ended with 3 840 of its 4 800 samples)
    monkeypatch.setenv("DLSCHED_PROGRESS_ROTATE_BYTES", "1000")
    log = ProgressLog(tmp_path, first=True)
    log.write(step(1))
    first, offset = service_read(tmp_path, 0)
    for i in range(2, 41):
        log.write(step(i))
    assert len(segments(tmp_path)) >= 3
    rest, _ = service_read(tmp_path, offset)
    assert [r["step"] for r in first + rest] == list(range(1, 41))
    # bounded as before: a read takes at most max_bytes, and the next goes on from where it stopped
    some, end = service_read(tmp_path, offset, 300)
    assert 0 < end - offset <= 300 and [r["step"] for r in some] == list(range(2, 2 + len(some)))
