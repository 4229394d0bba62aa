"""End-to-end elastic training with real gloo worker processes: resize, worker loss, equivalence."""
from __future__ import annotations

import json
import os
import signal
from collections import Counter

import numpy as np
import pytest

from dlsched.train.data import committed_sample_ids
from dlsched.train.files import write_control

from .helpers import events, finish, wait_for_event, start_job, step_losses, wait_for_step

pytestmark = pytest.mark.slow
DATA = ["--param", "num_samples=960", "--param", "batch_size=12"]


def test_resize_2_4_1_3_within_one_epoch_is_exactly_once_and_smooth(tmp_path):
    ref_dir, job_dir = tmp_path / "ref", tmp_path / "elastic"
    ref = start_job(ref_dir, 1, *DATA)
    finish(ref)
    proc = start_job(job_dir, 2, *DATA, "--record-samples", "--standby", "2", "--param", "throttle_s=0.1",
                     "--no-replace-stragglers")
    at_step = 6
    for generation, workers in enumerate([4, 1, 3], start=1):
        wait_for_step(job_dir, at_step, proc)
        write_control(job_dir, workers, None, generation)
        wait_for_event(job_dir, "resized", generation, proc)  # control.json is a level, not a queue
        at_step = events(job_dir, "resized")[-1]["step"] + 4
    finish(proc)

    resized = events(job_dir, "resized")
    assert [(e["from_workers"], e["workers"]) for e in resized] == [(2, 4), (4, 1), (1, 3)]
    assert all(e["step"] < 80 for e in resized), "all resizes inside epoch 0 (80 steps)"
    assert committed_sample_ids(job_dir) == Counter(range(960))
    # fixed global batch + worker-count-independent sample order: the curve continues as if never resized
    np.testing.assert_allclose(step_losses(job_dir), step_losses(ref_dir), rtol=1e-4, atol=1e-5)
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


def test_one_and_two_workers_same_global_batch_give_same_loss_curve(tmp_path):
    procs = {n: start_job(tmp_path / f"w{n}", n, "--param", "num_samples=256", "--param", "batch_size=16")
             for n in (1, 2)}
    for p in procs.values():
        finish(p)
    one, two = step_losses(tmp_path / "w1"), step_losses(tmp_path / "w2")
    assert len(one) == len(two) == 16
    np.testing.assert_allclose(two, one, rtol=1e-4, atol=1e-5)
    assert one[-1] < one[0]


def test_resume_after_coordinator_restart_continues_from_checkpoint(tmp_path):
    job_dir = tmp_path / "job"
    proc = start_job(job_dir, 1, "--param", "num_samples=320", "--param", "throttle_s=0.05", "--ckpt-every", "4")
    wait_for_step(job_dir, 9, proc)
    os.killpg(proc.pid, signal.SIGKILL) if False else proc.kill()  # coordinator dies; workers exit with it
    proc.wait()
    resumed = start_job(job_dir, 2, "--param", "num_samples=320", "--ckpt-every", "4")
    finish(resumed)
    steps = [r["step"] for r in json.loads("[" + ",".join((job_dir / "progress.jsonl").read_text().split("\n")[:-1]) + "]")
             if "event" not in r]
    restart_at = next(i for i in range(1, len(steps)) if steps[i] <= steps[i - 1])
    assert steps[restart_at] - 1 in (4, 8) and steps[-1] == 20


def test_straggler_is_detected_and_replaced_without_losing_samples(tmp_path):
    job_dir = tmp_path / "job"
    proc = start_job(job_dir, 3, "--param", "num_samples=480", "--param", "batch_size=12", "--param",
                     "throttle_s=0.03", "--record-samples", env={"DLSCHED_FAULT_SLOW_WORKER": "1:0.12"})
    finish(proc)
    flagged = events(job_dir, "straggler")
    assert flagged and flagged[0]["workers"] == [1]
    swap = events(job_dir, "resized")[0]
    assert swap["replaced"] == [1] and swap["from_workers"] == swap["workers"] == 3
    assert committed_sample_ids(job_dir) == Counter(range(480))
