"""A user's own training script (dlsched.torch) under the runtime, with real gloo worker processes."""
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

from dlsched.service.progress_axis import ProgressAxis
from dlsched.service.progress_history import ProgressHistory
from dlsched.service.refit import logged_schedule
from dlsched.train.data import committed_sample_ids
from dlsched.train.files import read_lr_plan, write_control
from dlsched.train.progress_log import read_progress
from tests.train.helpers import REPO, events, finish, wait_for_event, wait_for_step
from tests.waiting import wait_until

pytestmark = pytest.mark.slow
SCRIPT = str(Path(__file__).with_name("user_script.py"))
SAMPLES, BATCH = 480, 8  # 60 steps per epoch


def start_script(job_dir: Path, workers: int, *script_args: str, runtime_args: tuple[str, ...] = (),
                 replace_stragglers: bool = False) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO / "src"), str(REPO), os.environ.get("PYTHONPATH", "")])}
    cmd = [sys.executable, "-m", "dlsched.train.run", "--job-dir", str(job_dir), "--workers", str(workers),
           "--threads", "1", *([] if replace_stragglers else ["--no-replace-stragglers"]), *runtime_args,
           "--", "python", SCRIPT, "--samples", str(SAMPLES), "--batch", str(BATCH), *script_args]
    return subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def steps(job_dir: Path) -> list[dict]:
    return [r for r in read_progress(job_dir) if "event" not in r]


def epoch_means(job_dir: Path) -> list[float]:
    """Each epoch's loss as the committed steps reported it (a step rolled back and redone: its redo),
    sample-weighted: what its epoch_end's mean_loss must be."""
    by_step, done = {}, 0
    for r in steps(job_dir):
        by_step[r["step"]] = r
    means, total, n = [], 0.0, 0
    for step in sorted(by_step):
        r = by_step[step]
        k = r["samples"] - (by_step[step - 1]["samples"] if step > 1 else 0)
        total, n, done = total + r["loss"] * k, n + k, r["samples"]
        if done % SAMPLES == 0:
            means, total, n = means + [total / n], 0.0, 0
    return means


def mean_losses(job_dir: Path) -> list[float]:
    return [e["mean_loss"] for e in events(job_dir, "epoch_end")]


def val_curve(job_dir: Path) -> list[float]:
    return [r["metrics"]["val_mse"] for r in events(job_dir, "metrics")]


