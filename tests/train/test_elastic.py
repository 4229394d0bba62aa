"""End-to-end elastic training with real gloo worker processes: resize, worker loss, equivalence."""
from __future__ import annotations

import json
import os
import signal
from collections import Counter

import numpy as np
import pytest

from dlsched.train.data import committed_sample_ids
from dlsched.train.files import iter_json_lines, write_control
from dlsched.train.progress_log import read_progress

from .helpers import GATED, events, finish, start_job, step_losses, wait_for_event, wait_for_standby, wait_for_step

pytestmark = pytest.mark.slow
DATA = ["--param", "num_samples=960", "--param", "batch_size=12"]


def test_resize_2_4_1_3_within_one_epoch_is_exactly_once_and_smooth(tmp_path):
    ref_dir, job_dir, gate = tmp_path / "ref", tmp_path / "elastic", tmp_path / "gate"
    ref = start_job(ref_dir, 1, *DATA)
    # the paused job waits between steps while the spares prepare: on a loaded machine their start-up took longer
    # than the epoch's 80 throttled steps, and the job ended before its third resize (make test-stress)
    proc = start_job(job_dir, 2, *DATA, "--record-samples", "--standby", "2", "--param", "throttle_s=0.15",
                     "--param", f"gate_dir={gate}", "--param", "hold=pause", "--no-replace-stragglers", entry=GATED)
    finish(ref)
    at_step = 4
    for generation, workers in enumerate([4, 1, 3], start=1):
        wait_for_step(job_dir, at_step, proc)
        (gate / "pause").touch()
        wait_for_standby(job_dir, 2, proc)  # prepared spares: the resize then waits only for the broadcast
        write_control(job_dir, workers, None, generation)
        (gate / "pause").unlink()
        wait_for_event(job_dir, "resized", generation, proc)  # control.json is a level, not a queue
        at_step = events(job_dir, "resized")[-1]["step"] + 3
    finish(proc)

    resized = events(job_dir, "resized")
    assert [(e["from_workers"], e["workers"]) for e in resized] == [(2, 4), (4, 1), (1, 3)]
    assert all(e["step"] < 80 for e in resized), "all resizes inside epoch 0 (80 steps)"
    assert committed_sample_ids(job_dir) == Counter(range(960))
    one, elastic = step_losses(ref_dir), step_losses(job_dir)
    # 1 vs 2 workers, same global batch and seed: the same loss curve (steps before the first resize)
    first = resized[0]["step"]
    np.testing.assert_allclose(elastic[:first], one[:first], rtol=1e-4, atol=1e-5)
    # fixed global batch + worker-count-independent sample order: the curve continues as if never resized
    np.testing.assert_allclose(elastic, one, rtol=1e-4, atol=1e-5)
    assert json.loads((job_dir / "status.json").read_text())["state"] == "finished"


def test_kill_9_worker_recovers_from_checkpoint_exactly_once(tmp_path):
    job_dir = tmp_path / "job"
    proc = start_job(job_dir, 2, "--param", "num_samples=480", "--param", "batch_size=12", "--param",
                     "throttle_s=0.05", "--ckpt-every", "5", "--record-samples")
    wait_for_step(job_dir, 13, proc)
    victim = json.loads((job_dir / "status.json").read_text())["worker_pids"][1]
    os.kill(victim, signal.SIGKILL)
    finish(proc)

    lost = events(job_dir, "worker_lost")
    assert len(lost) == 1 and lost[0]["exit_codes"] == [-signal.SIGKILL]
    assert lost[0]["restored_step"] >= 10 and lost[0]["lost_steps"] <= 5
    assert committed_sample_ids(job_dir) == Counter(range(480))
    assert events(job_dir, "finished")


def test_rerun_on_existing_dir_resumes_from_latest_checkpoint(tmp_path):
    job_dir = tmp_path / "job"
    proc = start_job(job_dir, 1, "--param", "num_samples=320", "--param", "throttle_s=0.05", "--ckpt-every", "4")
    wait_for_step(job_dir, 9, proc)
    proc.kill()  # the coordinator dies; its workers notice (store gone / parent gone) and exit
    proc.wait()
    last_before = max(r["step"] for r in read_progress(job_dir) if "event" not in r)
    finish(start_job(job_dir, 2, "--param", "num_samples=320", "--ckpt-every", "4"))
    steps = [r["step"] for r in read_progress(job_dir) if "event" not in r]
    resumed_at = next(steps[i] for i in range(1, len(steps)) if steps[i] <= steps[i - 1]) - 1
    assert resumed_at % 4 == 0 and 0 <= last_before - resumed_at <= 4
    assert steps[-1] == 20 and events(job_dir, "finished")


