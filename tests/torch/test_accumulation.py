"""Gradient accumulation (``ElasticDataLoader(max_local_batch=...)``): micro-batches under DDP.no_sync, one
optimizer step per global batch, with real gloo worker processes."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
import torch

from dlsched.torch.accumulation import micro_count, split_share
from dlsched.torch.adaptive_batch import MIN_SAMPLES, AdaptiveBatch
from dlsched.train.data import committed_sample_ids
from dlsched.train.progress_log import read_progress
from tests.torch.test_adaptive_batch import _noise
from tests.torch.test_elastic_script import BATCH, SAMPLES, SCRIPT, resize_through, start_script, steps, val_curve
from tests.train.helpers import REPO, events, finish
from tests.waiting import wait_until

STEPS = 2 * SAMPLES // BATCH  # optimizer steps in 2 epochs


def test_every_rank_runs_the_same_count_of_non_empty_micro_batches():
    assert micro_count(8, [8], None) == 1 and micro_count(8, [8], 2) == 4
    assert micro_count(8, [3, 3, 2], 2) == 2          # the largest share sets it
    assert micro_count(2, [3, 3, 2], 1) == 1          # a short last batch: a rank with one sample runs one
    assert split_share([5, 6, 7], 2) == [[5, 6], [7]]


def test_the_adaptive_batch_may_choose_accumulation_past_the_local_bound():
    """With accumulation the local bound is the micro-batch's: 2 workers of at most 4 reach a global 64 (8
    micro-batches each), where without it they stop at 8. Step times are per micro-batch, so a larger batch
    costs its micro-batches' time."""
    noisy = _noise(sqr=1.0, trace=8 * 1000.0)
    plain = AdaptiveBatch(64, (2, 4))
    accumulating = AdaptiveBatch(64, (2, 4), gradient_accumulation=True)
    for a in (plain, accumulating):
        for _ in range(MIN_SAMPLES):
            a.observe(2, 4, 0.01)
    assert plain.decide(8, 2, 8, noisy) is None            # already at its largest: 2 workers x 4
    grown = accumulating.decide(8, 2, 8, noisy)
    assert grown is not None and grown.to_batch > 8 and grown.goodput > grown.from_goodput
    assert accumulating.feasible(64, 2, 8) == 64 and plain.feasible(64, 2, 8) == 8


def test_the_specs_max_local_batch_reaches_a_script_jobs_workers_and_is_refused_for_make_job(tmp_path):
    from dlsched.backends.base import Launch, runtime_command
    from dlsched.errors import UserError
    from dlsched.spec import load_job_spec
    from dlsched.train.protocol import WorkerEnv
    from dlsched.train.run import parse_args

    script = load_job_spec("name: s\ncommand: [python, train.py]\nmax_local_batch: 16\n")
    cmd = runtime_command(["rt"], Launch(1, script, tmp_path, 2, None))
    assert cmd[cmd.index("--max-local-batch") + 1] == "16" and cmd.index("--max-local-batch") < cmd.index("--")
    made = load_job_spec("name: m\nentry: examples/mlp.py:make_job\nmax_local_batch: 16\n")
    assert "--max-local-batch" not in runtime_command(["rt"], Launch(1, made, tmp_path, 2, None))
    opts = parse_args(["--job-dir", str(tmp_path), "--workers", "2", *cmd[cmd.index("--max-local-batch"):]])
    worker = WorkerEnv("127.0.0.1:1", 0, 0, str(tmp_path), 1, opts.max_local_batch)
    assert WorkerEnv.from_env(worker.as_env()) == worker
    assert WorkerEnv.from_env(WorkerEnv("h:1", 0, 0, "d").as_env()).max_local_batch is None
    for argv, needle in ((["--max-local-batch", "0", "--", "python", "x.py"], "--max-local-batch 0: must be >= 1"),
                         (["--max-local-batch", "4", "--entry", "x.py:make_job"], "--max-local-batch 4: for a script")):
        with pytest.raises(UserError, match=needle) as e:
            parse_args(["--job-dir", str(tmp_path), "--workers", "1", *argv])
        assert "\n" not in str(e.value)


