"""Random draws made while loading a sample, keyed by the sample, and a user's sampler drawn once per epoch.

A ``DataLoader`` worker process seeds its streams once per iterator (its base seed plus the worker's id) and then
draws for whichever batches it happens to load. The loader rebuilds its DataLoader where a run resumes or resizes,
so an augmentation drawn in ``__getitem__`` after a restart was not the uninterrupted run's, even at the same number
of workers. Here torch's CPU generator, numpy's global one and Python's ``random`` are seeded from (seed, epoch, the
sample's place in the epoch) before each ``__getitem__``: a sample's draws are the same in any run, at any number of
workers or DataLoader processes. In the main process (``num_workers=0``) the rank's own streams (dropout) are set
aside for the batch and put back, so they draw as before. A sampler is drawn on those seeds too, once per epoch on
every rank alike, and the job's partition table shards its sequence: docs/porting.md, "Samplers".
"""
from __future__ import annotations

import hashlib
import random
from contextlib import contextmanager
from typing import Any, Iterator

import numpy as np
import torch
from torch.utils.data import Dataset, DistributedSampler, get_worker_info

from dlsched.errors import UserError


def key_seed(*parts: Any) -> int:
    """A 63-bit seed from ``parts`` (blake2b: stable across processes, unlike ``hash``)."""
    return int.from_bytes(hashlib.blake2b(repr(parts).encode(), digest_size=8).digest(), "little") >> 1


def seed_streams(seed: int) -> None:
    torch.default_generator.manual_seed(seed)   # the CPU one only: a CUDA generator (dropout on a GPU) is the rank's
    random.seed(seed)
    np.random.seed(seed & 0xFFFFFFFF)


@contextmanager
def streams_set_aside() -> Iterator[None]:
    """The process's torch CPU, numpy and Python streams, put back as they were after the block."""
    saved = torch.get_rng_state(), random.getstate(), np.random.get_state()
    try:
        yield
    finally:
        torch.set_rng_state(saved[0])
        random.setstate(saved[1])
        np.random.set_state(saved[2])


class KeyedSamples(Dataset):
    """The user's dataset as a DataLoader of one epoch reads it: item ``i`` is the sample at place ``i`` of the epoch
    (``order[i]`` where a sampler gave the epoch's sequence, else ``i`` itself), loaded on streams keyed by
    (seed, epoch, i). Other attributes are the user's dataset's, read and set (a ``worker_init_fn`` opening a file
    through ``get_worker_info().dataset``)."""

    _own = frozenset({"dataset", "seed", "epoch", "order"})

    def __init__(self, dataset: Dataset, seed: int, epoch: int, order: np.ndarray | None):
        for name, value in (("dataset", dataset), ("seed", seed), ("epoch", epoch), ("order", order)):
            object.__setattr__(self, name, value)

    def __len__(self) -> int:
        return len(self.dataset) if self.order is None else len(self.order)

    def __getattr__(self, name: str) -> Any:
        if name in KeyedSamples._own:   # not set yet (unpickling in a worker process)
            raise AttributeError(name)
        return getattr(self.dataset, name)

    def __setattr__(self, name: str, value: Any) -> None:
        object.__setattr__(self, name, value) if name in KeyedSamples._own else setattr(self.dataset, name, value)

    def _index(self, i: int) -> int:
        return i if self.order is None else int(self.order[i])

    def __getitem__(self, i: int) -> Any:
        return self.__getitems__([i])[0]

    def __getitems__(self, places: list[int]) -> list[Any]:
        if get_worker_info() is not None:   # a DataLoader process: its streams are its own
            return self._load(places)
        with streams_set_aside():
            return self._load(places)

    def _load(self, places: list[int]) -> list[Any]:
        if type(self.dataset).__getitem__ is Dataset.__getitem__:   # it fetches batches only: keyed by the batch
            seed_streams(key_seed(self.seed, self.epoch, *places))
            return self.dataset.__getitems__([self._index(i) for i in places])
        # one sample at a time even where the dataset fetches batches too (a Subset does): a batch's draws would
        # depend on which samples share it, which the number of workers changes
        out = []
        for i in places:
            seed_streams(key_seed(self.seed, self.epoch, i))
            out.append(self.dataset[self._index(i)])
        return out


def shown(value: Any) -> str:
    return repr(value) if isinstance(value, (bool, int, float, str)) else f"<{type(value).__name__}>"


class SamplerDraws:
    """A user's sampler, drawn once per epoch on streams seeded from (seed, epoch) (its own ``generator``'s seed,
    where it has one, in place of the loader's), so every rank, a restart and a grow's newcomer draw the same
    sequence of dataset indices; the job's table then hands out places in it. A sampler that draws otherwise (its
    own state, which moves on with each draw) is refused as the loader is made: epoch 0 is drawn twice and compared."""

    def __init__(self, sampler: Any, dataset_size: int, seed: int):
        if isinstance(sampler, DistributedSampler):
            raise UserError("ElasticDataLoader: sampler=<DistributedSampler> is not needed: the loader splits each "
                            "global batch over the workers itself; drop it and give shuffle= and seed= to the loader")
        if not hasattr(sampler, "__iter__"):
            raise UserError(f"ElasticDataLoader: sampler={shown(sampler)} is not iterable: give a torch Sampler "
                            "(or any iterable of dataset indices with __len__)")
        self.sampler, self.dataset_size, self.seed = sampler, dataset_size, seed
        own = getattr(sampler, "generator", None)
        self.base = own.initial_seed() if isinstance(own, torch.Generator) else seed
        self.checked, self.cached, self.size = False, (-1, None), None
        self.size = len(self.order(0))   # drawn now: a sampler it cannot honour is refused before the loop

    def order(self, epoch: int) -> np.ndarray:
        if self.cached[0] != epoch:
            order = self._draw(epoch)
            if not self.checked:
                if not np.array_equal(order, self._draw(epoch)):
                    raise UserError(f"ElasticDataLoader: sampler={shown(self.sampler)} drew another sequence for the "
                                    "same epoch and seed: draw from its `generator`, or torch's, numpy's or Python's "
                                    "global streams (the loader seeds them each epoch), so every worker, a restart and "
                                    "a newcomer draw the same epoch; or give the indices as a Subset of the dataset")
                self.checked = True
            if self.size is not None and len(order) != self.size:
                raise UserError(f"ElasticDataLoader: sampler={shown(self.sampler)} drew {len(order)} indices in epoch "
                                f"{epoch}, {self.size} before: every epoch must have as many (the job's budget and "
                                "partition table count them)")
            self.cached = (epoch, order)
        return self.cached[1]

    def _draw(self, epoch: int) -> np.ndarray:
        if hasattr(self.sampler, "set_epoch"):
            self.sampler.set_epoch(epoch)
        seed = key_seed(self.base, epoch, "sampler")
        own = getattr(self.sampler, "generator", None)
        with streams_set_aside():
            seed_streams(seed)
            if isinstance(own, torch.Generator):
                self.sampler.generator = torch.Generator().manual_seed(seed)   # its state, not its seed, moves on
            try:
                order = np.fromiter((int(i) for i in self.sampler), dtype=np.int64)
            finally:
                if isinstance(own, torch.Generator):
                    self.sampler.generator = own
        bad = order[(order < 0) | (order >= self.dataset_size)]
        if len(bad):
            raise UserError(f"ElasticDataLoader: sampler={shown(self.sampler)} drew index {int(bad[0])}, outside the "
                            f"dataset's {self.dataset_size} samples")
        order.flags.writeable = False
        return order