def test_straggler_is_detected_and_replaced_without_losing_samples(tmp_path):
    job_dir = tmp_path / "job"
    proc = start_job(job_dir, 3, "--param", "num_samples=480", "--param", "batch_size=12", "--param",
                     "throttle_s=0.05", "--record-samples", "--standby", "1",
                     env={"DLSCHED_FAULT_SLOW_WORKER": "1:0.15"})
    finish(proc)
    flagged = events(job_dir, "straggler")
    assert flagged and flagged[0]["workers"] == [1]
    swap = events(job_dir, "resized")[0]
    assert swap["replaced"] == [1] and swap["from_workers"] == swap["workers"] == 3
    assert committed_sample_ids(job_dir) == Counter(range(480))


def test_batch_size_change_scales_lr_with_momentum_compensation_ramp(tmp_path):
    job_dir = tmp_path / "job"
    proc = start_job(job_dir, 1, "--param", "num_samples=720", "--param", "batch_size=12", "--param", "lr=0.04",
                     "--param", "throttle_s=0.05", "--ckpt-every", "0")
    wait_for_step(job_dir, 3, proc)
    write_control(job_dir, 1, 24, 1)
    wait_for_event(job_dir, "resized", 1, proc)
    finish(proc)
    t0 = events(job_dir, "resized")[0]["step"]
    rows = {r["step"]: r for r in read_progress(job_dir) if "event" not in r}
    assert rows[t0]["lr"] == pytest.approx(0.04) and rows[t0]["batch_size"] == 12
    # the LR used at step t (progress row t+1) is 0.04 * (1 + (t - t0)/8 * (2 - 1)), then 0.08
    ramp = [rows[t0 + 1 + i]["lr"] for i in range(10)]
    assert ramp == pytest.approx([0.04 * (1 + i / 8) for i in range(8)] + [0.08, 0.08])
    assert rows[t0 + 1]["batch_size"] == 24


def test_failing_job_ends_failed_with_the_workers_error(tmp_path):
    job_dir = tmp_path / "job"
    proc = start_job(job_dir, 1, "--param", "num_samples=64", "--param", "poison_sample=5", "--max-restarts", "0")
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 1
    status = json.loads((job_dir / "status.json").read_text())
    assert status["state"] == "failed" and "sample 5 is poisoned" in status["error"]
    # the job's error as one line, not the coordinator's traceback (the worker's is in its log)
    assert "Traceback" not in out, out
    last = out.strip().splitlines()[-1]
    assert last.startswith("error: workers {0: 1} died; gave up after 0 restarts: ") and "sample 5 is poisoned" in last
    assert last.endswith(f"(worker logs in {job_dir / 'logs'})") and "Traceback" in (job_dir / "logs" / "worker-0.log").read_text()


def test_a_worker_that_finds_the_disk_full_stops_the_job_as_out_of_disk(tmp_path):
    """A worker's write to a full disk (the job's own: a cache, a log) exited 1: read as the job's error, it failed
    for good ('died before the job's first step, not restarted'; after one, once past its restarts). Now the runtime
    exits EXIT_NO_SPACE, no `failed` status: re-queued, it resumes once there is room."""
    from dlsched.train.no_space import EXIT_NO_SPACE
    from tests.train.helpers import GATED

    gate = tmp_path / "gate"
    gate.mkdir()
    (gate / "full").touch()   # every batch read raises ENOSPC
    proc = start_job(tmp_path / "job", 2, "--param", "num_samples=64", "--param", f"gate_dir={gate}",
                     "--param", "hold=pause", entry=GATED)
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == EXIT_NO_SPACE, out[-2000:]
    assert out.strip().splitlines()[-1].startswith("error: the job folder's disk is full ([Errno 28] worker "), out
    assert json.loads((tmp_path / "job" / "status.json").read_text())["state"] != "failed"