def _last_metrics(job_dir) -> dict:
    return events(job_dir, "metrics")[-1]["metrics"]


@pytest.mark.slow
def test_accumulated_micro_batches_match_one_batch_and_step_the_optimizer_once_per_global_batch(tmp_path, plain_ref):
    """One worker, global batch 8 as 4 micro-batches of 2, through a GradScaler (loss x 2**10) and with
    zero_grad after the step: the same optimizer steps, LR sequence and (within float32 summation order)
    validation curve as the same script without accumulation."""
    ref_dir, acc_dir = plain_ref, tmp_path / "acc"
    finish(start_script(acc_dir, 1, "--epochs", "2", "--ckpt-every", "0", "--max-local-batch", "2", "--scaler",
                        "--zero-grad-last", "--noise-every", "4"), timeout=300)
    ref, acc = steps(ref_dir), steps(acc_dir)
    assert len(acc) == len(ref) == STEPS                      # one step record per optimizer step
    assert _last_metrics(acc_dir)["optimizer_steps"] == _last_metrics(acc_dir)["adam_steps"] == STEPS
    assert [r["lr"] for r in acc] == pytest.approx([r["lr"] for r in ref], rel=1e-9)   # OneCycleLR's pace
    # tolerance: 4 micro-batch means weighted 1/4 vs one mean of 8, in float32, over 120 AdamW steps
    assert val_curve(acc_dir) == pytest.approx(val_curve(ref_dir), rel=1e-4)
    noise = [r["grad_noise"] for r in acc if r["grad_noise"]]
    assert noise and noise[-1]["reference_batch"] == BATCH     # measured from the micro-batches' own |g|²


@pytest.mark.slow
def test_a_resize_while_accumulating_trains_every_sample_once_and_keeps_the_optimizer_pace(tmp_path, plain_ref):
    """1 -> 3 -> 2 workers while each step accumulates (4 micro-batches of 2 on one worker; shares 3/3/2 as
    2 micro-batches each on three, unequal micro-batches weighted by their share; 4/4 as 2 each on two).
    A stop flag is obeyed only between optimizer steps, so no resize splits an accumulation."""
    ref_dir, job_dir, slow = plain_ref, tmp_path / "elastic", tmp_path / "slow"
    slow.touch()
    proc = start_script(job_dir, 1, "--epochs", "2", "--max-local-batch", "2", "--step-s", "0.1",
                        "--slow-file", str(slow), runtime_args=("--record-samples",))
    resize_through(job_dir, proc, [3, 2])
    slow.unlink()
    finish(proc, timeout=300)

    assert [(e["from_workers"], e["workers"]) for e in events(job_dir, "resized")] == [(1, 3), (3, 2)]
    assert committed_sample_ids(job_dir) == Counter({i: 2 for i in range(SAMPLES)})
    recs = steps(job_dir)
    assert len(recs) == STEPS and [r["step"] for r in recs] == list(range(1, STEPS + 1))
    assert _last_metrics(job_dir)["adam_steps"] == STEPS        # AdamW's own count moved with its state
    assert [r["lr"] for r in recs] == pytest.approx([r["lr"] for r in steps(ref_dir)], rel=1e-9)
    # tolerance: float32 sums in another order (micro-batches, all-reduce over 3 or 2 ranks) only
    assert val_curve(job_dir) == pytest.approx(val_curve(ref_dir), rel=1e-3)


@pytest.mark.slow
def test_an_adaptive_batch_with_accumulation_grows_past_the_micro_batch_bound_exactly_once(tmp_path):
    """2 workers, micro-batches of at most 4: without accumulation the batch could not pass 8; with it the
    goodput model (label noise 10: the gradient is mostly noise) takes a larger batch, as micro-batches."""
    job_dir = tmp_path / "job"
    finish(start_script(job_dir, 2, "--epochs", "2", "--label-noise", "10", "--ckpt-every", "0", "--noise-every", "2",
                        "--autoscale", "64", "--max-local-batch", "4", runtime_args=("--record-samples",)),
           timeout=300)
    decisions = events(job_dir, "batch_size")
    assert decisions and decisions[0]["from_batch"] == BATCH and decisions[0]["to_batch"] > 2 * 4
    assert max(r["batch_size"] for r in steps(job_dir)) > 2 * 4
    assert committed_sample_ids(job_dir) == Counter({i: 2 for i in range(SAMPLES)})
    assert _last_metrics(job_dir)["adam_steps"] == len(steps(job_dir))   # one optimizer step per step record


