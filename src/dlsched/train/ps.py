"""Parameter-server mode: sharded parameters on PS ranks, synchronous or asynchronous updates.

The other coordination pattern of the taxonomy (Langer et al. §3.4, "sharded/distributed PS"),
beside the default all-reduce, so the Optimus PS speed model can be checked against real runs.
Ranks 0..P−1 are servers, P..P+W−1 workers, one torch.distributed (gloo) group over a TCPStore.
Parameter blocks go to servers by Optimus' PAA rule (algorithms.md §1.6). Each server owns its
shard's optimizer (SGD + momentum), so a worker only computes gradients.
* sync: per step every worker's gradient shard is summed on its server (``reduce``), the server
  updates and ``broadcast``s the shard back — numerically the same SGD as all-reduce.
* async: a worker ``send``s its gradient shards and ``recv``s fresh parameters; a server applies
  each gradient as it arrives (``recv`` from any source), so fast workers never wait for slow ones.
Fixed size (no resize); every worker sees its exactly-once share of each epoch.
"""
from __future__ import annotations

import json
import socket
import time
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from dlsched.train.data import PartitionTable, epoch_order, split_global_batch
from dlsched.train.job import build_job
from dlsched.train.scaling import local_batch_sizes

SMALL_FRACTION = 0.01


@dataclass(frozen=True)
class Chunk:
    """Positions ``start:end`` of parameter block ``block`` live on ``server``."""

    block: int
    start: int
    end: int
    server: int


def paa_assign(block_sizes: list[int], servers: int) -> list[Chunk]:
    """Optimus' parameter assignment: big blocks sliced to ≤ avg, medium best-fit, tiny to the least-requested server."""
    avg = sum(block_sizes) / servers
    assigned = np.zeros(servers)
    requests = np.zeros(servers, dtype=np.int64)
    chunks: list[Chunk] = []

    def place(block, start, end, server):
        assigned[server] += end - start
        requests[server] += 1
        chunks.append(Chunk(block, start, end, int(server)))

    for b in sorted(range(len(block_sizes)), key=lambda i: -block_sizes[i]):
        size = block_sizes[b]
        if size < SMALL_FRACTION * avg:
            place(b, 0, size, np.argmin(requests))
        elif size <= avg:
            room = avg - assigned
            fits = np.where(room >= size)[0]
            server = fits[np.argmin(room[fits])] if len(fits) else np.argmin(assigned)
            place(b, 0, size, server)
        else:
            step = int(np.ceil(avg))
            for start in range(0, size, step):
                place(b, start, min(size, start + step), np.argmin(assigned))
    return chunks


def shard_indices(model: torch.nn.Module, servers: int) -> list[torch.Tensor]:
    """Flat-vector positions each server owns."""
    sizes = [p.numel() for p in model.parameters()]
    offsets = np.concatenate([[0], np.cumsum(sizes)])
    per_server: list[list[np.ndarray]] = [[] for _ in range(servers)]
    for c in sorted(paa_assign(sizes, servers), key=lambda c: (c.block, c.start)):
        per_server[c.server].append(np.arange(offsets[c.block] + c.start, offsets[c.block] + c.end))
    return [torch.as_tensor(np.concatenate(x) if x else np.empty(0, dtype=np.int64)) for x in per_server]


def _flat_params(model) -> torch.Tensor:
    return torch.nn.utils.parameters_to_vector(model.parameters()).detach()


def _flat_grads(model) -> torch.Tensor:
    return torch.cat([(p.grad if p.grad is not None else torch.zeros_like(p)).reshape(-1) for p in model.parameters()])


def _local_grad(job, model, ids: np.ndarray) -> tuple[torch.Tensor, float]:
    """Sum over the samples of the per-sample gradients, and the summed loss."""
    model.zero_grad(set_to_none=False)
    if len(ids) == 0:
        return torch.zeros_like(_flat_params(model)), 0.0
    x, y = job.get_batch(torch.as_tensor(ids))
    loss = job.loss_fn(model(x), y)
    (loss * len(ids)).backward()
    return _flat_grads(model), float(loss.detach()) * len(ids)


