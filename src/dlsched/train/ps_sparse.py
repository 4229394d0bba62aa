"""Sparse push/pull for a parameter server: only the embedding rows a batch touches travel.

An embedding table (``nn.Embedding`` / ``nn.EmbeddingBag`` weight) is read at a few rows per batch, and its
gradient is zero everywhere else; every other parameter is dense and always travels. So per batch a worker
pulls, from each server, the current values of the positions the batch reads (dense positions + the
touched rows' columns) and later pushes the gradient at exactly those positions (the parameter-server
access pattern of Li et al., OSDI 2014: push/pull of (key, value) lists). The rows a batch reads are the
tables' input indices, captured with forward pre-hooks on a no-grad forward before the pull.

The server still runs the dense optimizer step on its whole shard (a zero gradient off the pushed
positions; momentum keeps moving rows no batch touched), so the parameters equal the dense PS's: only the
communication changes. One exchange, worker -> server (point to point, in this order):
  header  float[4]   n_push, n_pull, samples (``DONE`` = no more batches), loss sum
  push    int64[n_push] shard-local positions, float[n_push] gradient x samples (sync) or mean gradient
  pull    int64[n_pull] shard-local positions
and the reply, server -> worker: float[n_pull + 2], the values then two numbers of the mode (SSP: slowest
clock and version; sync: the step's global mean loss and 0).
"""
from __future__ import annotations

import numpy as np
import torch
import torch.distributed as dist

TABLES = (torch.nn.Embedding, torch.nn.EmbeddingBag)


class RowLayout:
    """Where each flat parameter position lives (server, index in its shard), and which are embedding rows."""

    def __init__(self, model: torch.nn.Module, shards: list[torch.Tensor]):
        params = list(model.parameters())
        offsets = dict(zip(map(id, params), np.concatenate([[0], np.cumsum([p.numel() for p in params])])))
        total = sum(p.numel() for p in params)
        self.server = np.empty(total, dtype=np.int64)
        self.local = np.empty(total, dtype=np.int64)
        for s, idx in enumerate(shards):
            self.server[idx.numpy()] = s
            self.local[idx.numpy()] = np.arange(len(idx))
        self.tables = [m for m in model.modules() if isinstance(m, TABLES)]
        self.table_offset = [int(offsets[id(m.weight)]) for m in self.tables]
        dense = np.ones(total, dtype=bool)
        for m, off in zip(self.tables, self.table_offset):
            dense[off: off + m.weight.numel()] = False
        self.dense = np.flatnonzero(dense)
        self.servers = len(shards)

    def rows_read(self, model: torch.nn.Module, x) -> list[np.ndarray]:
        """Per table, the rows a forward pass on ``x`` reads (its input indices)."""
        seen: list[np.ndarray] = [np.empty(0, dtype=np.int64)] * len(self.tables)

        def capture(i):
            def hook(_module, inputs):
                seen[i] = np.unique(inputs[0].detach().reshape(-1).numpy())
            return hook

        by_model = {id(m): i for i, m in enumerate(self.tables)}
        handles = [m.register_forward_pre_hook(capture(by_model[id(m)])) for m in self.tables]
        try:
            with torch.no_grad():
                model(x)
        finally:
            for h in handles:
                h.remove()
        return seen

    def positions(self, rows: list[np.ndarray]) -> np.ndarray:
        """Flat positions a batch reading ``rows`` needs: every dense position and those rows' columns."""
        parts = [self.dense]
        for m, off, r in zip(self.tables, self.table_offset, rows):
            dim = m.weight.shape[1]
            parts.append((off + r[:, None] * dim + np.arange(dim)[None, :]).reshape(-1))
        return np.sort(np.concatenate(parts)).astype(np.int64)

    def split(self, positions: np.ndarray) -> list[tuple[np.ndarray, torch.Tensor]]:
        """Per server: the flat positions it owns among ``positions``, and their indices in its shard."""
        owner = self.server[positions]
        return [(positions[owner == s], torch.as_tensor(self.local[positions[owner == s]]))
                for s in range(self.servers)]


def send_exchange(dst: int, push_idx: torch.Tensor, push_vals: torch.Tensor, samples: float, loss_sum: float,
                  pull_idx: torch.Tensor) -> None:
    header = torch.tensor([float(len(push_idx)), float(len(pull_idx)), samples, loss_sum])
    parts = [header] + ([push_idx, push_vals.contiguous()] if len(push_idx) else []) + ([pull_idx] if len(pull_idx) else [])
    for work in [dist.isend(t, dst=dst) for t in parts]:
        work.wait()


def recv_exchange(src: int | None) -> tuple[int, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """(sender rank, header, push positions, push values, pull positions); ``src`` None = from any rank."""
    header = torch.empty(4)
    sender = dist.recv(header, src=src)
    n_push, n_pull = int(header[0]), int(header[1])
    push_idx, push_vals, pull_idx = (torch.empty(0, dtype=torch.int64), torch.empty(0),
                                     torch.empty(0, dtype=torch.int64))
    if n_push:
        push_idx, push_vals = torch.empty(n_push, dtype=torch.int64), torch.empty(n_push)
        dist.recv(push_idx, src=sender)
        dist.recv(push_vals, src=sender)
    if n_pull:
        pull_idx = torch.empty(n_pull, dtype=torch.int64)
        dist.recv(pull_idx, src=sender)
    return sender, header, push_idx, push_vals, pull_idx
