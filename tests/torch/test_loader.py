"""ElasticDataLoader: a short last batch with fewer samples than workers, and arguments it cannot honour."""
from __future__ import annotations

import math
import os
import subprocess
import sys
from collections import Counter

import pytest
import torch
from torch.utils.data import TensorDataset

from dlsched.errors import UserError
from dlsched.torch.loader import ElasticDataLoader, remaining_epochs
from dlsched.train.data import committed_sample_ids
from dlsched.train.progress_log import read_progress
from tests.torch.test_elastic_script import SCRIPT, val_curve
from tests.train.helpers import REPO, events


def run_script(job_dir, workers: int, samples: int, batch: int, *script_args: str) -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO / "src"), str(REPO)])}
    r = subprocess.run([sys.executable, "-m", "dlsched.train.run", "--job-dir", str(job_dir), "--workers", str(workers),
                        "--threads", "1", "--record-samples", "--", "python", SCRIPT, "--samples", str(samples),
                        "--batch", str(batch), "--epochs", "1", *script_args], env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]


def test_a_last_batch_smaller_than_the_workers_trains_its_samples_once_and_only_them(tmp_path):
    """33 samples in batches of 16 on 3 workers: the last batch's one sample leaves two ranks none. They ran a
    DataLoader over no index (IndexError in collate, 3 restarts, a failed job); now they run a stand-in weighted 0,
    so the model is the one-worker run's."""
    run_script(tmp_path / "one", 1, 33, 16)
    run_script(tmp_path / "three", 3, 33, 16)
    assert committed_sample_ids(tmp_path / "three") == Counter({i: 1 for i in range(33)})
    assert events(tmp_path / "three", "finished")
    assert val_curve(tmp_path / "three") == pytest.approx(val_curve(tmp_path / "one"), rel=1e-3)


def test_batch_norm_trains_a_last_batch_that_leaves_a_rank_one_sample(tmp_path):
    """100 samples in batches of 32 on 3 workers: the last 4 split 1, 2, 1, and BatchNorm refused the ranks'
    one sample ("Expected more than 1 value per channel when training", a failed job) where plain DDP, whose
    sampler pads, runs. One sample is now loaded twice (the same mean loss)."""
    run_script(tmp_path / "job", 3, 100, 32, "--batch-norm")
    assert committed_sample_ids(tmp_path / "job") == Counter({i: 1 for i in range(100)})
    assert all(math.isfinite(v) for v in val_curve(tmp_path / "job"))


def test_breaking_out_of_the_loader_leaves_the_batch_it_fetched_untrained_and_no_step(tmp_path):
    """``if i == max_steps: break`` fetches one batch more than it trains. That batch was committed as a step
    that trained nothing, each epoch, and the epoch's evaluation went into its record, not a metrics event."""
    run_script(tmp_path / "job", 2, 96, 8, "--epochs", "2", "--max-steps", "5")
    steps = [r for r in read_progress(tmp_path / "job") if "event" not in r]
    assert [r["step"] for r in steps] == list(range(1, 11)) and all(not r["metrics"] for r in steps)
    assert [r["samples"] for r in steps][4] == 5 * 8
    assert [e["metrics"]["loader_batches"] for e in events(tmp_path / "job", "metrics")] == [5, 5]
    trained = committed_sample_ids(tmp_path / "job")      # the fetched batch's record is retracted: 5 x 8 an epoch
    assert sum(trained.values()) == 2 * 5 * 8 and max(trained.values()) <= 2


@pytest.mark.parametrize("kwargs, needle", [
    ({"batch_size": 0}, "batch_size=0 must be a positive integer"),
    ({"batch_size": "64"}, "batch_size='64' must be a positive integer"),   # argparse without type=int
    ({"batch_size": 8, "drop_last": True}, r"drop_last=True is not supported: .* give steps_per_epoch="),
    ({"batch_size": 8, "batch_sampler": [[0, 1]]}, r"batch_sampler=<list> is not supported: .* as sampler= instead"),
    # its type, not its repr ('<torch.utils.data.distributed.DistributedSampler object at 0x7f...>')
    ({"batch_size": 8, "sampler": torch.utils.data.DistributedSampler(range(4), num_replicas=2, rank=0)},
     r"sampler=<DistributedSampler> is not needed: .* drop it"),
    ({"batch_size": 8, "sampler": [0, 1], "shuffle": True}, r"sampler=<list> with shuffle=True: .* leave shuffle out"),
    ({"batch_size": 8, "sampler": 3}, r"sampler=3 is not iterable"),
    ({"batch_size": 8, "sampler": [0, 4]}, r"sampler=<list> drew index 4, outside the dataset's 4 samples"),
])
def test_arguments_it_cannot_honour_are_one_line_naming_them(kwargs, needle):
    with pytest.raises(UserError, match=needle):
        ElasticDataLoader(TensorDataset(torch.zeros(4)), **kwargs)


def test_an_iterable_dataset_is_refused_saying_what_to_give_instead():
    class Stream(torch.utils.data.IterableDataset):
        def __iter__(self):
            yield torch.zeros(4)

    with pytest.raises(UserError, match=r"dataset=Stream is an IterableDataset \(a stream\): give a map-style Dataset"):
        ElasticDataLoader(Stream(), batch_size=8)


def test_epochs_must_be_a_count():
    with pytest.raises(UserError, match="epochs='3' must be a non-negative integer"):
        next(remaining_epochs("3"))