def test_a_full_disk_that_also_holds_the_runtimes_output_still_stops_the_job_as_out_of_disk(tmp_path):
    """The runtime's stdout and stderr are the job folder's output.log, on the same disk: found full, its traceback
    could not be written either, that OSError ended it with exit 1, and the service failed the job for good (seen
    on a service whose jobs folder filled up). /dev/full stands for that output.log: every write there fails."""
    import subprocess
    import sys

    from dlsched.train.no_space import EXIT_NO_SPACE
    from tests.train.helpers import GATED, REPO

    gate = tmp_path / "gate"
    gate.mkdir()
    (gate / "full").touch()   # every batch read raises ENOSPC
    job = tmp_path / "job"
    with open("/dev/full", "w") as full:
        proc = subprocess.run(
            [sys.executable, "-m", "dlsched.train.run", "--job-dir", str(job), "--entry", GATED, "--workers", "1",
             "--threads", "1", "--param", "num_samples=64", "--param", f"gate_dir={gate}", "--param", "hold=pause"],
            stdout=full, stderr=full, timeout=120, env={**os.environ, "PYTHONPATH": str(REPO / "src")})
    assert proc.returncode == EXIT_NO_SPACE
    assert json.loads((job / "status.json").read_text())["state"] != "failed"


def test_bad_entry_is_one_line_exit_2(tmp_path):
    proc = start_job(tmp_path / "job", 1, entry="examples/nosuch.py:make_job")
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 2 and out.strip().startswith("error: --entry") and len(out.strip().splitlines()) == 1


def test_sigterm_checkpoints_the_current_step_and_resume_redoes_none(tmp_path):
    job_dir = tmp_path / "job"
    args = ("--param", "num_samples=480", "--param", "batch_size=12", "--ckpt-every", "7", "--record-samples")
    proc = start_job(job_dir, 2, *args, "--param", "throttle_s=0.05", new_session=True)
    wait_for_step(job_dir, 9, proc)
    os.killpg(proc.pid, signal.SIGTERM)  # what the local backend does: the whole group, workers included
    out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 128 + signal.SIGTERM, out

    stopped = events(job_dir, "stopped")
    assert len(stopped) == 1 and stopped[0]["step"] >= 9
    at = stopped[0]["step"]
    assert events(job_dir, "checkpoint")[-1]["step"] == at and stopped[0]["checkpoint"].endswith(f"{at:09d}.ckpt")
    assert json.loads((job_dir / "status.json").read_text())["state"] == "stopped"
    assert max(r["step"] for r in read_progress(job_dir) if "event" not in r) == at

    finish(start_job(job_dir, 2, *args))
    steps = [r["step"] for r in read_progress(job_dir) if "event" not in r]
    assert steps == list(range(1, 41)), "resumed at the SIGTERM step: no step redone, none skipped"
    assert committed_sample_ids(job_dir) == Counter(range(480))
    assert {r["total_samples"] for r in read_progress(job_dir) if "event" not in r} == {480}


def test_a_rerun_with_another_batch_size_resumes_at_it_with_the_lr_ramped(tmp_path):
    """``dlsched train --batch-size B`` on a stopped job's folder: was trained on at the checkpoint's batch, B
    silently dropped."""
    job_dir = tmp_path / "job"
    args = ("--param", "num_samples=480", "--param", "batch_size=12", "--param", "lr=0.04", "--ckpt-every", "7",
            "--record-samples")
    proc = start_job(job_dir, 1, *args, "--param", "throttle_s=0.05", new_session=True)
    wait_for_step(job_dir, 5, proc)
    os.killpg(proc.pid, signal.SIGTERM)
    proc.communicate(timeout=30)
    at = events(job_dir, "stopped")[0]["step"]

    finish(start_job(job_dir, 1, *args, "--batch-size", "24"))
    resumed = events(job_dir, "resumed")
    assert [(e["restored_step"], e["from_batch_size"], e["batch_size"]) for e in resumed] == [(at, 12, 24)]
    rows = {r["step"]: r for r in read_progress(job_dir) if "event" not in r}
    assert rows[at]["batch_size"] == 12 and rows[at + 1]["batch_size"] == 24
    # the batch rule's ramp (linear: x2 over 8 steps) from the LR of the last step before the stop
    assert [rows[at + 1 + i]["lr"] for i in range(9)] == pytest.approx([0.04 * (1 + i / 8) for i in range(8)] + [0.08])
    assert committed_sample_ids(job_dir) == Counter(range(480))