def _one_cycle_lrs(total: int, lr: float = 0.01) -> list[float]:
    """The LR of each optimizer step of user_script.py's OneCycleLR (the one step s runs at: index s - 1)."""
    sched = torch.optim.lr_scheduler.OneCycleLR(torch.optim.AdamW([torch.nn.Parameter(torch.zeros(1))], lr=lr),
                                                max_lr=lr, total_steps=total)
    lrs = []
    for _ in range(total):
        lrs.append(sched.get_last_lr()[0])
        sched.optimizer.step()
        sched.step()
    return lrs


@pytest.mark.slow
def test_sigkill_of_a_worker_mid_accumulation_resumes_from_the_checkpoint_exactly_once(tmp_path, plain_ref):
    """3 workers, global batch 8 as shares 3/3/2 of 2 micro-batches each. Rank 1 stops after step 12's first
    micro-batch (its backward done, under no_sync) and is SIGKILLed there, holding half a step's gradient
    while the others wait in the all-reduce. The job resumes from its last checkpoint (step 10): every sample
    once per epoch, every optimizer step once (AdamW's own count), the OneCycleLR sequence continuing at the
    restored step, the same validation curve as a plain 1-worker run."""
    ref_dir, job_dir, held = plain_ref, tmp_path / "job", tmp_path / "held"
    proc = start_script(job_dir, 3, "--epochs", "2", "--max-local-batch", "2", "--ckpt-every", "5",
                        "--hold-file", str(held), "--hold-at-step", "12", runtime_args=("--record-samples",))
    victim = wait_until(lambda: held.exists() and int(held.read_text()) or proc.poll() is not None, timeout=120,
                        what="rank 1 holding step 12's first micro-batch")
    assert victim in json.loads((job_dir / "status.json").read_text())["worker_pids"], proc.poll()
    os.kill(victim, signal.SIGKILL)
    finish(proc, timeout=300)

    lost = events(job_dir, "worker_lost")
    assert len(lost) == 1 and lost[0]["exit_codes"] == [-signal.SIGKILL] and lost[0]["checkpoint"]
    restored = lost[0]["restored_step"]
    assert restored == 10
    assert committed_sample_ids(job_dir) == Counter({i: 2 for i in range(SAMPLES)})
    records = read_progress(job_dir)
    after = [r for r in records[records.index(lost[0]):] if "event" not in r]
    assert [r["step"] for r in after] == list(range(restored + 1, STEPS + 1))    # no step lost or repeated
    by_step = {r["step"]: r for r in steps(job_dir)}                             # the committed run: the last
    assert sorted(by_step) == list(range(1, STEPS + 1))
    assert [by_step[s]["lr"] for s in range(1, STEPS + 1)] == pytest.approx(_one_cycle_lrs(STEPS), rel=1e-9)
    assert _last_metrics(job_dir)["adam_steps"] == STEPS     # restored with its state, stepped once per step
    assert _last_metrics(job_dir)["optimizer_steps"] == STEPS - restored    # the respawned workers' own steps
    # tolerance: float32 sums in another order (micro-batches, all-reduce over 3 ranks) only
    assert val_curve(job_dir)[-1] == pytest.approx(val_curve(ref_dir)[-1], rel=1e-3)


