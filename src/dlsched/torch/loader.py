"""``ElasticDataLoader`` and ``remaining_epochs``: exactly-once data for any map-style Dataset across resizes.

The job's partition table (``dlsched.train.data``) decides which sample ids form each global batch, in a
deterministic per-epoch order that does not depend on the number of workers; each rank loads its share
through a plain torch ``DataLoader`` (its ``collate_fn``, ``num_workers``...) whose batch sampler is the
rest of the epoch as the table will hand it out, computed once per layout (``rank_shares``): a step only
reads its entry. A regroup or a batch change rebuilds that DataLoader from the table. A share above
``max_local_batch`` comes as micro-batches of one step (``dlsched.torch.accumulation``).
"""
from __future__ import annotations

import math
import numbers
from typing import Any, Iterator

import torch
from torch.utils.data import DataLoader, Dataset, IterableDataset, TensorDataset

from dlsched.errors import UserError
from dlsched.torch.accumulation import micro_count, split_share
from dlsched.torch.adaptive_batch import AdaptiveBatch
from dlsched.torch.rng_state import BATCH
from dlsched.torch.sample_draws import KeyedSamples, SamplerDraws, key_seed, shown
from dlsched.train.data import rank_shares


class ElasticDataLoader:
    """``batch_size`` is the global batch at which the script's LR is given; the scheduler may change it.
    ``max_local_batch`` left out: the job spec's (``dlsched train --max-local-batch``), else no accumulation.
    ``steps_per_epoch``: an epoch is its first ``steps_per_epoch × batch_size`` samples (a step limit every rank keeps
    alike across resizes and restarts, which a count in the script does not; the job's budget knows it).
    ``sampler``: each epoch's order of dataset indices, drawn once per epoch alike on every rank (``sample_draws``)."""

    def __init__(self, dataset: Dataset, batch_size: int, shuffle: bool | None = None, seed: int = 0,
                 max_local_batch: int | None = None, steps_per_epoch: int | None = None, sampler: Any = None,
                 **loader_kwargs: Any):
        from dlsched.torch.session import current_session

        if isinstance(batch_size, bool) or not isinstance(batch_size, numbers.Integral) or batch_size < 1:
            raise UserError(f"ElasticDataLoader: batch_size={batch_size!r} must be a positive integer (the global batch)")
        batch_size = int(batch_size)  # a numpy integer too
        if isinstance(dataset, IterableDataset) or not hasattr(dataset, "__len__"):
            kind = "an IterableDataset (a stream)" if isinstance(dataset, IterableDataset) else "without __len__"
            raise UserError(f"ElasticDataLoader: dataset={type(dataset).__name__} is {kind}: give a map-style Dataset "
                            "(__len__ and __getitem__: its samples in a list, an index over its shards); the job "
                            "partitions sample indices, so each is trained once per epoch across resizes")
        batch_sampler = loader_kwargs.pop("batch_sampler", None)
        if batch_sampler is not None:
            raise UserError(f"ElasticDataLoader: batch_sampler={shown(batch_sampler)} is not supported: the job forms "
                            "each global batch of batch_size= and splits it over the workers; give the indices' order "
                            "as sampler= instead")
        if loader_kwargs.pop("drop_last", False) is not False:
            raise UserError("ElasticDataLoader: drop_last=True is not supported: the last batch is split over the "
                            "workers; to train whole batches only, give steps_per_epoch=len(dataset) // batch_size")
        if sampler is not None and shuffle:
            raise UserError(f"ElasticDataLoader: sampler={shown(sampler)} with shuffle=True: the sampler's order is "
                            "the epoch's (as with DataLoader); leave shuffle out")
        if max_local_batch is not None and (not isinstance(max_local_batch, int) or max_local_batch < 1):
            raise UserError(f"ElasticDataLoader: max_local_batch={max_local_batch!r} must be a positive integer "
                            "or None")
        if steps_per_epoch is not None and (isinstance(steps_per_epoch, bool) or not isinstance(steps_per_epoch, int)
                                            or steps_per_epoch < 1):
            raise UserError(f"ElasticDataLoader: steps_per_epoch={steps_per_epoch!r} must be a positive integer or None")
        self.dataset, self.batch_size, self.loader_kwargs = dataset, batch_size, loader_kwargs
        given = loader_kwargs.pop("generator", None)   # its seed, not its state: see _generator
        self._seed = given.initial_seed() if isinstance(given, torch.Generator) else seed
        self._sampler = None if sampler is None else SamplerDraws(sampler, len(dataset), self._seed)
        self._iterated = False
        self._session = current_session()
        self._session.attach_loader(len(dataset) if self._sampler is None else self._sampler.size, batch_size,
                                    self._sampler is None and (shuffle is None or bool(shuffle)), seed,
                                    steps_per_epoch * batch_size if steps_per_epoch else None)
        if max_local_batch is None and self._session.env is not None:  # the job spec's, unless the script's
            max_local_batch = self._session.env.max_local_batch
        self._session.micro.max_local_batch = max_local_batch  # past it, a rank's share is accumulated

    def autoscale_batch_size(self, max_batch_size: int, local_bsz_bounds: tuple[int | None, int | None] | None = None,
                             gradient_accumulation: bool = False) -> None:
        """Opt in, as in AdaptDL: the job moves its global batch within [batch_size, max_batch_size] (local
        batch within ``local_bsz_bounds``) to the goodput-optimal one (``dlsched.torch.adaptive_batch``). With
        ``gradient_accumulation`` the upper bound is the micro-batch's (``max_local_batch`` unless given) and
        a larger local batch is accumulated. Call before the training loop."""
        if max_batch_size < self.batch_size:
            raise UserError(f"autoscale_batch_size: max_batch_size={max_batch_size} is below batch_size={self.batch_size}")
        if self._session.joined:
            raise UserError("autoscale_batch_size: call it before the training loop starts")
        micro = self._session.micro
        adaptive = AdaptiveBatch(max_batch_size, local_bsz_bounds, gradient_accumulation)
        if gradient_accumulation:
            micro.max_local_batch = min(micro.max_local_batch or adaptive.micro_max, adaptive.micro_max)
            adaptive.micro_max = micro.max_local_batch
        self._session.adaptive = adaptive

    @property
    def accumulating(self) -> bool:
        """The batch out now is a micro-batch before its optimizer step's last (``max_local_batch``): its
        gradient is kept for the step, and ``optimizer.step``/``scheduler.step`` do nothing. Guard anything
        else that must see the whole gradient (``clip_grad_norm_``) with ``if not loader.accumulating``."""
        return self._session.micro.accumulating

    @property
    def current_batch_size(self) -> int:
        """The global batch now in force (the scheduler's, else ``batch_size``)."""
        return self._session.global_batch

    def __len__(self) -> int:
        return math.ceil(self._session.table.epoch_size / sized_batch(self._session))

    def __iter__(self) -> Iterator[Any]:
        s = self._session
        s.join()
        if s.epochs is None and self._iterated and s.table.done:
            # a plain loader starts a new epoch on each iteration; this one's epochs are remaining_epochs', and a
            # script's range(N) would train one epoch, then nothing, and finish
            raise UserError("ElasticDataLoader: iterated again after its epoch ended, outside dt.remaining_epochs: "
                            "loop `for epoch in dt.remaining_epochs(N):`, not `range(N)`: it starts each epoch and "
                            "resumes at the right one after a resize or restart (docs/porting.md)")
        self._iterated = True
        batches, shares, layout = None, None, None
        while True:
            s.boundary()
            s.rng.apply(BATCH)   # streams restored at the point they were captured: here, before the batch draws
            if s.table.done:
                return
            s.membership.draw()   # a regroup the epoch's last step asked for, after the evaluation
            s.rng.apply(BATCH)
            if layout != s.layout or batches is None:
                plan = self._plan(s)
                shares, layout = iter(plan), s.layout
                batches = iter(DataLoader(self._epoch_samples(s), batch_sampler=[
                    self._loaded(p, n < s.global_batch) for n, _, pieces in plan for p in pieces],
                    generator=self._generator(s), **self.loader_kwargs))
            n, mine, pieces = next(shares)
            offsets = list(s.table.offsets)
            for index, piece in enumerate(pieces):
                batch = next(batches)
                if index == 0:
                    s.begin_step(n, mine)
                s.micro.begin(index, len(pieces), len(piece))
                try:
                    yield batch
                except GeneratorExit:  # the loop broke out (max steps)
                    if s.open is not None and (s.micro.forwarded == 0 or s.micro.unfinished):
                        # an untrained batch, or a step whose last micro-batches never trained (its optimizer step
                        # never ran), is no step: it was committed as one, with what the script reported after
                        # the loop, its samples counted as trained and its gates left shut
                        _drop_step(s, offsets)
                    raise

    def _epoch_samples(self, s) -> Dataset:
        """The epoch's samples by their place in it (the table's ids), each loaded on streams keyed by it. A
        ``TensorDataset`` draws nothing: it is read as it is (reseeding costs tens of microseconds a sample, more than
        its read, and the wrapper's overhead target counts it: bench/torch_overhead.py)."""
        if self._sampler is None and type(self.dataset) is TensorDataset:
            return self.dataset
        epoch = s.table.epoch
        return KeyedSamples(self.dataset, self._seed, epoch, None if self._sampler is None else self._sampler.order(epoch))

    def _generator(self, s) -> torch.Generator:
        """The generator of a (re)built DataLoader: its iterator draws the seed of its worker processes from it. Left
        to the script's own (torch's global one), each rebuild drew from it, and a resumed run, which rebuilds where it
        resumes, then drew its dropout masks one number off an uninterrupted run's. Seeded by the epoch, rank and
        position, so a rebuild at the same point seeds the workers alike (what they draw for a sample: KeyedSamples)."""
        return torch.Generator().manual_seed(key_seed(self._seed, s.table.epoch, s.rank, s.table.consumed))

    def _loaded(self, piece: list[int], short: bool) -> list[int]:
        """The indices a micro-batch loads. A short last batch split over the workers may leave a rank one sample
        or none, where a plain DDP script (DistributedSampler pads) has several: BatchNorm refuses one sample in
        training. One sample is loaded twice (a mean loss is the same); none runs the step anyway (DDP's all-reduce
        needs every rank) on two stand-in samples, whose gradient the wrapper weights 0 (the micro-batch's size)."""
        if not piece:
            return [0, min(1, self._session.table.num_samples - 1)]
        return piece * 2 if short and len(piece) == 1 else piece

    @staticmethod
    def _plan(s) -> list[tuple[int, list[int], list[list[int]]]]:
        """The rest of the epoch at this layout: per step, the global batch, this rank's ids and its
        micro-batches (one, unless the share exceeds ``max_local_batch``)."""
        plan = rank_shares(s.table, s.global_batch, s.local_batches, s.rank)
        cap = s.micro.max_local_batch
        if not cap or max(s.local_batches) <= cap:
            return [(n, mine, [mine]) for n, mine in plan]
        return [(n, mine, split_share(mine, micro_count(n, s.local_batches, cap))) for n, mine in plan]