def resize_through(job_dir: Path, proc: subprocess.Popen, sizes: list[int]) -> None:
    """Resize the running job to each of ``sizes`` in turn, two steps after the previous resize."""
    at_step = 3
    for generation, workers in enumerate(sizes, start=1):
        wait_for_step(job_dir, at_step, proc, timeout=120)
        write_control(job_dir, workers, None, generation)
        wait_for_event(job_dir, "resized", generation, proc, timeout=180)
        at_step = events(job_dir, "resized")[-1]["step"] + 2
        if -at_step % (SAMPLES // BATCH) < 10:  # a grow that took long under load ended near an epoch's end: the
            at_step += -at_step % (SAMPLES // BATCH) + 2  # next resize waits for the next epoch, to land mid-epoch


def test_resize_1_3_2_mid_epoch_trains_every_sample_once_and_continues_adamw_onecycle(tmp_path, plain_ref):
    ref_dir, job_dir, slow = plain_ref, tmp_path / "elastic", tmp_path / "slow"
    slow.touch()
    # 0.6 s steps while resizing: the grow asked at step 3 has ~34 s to land before the epoch's end (at 0.3 s it once
    # took the 17 s there were under load, three newcomers importing torch, and landed on step 60)
    proc = start_script(job_dir, 1, "--epochs", "2", "--step-s", "0.6", "--slow-file", str(slow),
                        runtime_args=("--record-samples",))
    resize_through(job_dir, proc, [3, 2])
    slow.unlink()
    finish(proc, timeout=300)

    resized = events(job_dir, "resized")
    assert [(e["from_workers"], e["workers"]) for e in resized] == [(1, 3), (3, 2)]
    assert [e["step"] % (SAMPLES // BATCH) != 0 for e in resized] == [True, True], "both resizes mid-epoch"
    assert committed_sample_ids(job_dir) == Counter({i: 2 for i in range(SAMPLES)})  # 2 epochs, each id once each
    # same global batch and sample order: OneCycleLR's sequence continues exactly, AdamW's moments moved with it
    ref_lr, lr = [r["lr"] for r in steps(ref_dir)], [r["lr"] for r in steps(job_dir)]
    assert len(lr) == len(ref_lr) == 2 * SAMPLES // BATCH
    assert lr == pytest.approx(ref_lr, rel=1e-9)
    # tolerance: float32 sums in another order (all-reduce over 3 or 2 ranks) only
    assert val_curve(job_dir) == pytest.approx(val_curve(ref_dir), rel=1e-3)
    assert [r["workers"] for r in steps(job_dir)][-1] == 2
    # each worker, the grow's newcomers too, forked with torch (and torch._dynamo) loaded: a fresh interpreter
    # importing them was most of a newcomer's start (~15 s of a grow's pause at load 15-20)
    logs = sorted((job_dir / "logs").glob("worker-*.log"))
    assert len(logs) == 3 and all("torch preloaded: True" in f.read_text() for f in logs)
    # epoch_end's mean_loss is the whole epoch's across both resizes, not the part after the last one
    assert len(mean_losses(job_dir)) == 2 and mean_losses(job_dir) == pytest.approx(epoch_means(job_dir), rel=1e-9)
    # (not the 1-worker run's to 1e-3: on 3 or 2 workers rank 0 reports the loss of its share of each batch)


def test_sigkill_of_a_worker_resumes_from_the_checkpoint_exactly_once(tmp_path):
    job_dir, slow = tmp_path / "job", tmp_path / "slow"
    slow.touch()
    proc = start_script(job_dir, 2, "--epochs", "2", "--step-s", "0.1", "--slow-file", str(slow),
                        "--optimizer", "sgd", "--ckpt-every", "5", runtime_args=("--record-samples",))
    wait_for_step(job_dir, 12, proc, timeout=120)
    pids = json.loads((job_dir / "status.json").read_text())["worker_pids"]
    os.kill(pids[1], signal.SIGKILL)
    wait_for_event(job_dir, "worker_lost", 1, proc, timeout=120)
    slow.unlink()
    finish(proc, timeout=300)
    lost = events(job_dir, "worker_lost")[0]
    assert lost["restored_step"] >= 10 and lost["checkpoint"]
    assert committed_sample_ids(job_dir) == Counter({i: 2 for i in range(SAMPLES)})
    assert events(job_dir, "finished")
    # the restart replays the steps after its checkpoint: each counts once in its epoch's mean_loss (the sums
    # ride in the checkpoint), the steps before it too
    assert len(mean_losses(job_dir)) == 2 and mean_losses(job_dir) == pytest.approx(epoch_means(job_dir), rel=1e-9)


def test_a_restart_before_the_first_checkpoint_keeps_the_scripts_warm_start_as_the_job_began(tmp_path):
    """A script loading its own pre-trained weights at the top, a worker killed before any periodic checkpoint,
    the file rewritten meanwhile (a newer pre-training, the script's own export): the restart started over from
    whatever the file held then, not from the job's start. The job checkpoints its start state as its loop starts.
    Its loader's DataLoader processes start as in a plain interpreter (fork) in a worker forked from the runtime's
    forkserver: forced to its start method, each ran the script's top again and the job failed."""
    job_dir, slow, init = tmp_path / "job", tmp_path / "slow", tmp_path / "pretrained.pt"
    torch.manual_seed(1)
    net = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))
    torch.save(net.state_dict(), init)
    slow.touch()
    proc = start_script(job_dir, 2, "--epochs", "1", "--max-steps", "8", "--step-s", "0.2", "--slow-file", str(slow),
                        "--init", str(init), "--ckpt-every", "1000", "--loader-workers", "2",
                        runtime_args=("--record-samples",))
    wait_for_step(job_dir, 3, proc, timeout=120)
    torch.save({k: v + 1.0 for k, v in net.state_dict().items()}, init)
    os.kill(json.loads((job_dir / "status.json").read_text())["worker_pids"][1], signal.SIGKILL)
    wait_for_event(job_dir, "worker_lost", 1, proc, timeout=120)
    slow.unlink()
    finish(proc, timeout=300)
    lost = events(job_dir, "worker_lost")[0]
    first = [r for r in steps(job_dir) if r["step"] == 1]
    assert len(first) == 2 and first[0]["generation"] < first[1]["generation"]
    assert first[1]["loss"] == first[0]["loss"]   # the same weights, batch and ranks: step 1 again, bit for bit
    assert lost["restored_step"] == 0 and lost["checkpoint"], lost
    assert committed_sample_ids(job_dir) == Counter(committed_sample_ids(job_dir).keys())   # each trained once


@pytest.mark.parametrize("slow_in", ["forward", "backward", "step"])
def test_the_slow_worker_is_the_one_replaced_every_sample_once(tmp_path, slow_in):
    """Worker 1 sleeps before each forward (a slow batch, a slow device), in its backward, or before its optimizer
    step: its peers wait for it in backward's gradient all-reduce, and each rank's time was taken to its optimizer
    step, so all looked as slow as it. The rule read samples over that time, so the rank with one sample less (8 over
    3: 3, 3, 2) was flagged instead, and any 3-worker job of such a batch had its last rank replaced, again and again.
    Then a rank's own time ended at its forward's, and a rank slow in backward or its optimizer step was never seen.
    A rank's own time is now the whole step's less its waits for its peers (DDP's, in forward and backward).
    Each rank of the new group goes on with that rank's random streams where the old group left them, whichever
    worker holds it now (the fresh one takes rank 2, worker 2 rank 1): the fresh worker drew its own, seeded from the
    OS, so the run was no longer the one it would have been."""
    job_dir = tmp_path / "job"
    proc = start_script(job_dir, 3, "--epochs", "1", "--slow-worker", "1", "--slow-s", "0.05", "--slow-in", slow_in,
                        "--dropout", "0.2", "--print-rng", runtime_args=("--record-samples",), replace_stragglers=True)
    finish(proc, timeout=300)
    assert [e["workers"] for e in events(job_dir, "straggler")] == [[1]]
    swap = events(job_dir, "resized")
    assert len(swap) == 1 and swap[0]["replaced"] == [1] and swap[0]["from_workers"] == swap[0]["workers"] == 3
    assert committed_sample_ids(job_dir) == Counter(range(SAMPLES))
    digests = {}   # (where, rank, step) -> digest
    for log in (job_dir / "logs").glob("worker-*.log"):
        for line in log.read_text().splitlines():
            if line.startswith("rng "):
                where, rank, step, digest = line.split()[1:]
                digests[where, int(rank), int(step)] = digest
    at = swap[0]["step"]
    assert [digests["begin", r, at + 1] for r in range(3)] == [digests["end", r, at] for r in range(3)], at


@pytest.mark.parametrize("schedule", ["per-step", "per-epoch"])
def test_a_step_limit_each_epoch_counts_the_samples_trained_and_the_budget_of_such_epochs(tmp_path, schedule):
    """A loop that breaks out of each epoch after 4 steps (``--max-steps``): each epoch's end counted the whole epoch
    as trained (samples jumped from 32 to 480) and the budget counted 3 whole epochs (1 440 samples of the 96 it
    trains), so the scheduler saw 15 times the work left. Once an epoch is cut, each later one counts as long.
    OneCycleLR stepped per step jumped at each epoch's start by the rest of the epoch before (its 4th step to its
    61st: the pace counted whole epochs); the plan of a StepLR stepped after each epoch put epoch 2 at steps 121-180,
    not 9-12."""
    job_dir = tmp_path / "job"
    finish(start_script(job_dir, 1, "--epochs", "3", "--max-steps", "4",
                        *(["--epoch-schedule"] if schedule == "per-epoch" else [])), timeout=300)
    recs = {r["step"]: r for r in steps(job_dir)}
    assert sorted(recs) == list(range(1, 13))
    assert [recs[k]["samples"] for k in sorted(recs)] == [BATCH * k for k in range(1, 13)]
    assert [recs[k]["total_samples"] for k in range(1, 5)] == [3 * SAMPLES] * 4   # not known before the first cut
    assert {recs[k]["total_samples"] for k in range(5, 13)} == {3 * 4 * BATCH}
    assert recs[12]["samples"] == recs[12]["total_samples"]
    if schedule == "per-epoch":
        plan = json.loads((job_dir / "lr_plan.json").read_text())
        assert plan["steps"] == [8, 9, 12] and plan["lr"] == pytest.approx([recs[k]["lr"] for k in (8, 9, 12)],
                                                                          rel=1e-9)
        return
    optimizer = torch.optim.AdamW([torch.zeros(1)], lr=0.01)   # the script's schedule, stepped once a step
    scheduler = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=0.01, total_steps=3 * SAMPLES // BATCH)
    expected = []
    for _ in range(12):
        expected.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        scheduler.step()
    assert [recs[k]["lr"] for k in range(1, 13)] == pytest.approx(expected, rel=1e-9)


def test_a_loaders_steps_per_epoch_holds_alike_on_every_rank_across_a_grow_and_the_budget_knows_it(tmp_path):
    """A step limit counted in the script (``enumerate(loader)``, ``--max-steps``) restarts at 0 in a grow's newcomer:
    grown at step 4 of 8, the old rank broke out at step 8 and the newcomer trained on alone, its next all-reduce
    failing. ``steps_per_epoch`` is the job's: each rank's epoch ends at the same step, and the budget counts it
    from the first step."""
    job_dir = tmp_path / "job"
    proc = start_script(job_dir, 1, "--epochs", "2", "--steps-per-epoch", "6", "--step-s", "0.4",
                        runtime_args=("--record-samples",))
    wait_for_step(job_dir, 2, proc, timeout=120)
    write_control(job_dir, 2, None, 1)
    out, _ = proc.communicate(timeout=300)
    assert proc.returncode == 0 and "Traceback" not in out, out[-3000:]
    recs = {r["step"]: r for r in steps(job_dir)}
    assert sorted(recs) == list(range(1, 13)) and recs[12]["workers"] == 2
    assert {r["total_samples"] for r in recs.values()} == {2 * 6 * BATCH}
    assert [recs[k]["samples"] for k in sorted(recs)] == [BATCH * k for k in range(1, 13)]
    assert [e["epoch"] for e in events(job_dir, "epoch_end")] == [0, 1]
    ids = committed_sample_ids(job_dir)
    assert sum(ids.values()) == 2 * 6 * BATCH and len(ids) > 6 * BATCH   # two epochs' first 48 of other orders


def batch_doubled_at_step_3(tmp_path: Path, *script_args: str, batches: tuple[int, ...] = (2 * BATCH,)) -> Path:
    """A 1-worker epoch whose global batch the scheduler doubles at step 3 (the LR given at the first); ``batches``:
    the batches it changes to in turn, each once the one before applied (its ``lr_rule`` event)."""
    job_dir, slow = tmp_path / "job", tmp_path / "slow"
    slow.touch()
    proc = start_script(job_dir, 1, "--epochs", "1", "--step-s", "0.1", "--slow-file", str(slow), *script_args,
                        runtime_args=("--reference-batch-size", str(BATCH)))
    wait_for_step(job_dir, 3, proc, timeout=120)
    for generation, batch in enumerate(batches, 1):
        write_control(job_dir, 1, batch, generation)
        wait_for_event(job_dir, "lr_rule", generation, proc, timeout=120)
    slow.unlink()
    finish(proc, timeout=300)
    return job_dir


def test_each_lr_rule_event_names_the_batch_it_changed_from(tmp_path):
    """`from_batch` was the reference batch (the script's) on every change: a second change, 2B -> B, read
    'batch 8 -> 8' with a factor of 1."""
    job_dir = batch_doubled_at_step_3(tmp_path, batches=(2 * BATCH, BATCH))
    rules = [(r["from_batch"], r["to_batch"], r["reference_batch"], r["factor"]) for r in events(job_dir, "lr_rule")]
    assert rules == [(BATCH, 2 * BATCH, BATCH, pytest.approx(2 ** 0.5)), (2 * BATCH, BATCH, BATCH, 1.0)], rules


def test_a_scheduler_batch_change_applies_the_adam_rule_and_logs_it(tmp_path):
    job_dir = batch_doubled_at_step_3(tmp_path)
    rule = events(job_dir, "lr_rule")[0]
    assert (rule["rule"], rule["from_batch"], rule["to_batch"]) == ("sqrt", BATCH, 2 * BATCH)
    assert rule["factor"] == pytest.approx(2 ** 0.5)
    recs = steps(job_dir)
    changed = next(i for i, r in enumerate(recs) if r["batch_size"] == 2 * BATCH)
    assert changed > 0 and recs[-1]["batch_size"] == 2 * BATCH
    # OneCycleLR's own value, recovered from the step before and after, is scaled by sqrt(2) at the new batch
    sched_lr = torch.optim.lr_scheduler.OneCycleLR(torch.optim.AdamW([torch.nn.Parameter(torch.zeros(1))], lr=0.01),
                                                   max_lr=0.01, total_steps=SAMPLES // BATCH)
    lrs = []   # step k's LR (k from 1): after k - 1 of the schedule's steps
    for _ in range(SAMPLES // BATCH):
        lrs.append(sched_lr.get_last_lr()[0])
        sched_lr.optimizer.step()
        sched_lr.step()
    assert recs[changed]["lr"] == pytest.approx(lrs[changed] * 2 ** 0.5, rel=1e-6)
    assert recs[changed - 1]["lr"] == pytest.approx(lrs[changed - 1], rel=1e-6)
    # the schedule is paced by samples: each step at twice the batch is two of OneCycleLR's steps, so the epoch
    # still ends at the schedule's end (one scheduler step per optimizer step stopped near its middle)
    paced = torch.optim.lr_scheduler.OneCycleLR(torch.optim.AdamW([torch.nn.Parameter(torch.zeros(1))], lr=0.01),
                                                max_lr=0.01, total_steps=SAMPLES // BATCH)
    for _ in range(changed + 2 * (len(recs) - 1 - changed)):
        paced.optimizer.step()
        paced.step()
    assert recs[-1]["lr"] == pytest.approx(paced.get_last_lr()[0] * 2 ** 0.5, rel=1e-6)
    assert recs[-1]["lr"] < 0.05 * max(r["lr"] for r in recs)
    # each record says the rule's factor in its LR, and the plan (made at step 3, before the change) its samples: the
    # service reads the script's schedule over samples / the first batch, OneCycleLR's own steps, to the budget's end
    assert [r["lr_factor"] for r in recs] == pytest.approx([1.0] * changed + [2 ** 0.5] * (len(recs) - changed))
    plan = read_lr_plan(job_dir)
    assert (plan["step"], plan["samples"], plan["lr_factor"]) == (3, 3 * BATCH, 1.0)
    history = ProgressHistory.of(recs[:changed + 2])
    axis = ProgressAxis.of(history)
    schedule = logged_schedule(history, SAMPLES / BATCH, plan, axis)
    assert [schedule.lr(x) for x in range(1, SAMPLES // BATCH + 1)] == pytest.approx(lrs, rel=1e-6)


def test_a_warm_up_then_cosine_sequential_lr_keeps_its_pace_in_samples_over_a_batch_change(tmp_path):
    """SequentialLR(LinearLR, CosineAnnealingLR) and the batch doubled at step 3: the inner schedulers were paced as
    well as the SequentialLR stepping them, so the cosine took an extra step at the change and ran a step ahead to the
    end. Each step's LR is the schedule's after as many steps as reference batches fit in the samples before it."""
    job_dir = batch_doubled_at_step_3(tmp_path, "--warmup-cosine")
    opt = torch.optim.AdamW([torch.nn.Parameter(torch.zeros(1))], lr=0.01)
    total = SAMPLES // BATCH
    sched = torch.optim.lr_scheduler.SequentialLR(opt, [
        torch.optim.lr_scheduler.LinearLR(opt, start_factor=0.1, total_iters=5),
        torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=total - 5)], milestones=[5])
    lrs = []
    for _ in range(total):
        lrs.append(sched.get_last_lr()[0])
        opt.step()
        sched.step()
    recs = steps(job_dir)
    assert recs[0]["batch_size"] == BATCH and recs[-1]["batch_size"] == 2 * BATCH
    before = [0] + [r["samples"] for r in recs[:-1]]   # an odd step count at 8 leaves a last step of 8 at 16
    assert [r["lr"] / r["lr_factor"] for r in recs] == pytest.approx([lrs[k // BATCH] for k in before], rel=1e-6)


def test_a_worker_lost_after_a_batch_change_restarts_at_the_batch_the_request_asked(tmp_path):
    """The scheduler asked for twice the batch, then a worker died: the restart from the checkpoint (none here:
    from the start) trained at the checkpoint's batch while tagging the request answered, so the service showed
    the batch it asked for and the job trained at the old one (a user's job under `dlsched serve`)."""
    job_dir, slow = tmp_path / "job", tmp_path / "slow"
    slow.touch()
    proc = start_script(job_dir, 1, "--epochs", "1", "--step-s", "0.1", "--slow-file", str(slow),
                        "--ckpt-every", "1000", runtime_args=("--reference-batch-size", str(BATCH)))
    wait_for_step(job_dir, 2, proc, timeout=120)
    write_control(job_dir, 1, 2 * BATCH, 1)
    wait_until(lambda: any(r["batch_size"] == 2 * BATCH for r in steps(job_dir)), 120, "a step at the new batch")
    os.kill(json.loads((job_dir / "status.json").read_text())["worker_pids"][0], signal.SIGKILL)
    wait_for_event(job_dir, "worker_lost", 1, proc, timeout=120)
    slow.unlink()
    finish(proc, timeout=300)
    lost = events(job_dir, "worker_lost")[0]
    after = [r for r in steps(job_dir) if r["generation"] >= lost["new_generation"]]
    assert after and {(r["batch_size"], r["control_generation"]) for r in after} == {(2 * BATCH, 1)}, after[:3]
    # the LR rule applies to the restarted group too: the schedule's LR times sqrt(2) (Adam)
    assert {round(r["lr_factor"], 6) for r in after} == {round(2 ** 0.5, 6)}


def test_a_schedule_sized_from_len_loader_ends_with_the_epochs_at_the_specs_batch(tmp_path):
    """A spec's batch_size (16) over the script's loader (8): `OneCycleLR(total_steps=epochs * len(loader))` was sized
    at the loader's batch (60 steps) and paced at the spec's (one of its steps per step of 16: 30), so the run ended
    half-way through its schedule, its LR near the peak. Before the loop len(loader) counts at the reference batch."""
    job_dir = tmp_path / "job"
    proc = start_script(job_dir, 1, "--epochs", "1", "--steps-from-len",
                        runtime_args=("--batch-size", str(2 * BATCH), "--reference-batch-size", str(2 * BATCH)))
    finish(proc, timeout=300)
    recs = steps(job_dir)
    assert len(recs) == SAMPLES // (2 * BATCH) and {r["batch_size"] for r in recs} == {2 * BATCH}
    assert recs[-1]["lr"] < 0.05 * max(r["lr"] for r in recs)    # annealed to the schedule's end


def test_a_grow_completes_when_the_script_asks_its_rank_and_len_loader_before_the_loop(tmp_path):
    """A newcomer's dt.rank() (and len(loader), sized at the reference batch) before the loop waited for its
    generation's plan, which the coordinator publishes only once the newcomer is ready, in the loop: the grow never
    happened (the service gave it up past resize_timeout_s). A newcomer is not in the group yet: rank -1."""
    job_dir, slow = tmp_path / "job", tmp_path / "slow"
    slow.touch()
    proc = start_script(job_dir, 1, "--epochs", "3", "--step-s", "0.3", "--slow-file", str(slow), "--rank-before-loop",
                        "--steps-from-len", runtime_args=("--reference-batch-size", str(BATCH)))   # a minute to grow in
    wait_for_step(job_dir, 2, proc, timeout=120)
    write_control(job_dir, 2, None, 1)
    wait_for_event(job_dir, "resized", 1, proc, timeout=120)
    slow.unlink()
    out, _ = proc.communicate(timeout=300)
    assert proc.returncode == 0, out[-2000:]
    assert "[worker 0] before the loop: rank 0 of 1" in out and "[worker 1] before the loop: rank -1 of 1" in out


def test_a_smaller_batch_keeps_a_per_step_schedule_within_its_steps_and_every_sample_once(tmp_path):
    """The scheduler halves a OneCycleLR script's batch: the epoch takes more steps than the schedule has, so
    its scheduler is stepped every other step (it raised 'Tried to step 61 times', 3 restarts, a failed job)."""
    job_dir, slow = tmp_path / "job", tmp_path / "slow"
    slow.touch()
    proc = start_script(job_dir, 1, "--epochs", "2", "--step-s", "0.1", "--slow-file", str(slow),
                        runtime_args=("--reference-batch-size", str(BATCH), "--record-samples"))
    wait_for_step(job_dir, 3, proc, timeout=120)
    write_control(job_dir, 1, BATCH // 2, 1)
    wait_for_event(job_dir, "lr_rule", 1, proc, timeout=120)
    slow.unlink()
    finish(proc, timeout=300)
    assert committed_sample_ids(job_dir) == Counter({i: 2 for i in range(SAMPLES)})
    recs = steps(job_dir)
    assert recs[-1]["batch_size"] == BATCH // 2 and len(recs) > 2 * SAMPLES // BATCH
    assert recs[-1]["lr"] < 0.05 * max(r["lr"] for r in recs)    # annealed to the schedule's end


def test_the_runtime_plans_the_scripts_lr_to_the_end_of_its_budget(tmp_path):
    """Rank 0 writes lr_plan.json at its third step: the LR the script's OneCycleLR then set at every later step,
    to the budget's last (2 epochs of 60), the annealing included, as the step records logged it."""
    job_dir = tmp_path / "job"
    proc = start_script(job_dir, 2, "--epochs", "2")
    finish(proc, timeout=300)
    plan = json.loads((job_dir / "lr_plan.json").read_text())
    logged = {r["step"]: r["lr"] for r in steps(job_dir)}
    assert plan["step"] == 3 and plan["batch_size"] == BATCH and plan["steps"][-1] == max(logged) == 2 * SAMPLES // BATCH
    assert plan["steps"] == list(range(4, max(logged) + 1))         # 117 steps: every one a knot
    assert plan["lr"] == pytest.approx([logged[x] for x in plan["steps"]], rel=1e-9)
    assert min(plan["lr"]) < 0.05 * max(plan["lr"])


def test_an_epoch_schedulers_plan_is_written_once_it_has_stepped_and_holds_each_epochs_lr(tmp_path):
    """A StepLR stepped after each epoch: its pace is known at the first step after epoch 0's end; the plan holds
    each later epoch's LR from its first step to its last, as logged."""
    job_dir = tmp_path / "job"
    proc = start_script(job_dir, 1, "--epochs", "3", "--epoch-schedule")
    finish(proc, timeout=300)
    plan = json.loads((job_dir / "lr_plan.json").read_text())
    logged = {r["step"]: r["lr"] for r in steps(job_dir)}
    per_epoch = SAMPLES // BATCH
    assert plan["step"] == per_epoch + 1 and plan["steps"][-1] == max(logged) == 3 * per_epoch
    assert plan["steps"] == [2 * per_epoch, 2 * per_epoch + 1, 3 * per_epoch]   # epoch 1's last, epoch 2's ends
    assert plan["lr"] == pytest.approx([logged[x] for x in plan["steps"]], rel=1e-9)
    assert plan["lr"] == pytest.approx([0.005, 0.0025, 0.0025])


def test_the_script_runs_standalone_with_one_worker_and_a_quiet_terminal(tmp_path):
    """``python train.py`` outside the scheduler: one worker, no job folder, every epoch trained; the terminal
    gets the events (epoch_end with its mean_loss) and the steps at a cadence: each of the first 10, every 10th to
    100, every 50th after, and each epoch's last, not a line per step (even when each step reports extra metrics).
    Only every 50th step was shown (a 34-step run never showed its loss or LR), and epoch_end lost its mean_loss."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("DLSCHED")}
    env["PYTHONPATH"] = str(REPO / "src")
    r = subprocess.run([sys.executable, SCRIPT, "--samples", "380", "--batch", "4", "--epochs", "2", "--report-lr"],
                       cwd=tmp_path,
                       env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    shown = [json.loads(line.split(" ", 1)[1]) for line in r.stdout.splitlines() if line.startswith("dlsched: ")]
    epoch_ends = [e for e in shown if e.get("event") == "epoch_end"]
    assert [e["epoch"] for e in epoch_ends] == [0, 1] and all(e["mean_loss"] > 0 for e in epoch_ends), epoch_ends
    assert [e for e in shown if "val_mse" in (e.get("metrics") or {})], shown
    step_lines = {e["step"]: e for e in shown if "event" not in e}
    wanted = {*range(1, 11), *range(20, 100, 10), 95, 100, 150, 190}   # 95 and 190: each epoch's last
    assert wanted <= set(step_lines) and len(step_lines) < 40, sorted(step_lines)   # a line 10 s apart at most too
    assert all(step_lines[s]["loss"] > 0 and step_lines[s]["lr"] > 0 for s in (95, 190)), step_lines
    assert not list(tmp_path.iterdir()), list(tmp_path.iterdir())   # nothing written where it ran


def test_a_grow_at_an_epochs_last_step_waits_for_the_evaluation_every_rank_runs(tmp_path):
    """A regroup at the epoch's last step put the newcomer in the next epoch's training while the group's ranks ran
    the epoch's evaluation, whose all_reduce then met the newcomer's gradient all-reduce (a DDP forward syncing
    BatchNorm buffers did the same). The group now regroups where its ranks draw their next batch."""
    job_dir, waiting = tmp_path / "job", tmp_path / "flag-waited"
    proc = start_script(job_dir, 1, "--epochs", "2", "--eval-all-reduce", "--flag-lands-at-epoch-end", str(waiting),
                        runtime_args=("--record-samples", "--standby", "1"))
    wait_until(lambda: waiting.exists() or proc.poll() is not None, 120, "epoch 0's last step")
    write_control(job_dir, 2, None, 1)   # asked only now: an earlier step would have seen the flag
    finish(proc, timeout=300)

    resized = events(job_dir, "resized")
    assert [(e["from_workers"], e["workers"], e["step"]) for e in resized] == [(1, 2, SAMPLES // BATCH)]
    assert not events(job_dir, "worker_lost") and not events(job_dir, "shrunk")
    assert committed_sample_ids(job_dir) == Counter({i: 2 for i in range(SAMPLES)})
    evaluations = [r["metrics"] for r in events(job_dir, "metrics") if "val_sse" in r["metrics"]]
    assert len(evaluations) == 2, evaluations        # epoch 0's by the group of one, epoch 1's by the two
    assert [r["workers"] for r in steps(job_dir)][SAMPLES // BATCH] == 2


def test_a_rerun_with_another_batch_size_resumes_the_script_at_it_with_the_rule_and_the_pace(tmp_path):
    """``--batch-size`` on a re-run of a stopped script's folder: was dropped (a script's checkpoint holds no batch),
    exit 0, the loader's batch kept and the resumed event's batches null."""
    job_dir, slow = tmp_path / "job", tmp_path / "slow"
    slow.touch()
    proc = start_script(job_dir, 1, "--epochs", "1", "--step-s", "0.1", "--slow-file", str(slow),
                        runtime_args=("--record-samples",))
    wait_for_step(job_dir, 5, proc, timeout=120)
    proc.send_signal(signal.SIGTERM)
    proc.communicate(timeout=120)
    at = events(job_dir, "stopped")[0]["step"]
    slow.unlink()
    out, _ = start_script(job_dir, 1, "--epochs", "1", runtime_args=("--record-samples", "--batch-size",
                                                                       str(2 * BATCH))).communicate(timeout=300)
    assert f"at batch {2 * BATCH} (the checkpoint's: {BATCH})" in out, out
    resumed = events(job_dir, "resumed")[0]
    assert (resumed["restored_step"], resumed["from_batch_size"], resumed["batch_size"]) == (at, BATCH, 2 * BATCH)
    rows = {r["step"]: r for r in steps(job_dir)}
    assert rows[at]["batch_size"] == BATCH and rows[at + 1]["batch_size"] == 2 * BATCH
    assert [(e["rule"], e["to_batch"]) for e in events(job_dir, "lr_rule")] == [("sqrt", 2 * BATCH)]
    assert rows[at + 1]["lr_factor"] == pytest.approx(2 ** 0.5)
    assert committed_sample_ids(job_dir) == Counter(range(SAMPLES))
    # paced by samples: OneCycleLR reaches its end with the epoch, not half-way through it
    assert max(rows) == at + -(-(SAMPLES - at * BATCH) // (2 * BATCH))
    assert rows[max(rows)]["lr"] < 0.05 * max(r["lr"] for r in rows.values())


def test_a_sigterm_stops_a_script_after_the_step_it_lands_in(tmp_path):
    """Rank 0 read the stop flag as a step began: a SIGTERM early in a step waited for the next one too, two slow
    steps, past the local backend's 10 s grace (a cancelled job trained on, then was SIGKILLed without its stop)."""
    job_dir = tmp_path / "job"
    proc = start_script(job_dir, 2, "--epochs", "1", "--backward-s", "3")
    wait_for_step(job_dir, 2, proc, timeout=120)
    landed = max(r["step"] for r in steps(job_dir)) + 1   # the step under way: it began as the last one committed
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 128 + signal.SIGTERM, out
    assert events(job_dir, "stopped")[0]["step"] == landed, out


def test_ctrl_c_stops_a_script_job_like_sigterm(tmp_path):
    """Ctrl-C (SIGINT to the terminal's process group): each worker died with a KeyboardInterrupt traceback, no
    checkpoint of the step, status.json left 'running'."""
    job_dir = tmp_path / "job"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO / "src"), str(REPO), os.environ.get("PYTHONPATH", "")])}
    cmd = [sys.executable, "-m", "dlsched.train.run", "--job-dir", str(job_dir), "--workers", "2", "--threads", "1",
           "--", "python", SCRIPT, "--samples", str(SAMPLES), "--batch", str(BATCH), "--epochs", "1", "--step-s", "0.2"]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    wait_for_step(job_dir, 3, proc, timeout=120)
    os.killpg(proc.pid, signal.SIGINT)
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 128 + signal.SIGTERM and "KeyboardInterrupt" not in out, out
    stopped = events(job_dir, "stopped")
    assert len(stopped) == 1 and stopped[0]["checkpoint"], out
    assert json.loads((job_dir / "status.json").read_text())["state"] == "stopped"


def test_a_stop_in_an_epochs_last_step_resumes_into_that_epochs_evaluation(tmp_path):
    """A SIGTERM in the epoch's last step checkpointed it before the code after the loader ran; the re-run went
    straight to the next epoch, and epoch 0's evaluation was never made."""
    job_dir, waiting = tmp_path / "job", tmp_path / "flag-waited"
    proc = start_script(job_dir, 1, "--epochs", "2", "--flag-lands-at-epoch-end", str(waiting),
                        runtime_args=("--record-samples",))
    wait_until(lambda: waiting.exists() or proc.poll() is not None, 120, "epoch 0's last step")
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 128 + signal.SIGTERM and events(job_dir, "stopped")[0]["step"] == SAMPLES // BATCH, out
    assert not [r for r in events(job_dir, "metrics") if "val_mse" in r["metrics"]], "stopped before the evaluation"

    finish(start_script(job_dir, 1, "--epochs", "2", runtime_args=("--record-samples",)), timeout=300)
    evaluated = [(r["epoch"], r["step"]) for r in events(job_dir, "metrics") if "val_mse" in r["metrics"]]
    assert evaluated == [(0, SAMPLES // BATCH), (1, 2 * SAMPLES // BATCH)], evaluated
    assert [e["epoch"] for e in events(job_dir, "epoch_end")] == [0, 1]
    assert committed_sample_ids(job_dir) == Counter({i: 2 for i in range(SAMPLES)})