def _process(rank: int, servers: int, workers: int, port: int, entry: str, params: dict, sync: bool,
             global_batch: int, out_dir: str) -> None:
    torch.set_num_threads(1)
    store = dist.TCPStore("127.0.0.1", port, is_master=rank == 0, wait_for_workers=False, timeout=timedelta(seconds=60))
    dist.init_process_group("gloo", store=store, rank=rank, world_size=servers + workers,
                            timeout=timedelta(seconds=120))
    job = build_job(entry, params)
    torch.manual_seed(job.seed)
    model = job.make_model()
    shards = shard_indices(model, servers)
    flat = _flat_params(model)
    lr = job.lr * global_batch / job.batch_size
    if not sync:
        lr = job.lr * (global_batch // workers) / job.batch_size  # each async update is one worker's batch
    log = []
    if rank < servers:
        shard = torch.nn.Parameter(flat[shards[rank]].clone())
        opt = torch.optim.SGD([shard], lr=lr, momentum=job.momentum, weight_decay=job.weight_decay)
        if sync:
            for _ in range(_sync_steps(job, global_batch)):
                for s in range(servers):  # every rank takes part in every server's reduce
                    buf = torch.zeros(len(shards[s]) + 2)
                    dist.reduce(buf, dst=s)
                    if s == rank:
                        mine = buf
                shard.grad = mine[:-2] / mine[-2]
                opt.step()
                for s in range(servers):
                    out = (torch.cat([shard.detach(), mine[-1:] / mine[-2]]) if s == rank
                           else torch.empty(len(shards[s]) + 1))
                    dist.broadcast(out, src=s)
        else:
            expected = sum(len(_async_batches(job, global_batch, workers, w)) for w in range(workers))
            buf = torch.empty(len(shards[rank]) + 1)
            for _ in range(expected):
                src = dist.recv(buf)
                shard.grad = buf[:-1] / buf[-1]
                opt.step()
                dist.send(shard.detach().clone(), dst=src)
    else:
        w = rank - servers
        if sync:
            locals_ = local_batch_sizes(global_batch, workers)
            for epoch in range(job.epochs):
                table = PartitionTable.fresh(job.num_samples, job.seed, epoch)
                while not table.done:
                    t0 = time.perf_counter()
                    mine = split_global_batch(table.take(global_batch), locals_)[w]
                    grad, loss_sum = _local_grad(job, model, mine)
                    stats = torch.tensor([float(len(mine)), loss_sum])
                    for s in range(servers):
                        dist.reduce(torch.cat([grad[shards[s]], stats]), dst=s)
                    for s in range(servers):
                        out = torch.empty(len(shards[s]) + 1)  # shard + the step's global mean loss
                        dist.broadcast(out, src=s)
                        flat[shards[s]] = out[:-1]
                    torch.nn.utils.vector_to_parameters(flat, model.parameters())
                    log.append({"loss": float(out[-1]), "samples": len(mine), "time": time.perf_counter() - t0,
                                "epoch": epoch})
        else:
            for epoch, ids in _async_batches(job, global_batch, workers, w):
                t0 = time.perf_counter()
                grad, loss_sum = _local_grad(job, model, ids)
                for s in range(servers):
                    dist.send(torch.cat([grad[shards[s]], torch.tensor([float(len(ids))])]), dst=s)
                for s in range(servers):
                    out = torch.empty(len(shards[s]))
                    dist.recv(out, src=s)
                    flat[shards[s]] = out
                torch.nn.utils.vector_to_parameters(flat, model.parameters())
                log.append({"loss": loss_sum / len(ids), "samples": len(ids), "time": time.perf_counter() - t0,
                            "epoch": epoch})
        Path(out_dir, f"ps-worker-{w}.json").write_text(json.dumps(log))
    dist.barrier()
    dist.destroy_process_group()


def _sync_steps(job, global_batch: int) -> int:
    return job.epochs * int(np.ceil(job.num_samples / global_batch))


def _async_batches(job, global_batch: int, workers: int, w: int) -> list[tuple[int, np.ndarray]]:
    """Worker w's exactly-once share of each epoch (positions w, w+W, …), in local batches."""
    b = max(1, global_batch // workers)
    out = []
    for epoch in range(job.epochs):
        share = epoch_order(job.num_samples, job.seed, epoch)[w::workers]
        out += [(epoch, share[i : i + b]) for i in range(0, len(share), b)]
    return out


def run_parameter_server(entry: str, params: dict, workers: int, servers: int, sync: bool, global_batch: int,
                         out_dir: Path) -> list[list[dict]]:
    """Train with W workers and P servers in real processes; return each worker's per-step log."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    with socket.socket() as s:  # a free port for rank 0's store; fork keeps start-up cheap (no re-import)
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.start_processes(_process, args=(servers, workers, port, entry, params, sync, global_batch, str(out_dir)),
                       nprocs=servers + workers, join=True, start_method="fork")
    return [json.loads((out_dir / f"ps-worker-{w}.json").read_text()) for w in range(workers)]