@pytest.mark.slow
def test_the_specs_max_local_batch_is_the_loaders_default_and_the_scripts_own_wins(tmp_path):
    """A spec's max_local_batch (``dlsched train --spec``) reaches a loader that passes none: 96 samples at
    batch 8 on one worker come as 4 micro-batches of 2 per step. A loader's own ``max_local_batch=4`` wins
    over the runtime's 2 (2 micro-batches per step). Either way one optimizer step per global batch."""
    spec, by_spec, by_script = tmp_path / "job.yaml", tmp_path / "spec", tmp_path / "script"
    spec.write_text(f"name: acc\ncommand: [python, {SCRIPT}, --samples, '96', --batch, '8', --epochs, '1']\n"
                    "max_local_batch: 2\n")
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    out = subprocess.run([sys.executable, "-m", "dlsched.cli", "train", "--spec", str(spec), "--job-dir", str(by_spec)],
                         env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    proc = subprocess.Popen([sys.executable, "-m", "dlsched.train.run", "--job-dir", str(by_script), "--workers", "1",
                             "--threads", "1", "--max-local-batch", "2", "--", "python", SCRIPT, "--samples", "96",
                             "--batch", "8", "--epochs", "1", "--max-local-batch", "4"],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    finish(proc, timeout=300)
    for job_dir, micro in ((by_spec, 4), (by_script, 2)):
        metrics = _last_metrics(job_dir)
        assert (metrics["loader_batches"], metrics["optimizer_steps"], metrics["adam_steps"]) == (12 * micro, 12, 12)


@pytest.mark.slow
def test_a_training_forward_that_bypasses_the_wrapper_is_refused_in_one_line():
    """``model.module(x)`` on an accumulating step's second micro-batch would let ``zero_grad`` clear the first
    (and skip the all-reduce): the script stops there with one line naming the call. Copies of the model
    (deepcopy, a pickled one) and a no_grad call on the wrapped one run as before."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("DLSCHED")}
    env["PYTHONPATH"] = str(REPO / "src")
    r = subprocess.run([sys.executable, str(Path(SCRIPT).with_name("direct_call_script.py"))], env=env,
                       capture_output=True, text=True, timeout=300)
    last = r.stderr.strip().splitlines()[-1]
    assert r.returncode != 0 and "not refused" not in r.stderr, r.stderr[-2000:]
    assert last.endswith("UserError: ElasticDataParallel: model.module(...) was called in a training step; call "
                         "the wrapper, model(...): a direct call skips the gradient all-reduce and accumulation "
                         "(zero_grad would clear the step's micro-batches)"), r.stderr[-2000:]
    assert "direct_call_script.py\", line" in r.stderr   # the traceback points at the user's line


@pytest.mark.slow
def test_a_break_in_the_middle_of_an_accumulated_step_drops_that_step_and_the_next_epoch_trains_as_usual(tmp_path):
    """2 workers, global batch 8 as shares of 4 in 2 micro-batches of 2, zero_grad after the step. The loop breaks
    after step 2's first micro-batch trained: that step had no optimizer step, yet it was committed as one (its 8
    samples recorded as trained, a step record), the gated zero_grad kept its half gradient into the next epoch's
    first step, and the gates stayed shut after the loop. Now it is dropped: the run is the one that breaks at
    step 2's first micro-batch before training it, step for step and sample for sample."""
    mid, clean = tmp_path / "mid", tmp_path / "clean"
    common = ("--epochs", "3", "--max-local-batch", "2", "--zero-grad-last", "--ckpt-every", "0")
    finish(start_script(mid, 2, *common, "--max-steps", "3", runtime_args=("--record-samples",)), timeout=300)
    finish(start_script(clean, 2, *common, "--max-steps", "2", runtime_args=("--record-samples",)), timeout=300)

    assert [r["step"] for r in steps(mid)] == [1, 2, 3]                  # one optimizer step an epoch
    assert [r["samples"] for r in steps(mid)] == [r["samples"] for r in steps(clean)]
    metrics = [e["metrics"] for e in events(mid, "metrics")]
    assert [m["loader_batches"] for m in metrics] == [3, 3, 3]
    assert [(m["optimizer_steps"], m["adam_steps"], m["accumulating"]) for m in metrics] == [(1, 1, 0.0), (2, 2, 0.0),
                                                                                             (3, 3, 0.0)]
    assert committed_sample_ids(mid) == committed_sample_ids(clean) and sum(committed_sample_ids(mid).values()) == 24
    # no half gradient carried into the next step: the same model as the clean run (same ranks, same order)
    assert val_curve(mid) == pytest.approx(val_curve(clean), rel=1e-6)
    assert [e["mean_loss"] for e in events(mid, "epoch_end")] == pytest.approx(
        [e["mean_loss"] for e in events(clean, "epoch_end")], rel=1e-6)