def _drop_step(s, offsets: list[int]) -> None:
    """Session ``s``'s open step never completes (the loop broke out before its last micro-batch trained): its samples
    go back to the table, its sample record is retracted (a step's last record counts), a partly accumulated gradient
    is cleared (the gated ``zero_grad`` kept it), and the gates open again."""
    s.record_open_step([])
    if s.micro.unfinished:
        for m in s.models:
            m.module.zero_grad(set_to_none=True)
    s.open, s.metrics = None, {}
    s.table.offsets = offsets
    s.micro.reset()


def sized_batch(s) -> int:
    """The batch ``len(loader)`` counts steps at: the batch in force once the loop runs; before it, the reference
    batch the scheduler's pace counts in (the spec's ``batch_size`` under the service), so a schedule sized from
    ``len(loader)`` ends with the epochs whatever batch the job starts at."""
    if s.joined or s.env is None:
        return s.global_batch
    return s.env.reference_batch or s.loader_batch or 1


def remaining_epochs(epochs: int) -> Iterator[int]:
    """The epochs still to train, resuming at the right one (and the loader at the right batch) after a
    resize or restart; when they are done the job is finished (rank 0 writes the final checkpoint)."""
    from dlsched.torch.session import current_session

    if isinstance(epochs, bool) or not isinstance(epochs, numbers.Integral) or epochs < 0:
        raise UserError(f"remaining_epochs: epochs={epochs!r} must be a non-negative integer")
    s = current_session()
    s.epochs = int(epochs)
    s.join()
    # resumed from an epoch's last step (a stop there, or a checkpoint): that epoch again, whose loader has no batch
    # left, so the code after it (an evaluation) runs; it was skipped, and a stop there lost the epoch's evaluation
    # (a replayed one is recorded once: ``train.replayed_records``)
    while s.epoch < epochs:
        yield s.epoch
        s.next_epoch()
    s.finish()