def test_a_finished_job_re_run_with_more_epochs_trains_only_the_new_ones(tmp_path):
    """It said "already finished; nothing to train": more epochs meant starting over in a new folder."""
    job_dir = tmp_path / "job"
    data = ("--param", "num_samples=96", "--param", "batch_size=12", "--record-samples")
    finish(start_job(job_dir, 2, *data, "--param", "epochs=1"))
    finish(start_job(job_dir, 2, *data, "--param", "epochs=3"))
    assert [e["epoch"] for e in events(job_dir, "epoch_end")] == [0, 1, 2]
    steps = [(r["step"], r["epoch"]) for r in read_progress(job_dir) if "event" not in r]
    assert steps == [(s, (s - 1) // 8) for s in range(1, 25)], "epochs 1 and 2 after epoch 0, no step again"
    assert committed_sample_ids(job_dir) == Counter({i: 3 for i in range(96)})
    proc = start_job(job_dir, 2, *data, "--param", "epochs=3")
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 0 and "already finished at step 24" in out and "--param epochs=N over 3" in out, out


def test_a_rerun_trains_at_its_own_workers_not_the_last_runs_control_request(tmp_path):
    """control.json outlives the run that answered it: a re-run with ``--workers 2`` read the last run's request
    (1 worker) as new and shrank to it a few steps in."""
    job_dir = tmp_path / "job"
    args = ("--param", "num_samples=480", "--param", "batch_size=12", "--ckpt-every", "5", "--record-samples")
    proc = start_job(job_dir, 2, *args, "--param", "throttle_s=0.05", new_session=True)
    wait_for_step(job_dir, 3, proc)
    write_control(job_dir, 1, None, 1)
    wait_for_event(job_dir, "resized", 1, proc)
    wait_for_step(job_dir, events(job_dir, "resized")[0]["step"] + 2, proc)
    os.killpg(proc.pid, signal.SIGTERM)
    proc.communicate(timeout=30)
    at = events(job_dir, "stopped")[0]["step"]

    finish(start_job(job_dir, 2, *args))
    assert len(events(job_dir, "resized")) == 1, "the answered request was applied again"
    assert {r["workers"] for r in read_progress(job_dir) if "event" not in r and r["step"] > at} == {2}
    assert committed_sample_ids(job_dir) == Counter(range(480))


def test_a_torn_last_progress_line_left_by_a_killed_run_fails_no_later_resume(tmp_path):
    """A run killed mid-line (SIGKILL between the two writes of a record over 8 KiB, a full disk) leaves a torn last
    line; the next run appended its records to it, so the torn text and its first record became one bad line in
    the middle of the file, and every resume after that (a preemption, a lost coordinator) failed the job:
    "progress.jsonl:N: unreadable record"."""
    job_dir = tmp_path / "job"
    data = ("--param", "num_samples=48", "--param", "batch_size=12")
    finish(start_job(job_dir, 1, *data, "--param", "epochs=1"))
    with open(job_dir / "progress.jsonl", "a") as f:
        f.write('{"time": 1.5, "step": 5, "epo')
    finish(start_job(job_dir, 1, *data, "--param", "epochs=2"))
    finish(start_job(job_dir, 1, *data, "--param", "epochs=3"))
    assert [e["epoch"] for e in events(job_dir, "epoch_end")] == [0, 1, 2]


def test_a_damaged_progress_line_mid_file_is_skipped_by_the_resume_with_an_event_naming_it(tmp_path):
    """A damaged record in the middle of progress.jsonl (a flipped byte, a hand's edit; not a torn tail) failed
    every later resume of the job for good: exit 2, "progress.jsonl:3: unreadable record". The resume passes over
    it, says so in an event naming the line, and trains every sample of the new epoch once."""
    job_dir = tmp_path / "job"
    data = ("--param", "num_samples=48", "--param", "batch_size=12", "--record-samples")
    finish(start_job(job_dir, 1, *data, "--param", "epochs=1"))
    lines = (job_dir / "progress.jsonl").read_bytes().splitlines(True)
    assert b'"event"' not in lines[2]   # a step record
    lines[2] = lines[2][:20] + b"\x00\xff garbage" + lines[2][30:]
    (job_dir / "progress.jsonl").write_bytes(b"".join(lines))
    finish(start_job(job_dir, 1, *data, "--param", "epochs=2"))
    records = list(iter_json_lines(job_dir / "progress.jsonl", bad=lambda *_: None))
    (skipped,) = [r for r in records if r.get("event") == "progress_line_skipped"]
    assert (skipped["line"], skipped["skipped_lines"]) == (3, 1) and "garbage" in skipped["text"]
    assert [r["epoch"] for r in records if r.get("event") == "epoch_end"] == [0, 1]
    assert committed_sample_ids(job_dir) == Counter({i: 2 for i in range(48)})
