"""A large-embedding classifier on generated data: most parameters sit in an embedding table each batch barely
touches, so communication (a dense all-reduce of the whole table, or pushes/pulls to parameter servers), not
compute, bounds it at more workers.

Sample i is a bag of ``bag`` token ids; its label is the argmax of a fixed random teacher over the bag.
``sample_compute_s`` sleeps that long per sample read: it stands in for the per-sample forward/backward of a
heavier tower, time that, unlike this host's 2 busy CPU cores, divides evenly among workers as an
accelerator's would (the communication stays real). ``sync_s_per_peer`` adds that long per other worker to each
step: a ring all-reduce's latency term on a real network, which, unlike gloo on a busy shared host, does not
change with the host's load (tests that must see efficiency fall at a known count use it).
"""
from __future__ import annotations

import time

import torch
import torch.distributed as dist
from torch import nn

from dlsched.train.job import TrainJob


def make_job(num_samples: int = 2048, rows: int = 500_000, bag: int = 8, classes: int = 4,
             batch_size: int = 64, lr: float = 2.0, epochs: int = 1, seed: int = 0,
             sample_compute_s: float = 0.0, sync_s_per_peer: float = 0.0) -> TrainJob:
    g = torch.Generator().manual_seed(seed)
    tokens = torch.randint(0, rows, (num_samples, bag), generator=g)
    teacher = torch.randn(rows, classes, generator=g)
    labels = teacher[tokens].sum(dim=1).argmax(dim=1)

    def make_model() -> nn.Module:
        # per-token class scores summed over the bag (a linear bag-of-tokens model): the teacher's form, so
        # the loss keeps falling; zero start, since every row gets its own gradient
        table = nn.EmbeddingBag(rows, classes, mode="sum")
        nn.init.zeros_(table.weight)
        return table

    def get_batch(ids: torch.Tensor):
        peers = dist.get_world_size() - 1 if dist.is_initialized() else 0
        if sample_compute_s or sync_s_per_peer:
            time.sleep(sample_compute_s * len(ids) + sync_s_per_peer * peers)
        return tokens[ids], labels[ids]

    return TrainJob(name="embedding", make_model=make_model, num_samples=num_samples, get_batch=get_batch,
                    loss_fn=nn.functional.cross_entropy, batch_size=batch_size, lr=lr, momentum=0.9, epochs=epochs,
                    seed=seed, params={"rows": rows})
