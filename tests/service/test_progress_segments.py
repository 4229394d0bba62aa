"""A running job's rotated progress.jsonl segments go once the service stored them and they are older than the
cluster's progress_keep_days; a resume still learns from them what it must (``service/progress_segments.py``)."""
import os
import time

from dlsched.backends.recording import RecordingBackend
from dlsched.perf.curve_readers import read_curve
from dlsched.service.loop import LiveLoop
from dlsched.service.progress_segments import TRIMMED
from dlsched.service.store import RUNNING, Store
from dlsched.spec import load_job_spec
from dlsched.train.progress_log import LIVE, ProgressLog, read_progress, removed_bytes, segments
from dlsched.train.resume_log import read_resume_log
from tests.service.conftest import cluster, job_yaml

DAY = 86_400.0


def step(i):
    return {"time": 1000.0 + i, "step": i, "samples": 32 * i, "loss": 1.0 / i, "workers": 1, "batch_size": 32,
            "generation": 1}


def _running_job(tmp_path, keep_days, monkeypatch, steps=80):
    """A job whose real runtime log rotated every ~1 KB; answered control generation 5 in its first segment."""
    monkeypatch.setenv("DLSCHED_PROGRESS_ROTATE_BYTES", "1000")
    folder = tmp_path / "jobs" / "1"
    folder.mkdir(parents=True)
    log = ProgressLog(folder, first=True)
    log.write({"event": "resized", "time": 1000.0, "workers": 1, "control_generation": 5, "generation": 1})
    for i in range(1, steps):
        log.write(step(i))
    store = Store(tmp_path / "s.db")
    now = [time.time()]
    spec = cluster("test-fifo", (2,)).model_copy(update={"progress_keep_days": keep_days})
    loop = LiveLoop(store, RecordingBackend(), spec, tmp_path, clock=lambda: now[0], jobs_dir=tmp_path / "jobs")
    job = store.submit(load_job_spec(job_yaml("long")), now=now[0])
    store.transition(job, RUNNING, now[0])
    store.update(job, job_dir=str(folder), num_gpus=1, placement={"n0": 1})
    return store, loop, folder, log, now


def _age(folder, days):
    for _, path in segments(folder):
        t = time.time() - days * DAY
        os.utime(path, (t, t))


def test_stored_segments_older_than_the_window_go_and_a_resume_still_knows_what_they_said(tmp_path, monkeypatch):
    store, loop, folder, log, now = _running_job(tmp_path, 7, monkeypatch)
    before = read_resume_log(folder, -1)   # what a resume learns from the whole log (its summary removed below)
    (folder / "progress.resume.json").unlink()
    _age(folder, 8)
    rotated = segments(folder)
    assert len(rotated) >= 5
    loop.round()                            # reads, then trims (the first round's pass)
    stored = store.get(1).progress_offset
    left = segments(folder)
    assert len(left) < len(rotated) and (folder / LIVE).exists()
    assert 0 < removed_bytes(folder) <= stored   # only what the service read (the segments' bytes are contiguous)
    after = read_resume_log(folder, 79)     # the summary the service folded before it trimmed
    assert (after.answered, after.generation) == (before.answered, before.generation) == (5, 1)
    trimmed = [e for e in store.events(1) if e["kind"] == TRIMMED]
    assert len(trimmed) == 1 and trimmed[0]["detail"]["first"] == 0 and trimmed[0]["detail"]["to"] == removed_bytes(folder)
    # the service's own reads go on from its offset; a whole-log reader starts past what went, and says so
    log.write(step(81))
    loop.round()
    assert [r["step"] for r in store.progress(1)][-2:] == [79, 81]
    steps = [r["step"] for r in read_progress(folder) if "event" not in r]
    assert steps == list(range(steps[0], 80)) + [81] and steps[0] > 1
    curve = read_curve(folder / LIVE, x="step", y="loss")
    assert "removed" in (curve.note or ""), curve.note


def test_nothing_goes_inside_the_window_without_a_window_or_when_the_job_records_its_samples(tmp_path, monkeypatch):
    store, loop, folder, _, now = _running_job(tmp_path / "a", 7, monkeypatch)
    _age(folder, 6)                                          # rotated 6 days ago: inside a 7-day window
    loop.round()
    assert segments(folder)[0][0] == 0 and not [e for e in store.events(1) if e["kind"] == TRIMMED]
    store, loop, folder, _, _ = _running_job(tmp_path / "b", None, monkeypatch)
    _age(folder, 400)
    loop.round()
    assert segments(folder)[0][0] == 0
    store, loop, folder, _, _ = _running_job(tmp_path / "c", 0, monkeypatch)
    (folder / "samples").mkdir()                             # the exactly-once audit reads every rollback
    _age(folder, 1)
    loop.round()
    assert segments(folder)[0][0] == 0


def test_segments_go_only_once_the_service_read_past_them_and_once_an_hour(tmp_path, monkeypatch):
    store, loop, folder, log, now = _running_job(tmp_path, 1, monkeypatch)
    store.update(1, progress_offset=0)
    loop.retention.segments.maybe_trim(now[0])     # nothing read yet: nothing goes, however old
    _age(folder, 2)
    assert segments(folder)[0][0] == 0
    loop.round()                         # read now, but the pass ran this hour
    assert segments(folder)[0][0] == 0
    now[0] += 3600
    loop.round()
    assert removed_bytes(folder) > 0
