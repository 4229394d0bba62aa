"""Draws made in a dataset's ``__getitem__`` keyed by the sample (in DataLoader processes too), and a user's sampler
drawn once per epoch and sharded by the job's table: in one process, and under the runtime with real gloo workers
through a restart and a grow and shrink."""
from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
import torch
from torch.utils.data import WeightedRandomSampler

from dlsched.torch.sample_draws import KeyedSamples, SamplerDraws
from dlsched.train.progress_log import read_progress
from dlsched.train.data import committed_sample_ids
from tests.torch.test_elastic_script import BATCH, SAMPLES, resize_through, start_script, steps, val_curve
from tests.train.helpers import REPO, events, finish
from tests.train.test_worker_loss import train

STANDALONE = str(Path(__file__).with_name("sampler_script.py"))
SCRIPT = str(Path(__file__).with_name("user_script.py"))


def standalone(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    return subprocess.run([sys.executable, STANDALONE, *args], env=env, capture_output=True, text=True, timeout=300)


def lines(r: subprocess.CompletedProcess) -> list[dict]:
    assert r.returncode == 0, r.stderr[-2000:]
    return [json.loads(line) for line in r.stdout.splitlines() if line.startswith("{")]


def test_a_weighted_sampler_gives_each_epoch_its_sequence_and_a_samples_draws_are_its_own_in_any_process():
    """The sampler was refused. Each epoch is now its sequence, drawn on its generator's seed and the epoch; a sample's
    __getitem__ draws are the same in the DataLoader's processes as in the main one, whose own stream (the script's
    torch draw after the loop) the loading leaves as it was."""
    in_process = lines(standalone("--sampler", "weighted"))
    assert lines(standalone("--sampler", "weighted", "--num-workers", "2")) == in_process
    draws = SamplerDraws(WeightedRandomSampler([1.0 + i % 4 for i in range(20)], 20,
                                               generator=torch.Generator().manual_seed(7)), 20, 0)
    assert [e["ids"] for e in in_process[:2]] == [draws.order(0).tolist(), draws.order(1).tolist()]
    assert in_process[0]["ids"] != in_process[1]["ids"] and len(set(in_process[0]["ids"])) < 20   # with replacement
    assert lines(standalone())[-1] == in_process[-1]


class Opened(torch.utils.data.Dataset):
    """A dataset whose worker_init_fn opens its file through get_worker_info().dataset (the h5py pattern)."""
    handle = None

    def __len__(self):
        return 4

    def __getitem__(self, i):
        return self.handle, i, torch.rand(()).item()


def test_the_epochs_dataset_is_the_users_to_a_worker_init_fn_and_pickles_for_spawned_processes():
    keyed = KeyedSamples(Opened(), seed=3, epoch=1, order=None)
    keyed.handle = "opened"   # as a worker_init_fn sets it: on the user's dataset, which __getitem__ reads
    assert keyed.dataset.handle == keyed.handle == "opened"
    copy = pickle.loads(pickle.dumps(keyed))
    assert copy[2] == keyed[2] and copy[2][:2] == ("opened", 2)   # the same draw: keyed by (seed, epoch, place)
    assert KeyedSamples(Opened(), seed=3, epoch=2, order=None)[2] != keyed[2]


def test_a_subsets_samples_draw_alike_whichever_samples_share_their_batch():
    """A Subset fetches a batch at once (its __getitems__): seeded once per batch, a sample's jitter depended on
    the other samples of its batch, which another number of workers changes."""
    keyed = KeyedSamples(torch.utils.data.Subset(Opened(), [3, 1, 0]), seed=0, epoch=0, order=None)
    assert keyed.__getitems__([0, 1, 2]) == [keyed[0], keyed[1], keyed[2]]


def test_a_sampler_that_draws_from_its_own_state_is_refused_in_one_line():
    r = standalone("--sampler", "stateful")
    assert r.returncode != 0
    assert ("ElasticDataLoader: sampler=<Stateful> drew another sequence for the same epoch and seed: draw from its "
            "`generator`") in r.stderr, r.stderr[-2000:]


@pytest.mark.slow
def test_a_restart_replays_what_the_dataloader_processes_drew_bit_for_bit(tmp_path):
    """Rank 0 fails in step 8, the job restarts from step 4's checkpoint: its DataLoader processes, seeded once per
    rebuild and then drawing for whichever batches they loaded, jittered steps 5 and 6 otherwise than the first run."""
    once = tmp_path / "failed-once"
    r = train(tmp_path, ["python", SCRIPT, "--samples", "48", "--batch", "8", "--epochs", "2", "--ckpt-every", "4",
                         "--fail-at-step", "8", "--fail-once-file", str(once), "--item-augment", "--loader-workers", "2"])
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    [lost] = events(tmp_path / "job", "worker_lost")
    assert lost["restored_step"] == 4, lost
    losses: dict[int, list[float]] = {}
    for rec in read_progress(tmp_path / "job"):
        if "event" not in rec:
            losses.setdefault(rec["step"], []).append(rec["loss"])
    replayed = {step: runs for step, runs in losses.items() if len(runs) > 1}
    assert sorted(replayed) == [5, 6, 7] and all(a == b for a, b in replayed.values()), replayed


@pytest.mark.slow
def test_a_weighted_sampler_and_augmenting_loader_processes_keep_the_run_through_a_grow_and_shrink(tmp_path):
    """1 -> 3 -> 2 workers mid-epoch, each with two DataLoader processes jittering samples, a WeightedRandomSampler
    choosing them: every place of each epoch's sequence is trained once, and the run is the one-worker run's (the same
    global batches, the same jitter of each sample) to float32 sums in another order."""
    flags = ("--epochs", "2", "--weighted-sampler", "--item-augment", "--loader-workers", "2")
    ref_dir, job_dir, slow = tmp_path / "ref", tmp_path / "elastic", tmp_path / "slow"
    finish(start_script(ref_dir, 1, *flags, "--ckpt-every", "0"), timeout=300)
    slow.touch()
    proc = start_script(job_dir, 1, *flags, "--step-s", "0.6", "--slow-file", str(slow),
                        runtime_args=("--record-samples",))
    resize_through(job_dir, proc, [3, 2])
    slow.unlink()
    finish(proc, timeout=300)
    assert [(e["from_workers"], e["workers"]) for e in events(job_dir, "resized")] == [(1, 3), (3, 2)]
    assert committed_sample_ids(job_dir) == Counter({i: 2 for i in range(SAMPLES)})   # places in the sequence
    assert len(steps(job_dir)) == 2 * SAMPLES // BATCH
    assert val_curve(job_dir) == pytest.approx(val_curve(ref_dir), rel=1e-3)


def test_the_digits_example_trains_standalone_with_its_sampler_and_loader_processes():
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    r = subprocess.run([sys.executable, str(REPO / "examples" / "digits_mlp.py"), "--epochs", "1"], env=env,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and "epoch 0: held-out balanced accuracy" in r.stdout, r.stdout[-2000:] + r.stderr[-2000:]
