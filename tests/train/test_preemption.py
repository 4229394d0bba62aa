"""SIGTERM at the awkward moments (real coordinator + gloo workers): start-up, workers still preparing, a resize
waiting for its new workers, a new generation forming. Each must stop promptly with exit 143, a ``stopped`` event
at the last completed step, that step checkpointed (or nothing, when no step ran), and a re-run that resumes
exactly there with every sample trained once. Moments are timed by the gate job's ``waiting-N`` files."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections import Counter
from pathlib import Path

import pytest

from dlsched.train.checkpoint import list_checkpoints
from dlsched.train.data import committed_sample_ids
from dlsched.train.files import read_status, write_control
from dlsched.train.progress_log import read_progress
from tests.waiting import wait_until
from dlsched.train.preemption import sigterm_blocked

from .helpers import GATED, events, finish, start_job, wait_for_step

pytestmark = pytest.mark.slow
STOP_S = 30  # bound on how long a stop may take (it takes well under a second when it works)
# the resize tests' job: 200 steps of >= 0.3 s, so it still runs when its newcomer has spawned, imported torch and
# prepared (or got stuck); the test then stops it. 20 steps (6 s) ended first under load (make test beside two
# other sessions' work: the new worker had not reached its gate after 7 s)
RESIZED_SAMPLES = 2400


def gated(job_dir: Path, workers: int, free: int, hold: str, *extra: str, samples: int = 96) -> subprocess.Popen:
    """Start as the local backend does: own process group, SIGTERM blocked until the runtime handles it."""
    with sigterm_blocked():
        return start_job(job_dir, workers, "--param", f"gate_dir={job_dir / 'gate'}", "--param", f"free={free}",
                         "--param", f"hold={hold}", "--param", f"num_samples={samples}", "--param", "batch_size=12",
                         "--record-samples", "--ckpt-every", "0", *extra, entry=GATED, new_session=True)


def wait_for_file(path: Path, proc: subprocess.Popen, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert proc.poll() is None, f"job ended before {path.name} appeared: {proc.stdout.read()}"
        assert time.monotonic() < deadline, f"{path.name} did not appear in {timeout}s"
        time.sleep(0.02)


def terminate(proc: subprocess.Popen) -> str:
    """SIGTERM the job's process group as the backend does; it must exit 143 within STOP_S."""
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        out, _ = proc.communicate(timeout=STOP_S)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
    assert proc.returncode == 128 + signal.SIGTERM, out
    return out


def step_rows(job_dir: Path) -> list[dict]:
    return [r for r in read_progress(job_dir) if "event" not in r]


def assert_stopped_at_last_step(job_dir: Path) -> int:
    stopped = events(job_dir, "stopped")
    assert len(stopped) == 1
    at = stopped[0]["step"]
    assert at == max((r["step"] for r in step_rows(job_dir)), default=0), "the last completed step is the stop step"
    assert json.loads((job_dir / "status.json").read_text())["state"] == "stopped"
    return at


def assert_resumes_exactly(job_dir: Path, at: int, samples: int) -> None:
    """Re-run (1 worker, the gate open): no step redone, none skipped, every sample trained exactly once."""
    (job_dir / "gate" / "open").touch()
    finish(gated(job_dir, 1, 0, "prepare", samples=samples))
    assert [r["step"] for r in step_rows(job_dir)] == list(range(1, samples // 12 + 1)), f"resumed at step {at}"
    assert committed_sample_ids(job_dir) == Counter(range(samples))


def test_sigterm_at_start_up_stops_before_any_step(tmp_path):
    proc = gated(tmp_path, 2, 2, "prepare")
    terminate(proc)  # at once: the runtime has not even imported torch yet
    assert assert_stopped_at_last_step(tmp_path) == 0
    assert not step_rows(tmp_path) and not list_checkpoints(tmp_path / "ckpt"), "nothing ran: nothing to save"


def test_sigterm_while_workers_prepare_cancels_the_first_generation(tmp_path):
    proc = gated(tmp_path, 2, 0, "prepare")
    wait_for_file(tmp_path / "gate" / "waiting-0", proc)  # a worker is still building its model
    terminate(proc)  # must not wait for them to get ready, join and train a step
    assert assert_stopped_at_last_step(tmp_path) == 0
    assert not list_checkpoints(tmp_path / "ckpt")  # a re-run is then a fresh start


def test_sigterm_while_a_resize_waits_for_new_workers_checkpoints_the_step(tmp_path):
    proc = gated(tmp_path, 1, 1, "prepare", "--param", "throttle_s=0.3", samples=RESIZED_SAMPLES)
    wait_for_step(tmp_path, 2, proc)
    write_control(tmp_path, 2, None, 1)
    wait_for_file(tmp_path / "gate" / "waiting-1", proc)  # the newcomer will never get ready by itself
    terminate(proc)
    at = assert_stopped_at_last_step(tmp_path)
    assert at >= 2 and events(tmp_path, "resize_abandoned") and not events(tmp_path, "resized")
    # --ckpt-every 0: the only checkpoint is the stop's, of the last step (resuming from it: test_elastic)
    assert [c["step"] for c in events(tmp_path, "checkpoint")] == [at]


def test_sigterm_while_a_new_generation_forms_checkpoints_the_carried_state(tmp_path):
    proc = gated(tmp_path, 1, 1, "join", "--param", "throttle_s=0.3", samples=RESIZED_SAMPLES)
    wait_for_step(tmp_path, 2, proc)
    write_control(tmp_path, 2, None, 1)
    wait_for_file(tmp_path / "gate" / "waiting-1", proc)  # its newcomer is held before joining generation 1
    # the coordinator publishes the plan (which the newcomer reads) before it writes status.json: wait on the
    # state asserted, not on the neighbouring gate file
    wait_until(lambda: (read_status(tmp_path) or {}).get("generation") == 1, 60, "status.json at generation 1")
    terminate(proc)
    at = assert_stopped_at_last_step(tmp_path)
    # the state after step `at` lived only in the survivor's memory: rank 0 checkpointed it without training on
    assert at >= 2 and [c["step"] for c in events(tmp_path, "checkpoint")] == [at]
    assert not events(tmp_path, "resized")
    assert_resumes_exactly(tmp_path, at, RESIZED_SAMPLES)
