"""Parameter-server training: sharded parameters on server ranks; synchronous, bounded-staleness or async updates.

The centralised optimisation of the taxonomy (Langer et al. §3.2–3.4: "sharded/distributed PS", scheduling
sync / bounded-async (SSP, slack s) / async; algorithms.md §5). One gloo group per generation: ranks 0..P−1
are servers, P..P+W−1 workers. Parameter blocks go to servers by Optimus' PAA rule (algorithms.md §1.6);
each server owns its shard's optimizer (SGD + momentum), so a worker only computes gradients.

* sync: per step every worker's gradient shard is summed on its server (``reduce``); the server updates and
  ``broadcast``s the shard back — numerically the SGD of all-reduce at global batch M.
* ssp:s / async: a worker claims its next local batch (M // W samples) from a shared cursor in the TCPStore
  (``add`` is atomic: each batch is claimed once), pushes its gradient shards and waits for fresh shards.
  A server applies each gradient as it arrives; its reply to a worker whose clock is more than s pushes
  ahead of the slowest still-active worker is held until that worker catches up (SSP, Ho et al. 2013;
  s = 0 is bulk-synchronous, async is s = ∞). The reply carries that minimum clock, so the bound is auditable.

Training runs in rounds of ``ckpt_every`` global batches. A round ends at a quiescent point (every claimed
batch applied): servers checkpoint their shard and momentum, server 0 commits the round (``ps_runner``)
and may end the generation for a resize. Records of a round count only once it is committed, so replaying
an uncommitted round after a crash trains each sample of an epoch exactly once into the final model.
"""
from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist

from dlsched.errors import UserError
from dlsched.train.checkpoint import checkpoint_path, load_checkpoint, save_checkpoint
from dlsched.train.data import epoch_order, split_global_batch
from dlsched.train.job import build_job
from dlsched.train.ps_sparse import RowLayout, recv_exchange, send_exchange
from dlsched.train.scaling import local_batch_sizes

SMALL_FRACTION = 0.01
DONE = -1.0  # a push with this sample count says "no more batches this round"


@dataclass(frozen=True)
class SyncMode:
    """``staleness`` None = synchronous reduce/broadcast; an int s = SSP with slack s; inf = asynchronous."""

    staleness: float | None

    @classmethod
    def parse(cls, text: str) -> "SyncMode":
        if text == "sync":
            return cls(None)
        if text == "async":
            return cls(math.inf)
        if text.startswith("ssp:") and text[4:].isdigit():
            return cls(int(text[4:]))
        raise UserError(f"sync: expected sync, ssp:<staleness> (an integer >= 0) or async, got {text!r}")

    def __str__(self) -> str:
        if self.staleness is None:
            return "sync"
        return "async" if math.isinf(self.staleness) else f"ssp:{int(self.staleness)}"


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


@dataclass(frozen=True)
class Generation:
    """What one group of processes runs: from committed round ``first_round`` until done or a resize."""

    entry: str
    params: dict
    servers: int
    workers: int
    mode: SyncMode
    global_batch: int
    round_batches: int  # global batches per round (= checkpoint interval)
    number: int
    first_round: int
    job_dir: str
    port: int
    throttle: dict  # worker index -> extra seconds per step (a deliberately slow worker)
    ckpt_servers: int = 0  # servers that wrote the checkpoint to restore (another count: re-sharded on load)
    sparse: bool = False  # push/pull only the embedding rows each batch reads (``ps_sparse``)
    store_host: str | None = None  # None: rank 0 hosts the TCPStore on loopback (forked group); else the supervisor does, there
    # global sample position where ``first_round`` starts: the committed rounds before it may have had another
    # global batch (a control.json batch change), so r x round size would skip or repeat samples
    first_position: int = 0
    reference_batch: int | None = None  # the global batch the job's lr is given at (the spec's); None = the job's
    replace_stragglers: bool = True  # sync/SSP: end the generation at a round whose commit flags one (``ps_stragglers``)

    @property
    def local_batch(self) -> int:
        return max(1, self.global_batch // self.workers)


def total_samples(job) -> int:
    return job.epochs * job.num_samples


def round_range(gen: Generation, job, r: int) -> tuple[int, int]:
    """Global sample positions (epoch-major: position g is sample order[g % N] of epoch g // N) of round r."""
    return round_span(gen, total_samples(job), r)


def round_span(gen: Generation, total: int, r: int) -> tuple[int, int]:
    """Round r's positions of ``total``, counted on from where this generation starts (``first_position``) at
    its own global batch."""
    size = gen.round_batches * gen.global_batch
    start = gen.first_position + (r - gen.first_round) * size
    return start, min(start + size, total)


def num_rounds(gen: Generation, job) -> int:
    """Rounds of the whole run: those committed before this generation plus the ones left at its batch."""
    left = max(0, total_samples(job) - gen.first_position)
    return gen.first_round + math.ceil(left / (gen.round_batches * gen.global_batch))


def sample_ids(job, start: int, end: int) -> np.ndarray:
    pos = np.arange(start, end)
    out = np.empty(len(pos), dtype=np.int64)
    for epoch in np.unique(pos // job.num_samples):
        sel = pos // job.num_samples == epoch
        out[sel] = epoch_order(job.num_samples, job.seed, int(epoch))[pos[sel] % job.num_samples]
    return out


def _flat_params(model) -> torch.Tensor:
    return torch.nn.utils.parameters_to_vector(model.parameters()).detach()


def _local_grad(job, model, ids: np.ndarray, batch=None) -> tuple[torch.Tensor, float]:
    """Mean gradient over the samples and the summed loss (``batch``: their inputs and targets, if read already)."""
    model.zero_grad(set_to_none=False)
    x, y = batch if batch is not None else job.get_batch(torch.as_tensor(ids))
    loss = job.loss_fn(model(x), y)
    loss.backward()
    grads = [(p.grad if p.grad is not None else torch.zeros_like(p)).reshape(-1) for p in model.parameters()]
    return torch.cat(grads), float(loss.detach()) * len(ids)


def run_rank(rank: int, gen: Generation, commit) -> None:
    """Body of one process of a generation (forked by ``ps_runner``); rank 0 calls
    ``commit(job_dir, gen, round, rounds) -> continue?`` once every server has saved a round."""
    torch.set_num_threads(1)
    P, W = gen.servers, gen.workers
    store = dist.TCPStore(gen.store_host or "127.0.0.1", gen.port, is_master=gen.store_host is None and rank == 0,
                          wait_for_workers=False, timeout=timedelta(seconds=120))
    dist.init_process_group("gloo", store=store, rank=rank, world_size=P + W, timeout=timedelta(seconds=120))
    job = build_job(gen.entry, gen.params)
    torch.manual_seed(job.seed)
    model = job.make_model()
    shards = shard_indices(model, P)
    flat = _flat_params(model)
    server, worker = (_SparseServer, _SparseWorker) if gen.sparse else (_Server, _Worker)
    role = (server(rank, gen, job, shards, flat[shards[rank]].clone()) if rank < P
            else worker(rank - P, gen, job, model, shards, store))
    r = gen.first_round
    while r < num_rounds(gen, job):
        role.publish()  # every worker starts the round from the servers' parameters
        role.run_round(r)
        dist.barrier()  # quiescent: every claimed batch of round r is applied
        role.save(r)
        dist.barrier()
        go = torch.tensor([0])
        if rank == 0:
            go[0] = commit(Path(gen.job_dir), gen, r, num_rounds(gen, job))
        dist.broadcast(go, src=0)
        r += 1
        if not go.item():
            break
    dist.barrier()
    dist.destroy_process_group()


def restore_flat(job_dir: Path, job, servers: int, r: int) -> tuple[torch.Tensor, torch.Tensor, int]:
    """The whole parameter and momentum vectors of committed round r, from the shards of the ``servers``
    that wrote it (so a generation with another server count re-shards them), and the most updates any applied."""
    torch.manual_seed(job.seed)
    flat = _flat_params(job.make_model())
    momentum, version = torch.zeros_like(flat), 0
    for s, idx in enumerate(shard_indices(job.make_model(), servers)):
        state = load_checkpoint(checkpoint_path(Path(job_dir) / "ckpt" / f"server-{s}", r), job.name)
        flat[idx], momentum[idx] = state["shard"], state["momentum"]
        version = max(version, int(state["version"]))
    return flat, momentum, version


def server_lr(gen: Generation, job) -> float:
    """The servers' SGD learning rate: the job's lr, given at the reference batch, scaled linearly to the batch of
    one update (as the all-reduce runtime's LR rule): the global batch in sync, one worker's batch in SSP/async."""
    batch = gen.global_batch if gen.mode.staleness is None else gen.local_batch
    return job.lr * batch / (gen.reference_batch or job.batch_size)


def _exchange_shards(shards: list[torch.Tensor], own: int | None, shard: torch.Tensor | None) -> list[torch.Tensor]:
    """Every server broadcasts its shard to all ranks (collectives need every rank, sized per server)."""
    out = []
    for s, idx in enumerate(shards):
        buf = shard.detach().clone() if s == own else torch.empty(len(idx))
        dist.broadcast(buf, src=s)
        out.append(buf)
    return out


class _Server:
    def __init__(self, rank: int, gen: Generation, job, shards: list[torch.Tensor], shard: torch.Tensor):
        self.rank, self.gen, self.job, self.shards = rank, gen, job, shards
        self.shard = torch.nn.Parameter(shard)
        # sync: one update per global batch M; SSP/async: one per worker batch (linear LR scaling either way)
        self.opt = torch.optim.SGD([self.shard], lr=server_lr(gen, job), momentum=job.momentum,
                                   weight_decay=job.weight_decay)
        self.version = 0
        if gen.first_round > 0:
            self._load(gen.first_round - 1)

    def _dir(self) -> Path:
        return Path(self.gen.job_dir) / "ckpt" / f"server-{self.rank}"

    def _load(self, r: int) -> None:
        flat, momentum, self.version = restore_flat(Path(self.gen.job_dir), self.job, self.gen.ckpt_servers, r)
        with torch.no_grad():
            self.shard.copy_(flat[self.shards[self.rank]])
        self.opt.state[self.shard]["momentum_buffer"] = momentum[self.shards[self.rank]].clone()

    def save(self, r: int) -> None:
        buf = self.opt.state.get(self.shard, {}).get("momentum_buffer")
        save_checkpoint(self._dir(), self.job.name, r, {
            "shard": self.shard.detach().clone(), "version": self.version,
            "momentum": buf if buf is not None else torch.zeros_like(self.shard)})

    def publish(self) -> None:
        _exchange_shards(self.shards, self.rank, self.shard)

    def _apply(self, grad: torch.Tensor) -> None:
        self.shard.grad = grad
        self.opt.step()
        self.version += 1

    def run_round(self, r: int) -> None:
        if self.gen.mode.staleness is None:
            return self._sync_round(r)
        P, W, s = self.gen.servers, self.gen.workers, self.gen.mode.staleness
        n = len(self.shard)
        clock, done, held, sends = np.zeros(W, dtype=np.int64), set(), [], []
        while len(done) < W:
            buf = torch.empty(n + 2)
            w = dist.recv(buf) - P
            if buf[n] == DONE:
                done.add(w)
            else:
                self._apply(buf[:n])
                clock[w] += 1
                held.append(w)
            active = [clock[v] for v in range(W) if v not in done]
            slowest = min(active) if active else int(clock.max())
            for v in [v for v in held if clock[v] - slowest <= s]:
                held.remove(v)
                msg = torch.cat([self.shard.detach(), torch.tensor([float(slowest), float(self.version)])])
                sends.append((dist.isend(msg, dst=P + v), msg))
        for work, _ in sends:
            work.wait()

    def _sync_round(self, r: int) -> None:
        n = len(self.shard)
        for _ in range(_sync_steps(self.gen, self.job, r)):
            for s, idx in enumerate(self.shards):  # every rank takes part in every server's reduce
                buf = torch.zeros(len(idx) + 2)
                dist.reduce(buf, dst=s)
                if s == self.rank:
                    mine = buf
            # each worker sent (mean grad · its samples, its samples, its loss sum): divide by the step's samples
            self._apply(mine[:n] / mine[n])
            for s, idx in enumerate(self.shards):
                out = (torch.cat([self.shard.detach(), mine[n + 1:] / mine[n]]) if s == self.rank
                       else torch.empty(len(idx) + 1))
                dist.broadcast(out, src=s)


class _Worker:
    def __init__(self, w: int, gen: Generation, job, model, shards: list[torch.Tensor], store):
        self.w, self.gen, self.job, self.model, self.shards, self.store = w, gen, job, model, shards, store
        self.flat = _flat_params(model)
        # "w": this worker's slot in every generation; "w@g": its process in generation g alone (a replacement is not)
        self.throttle_s = float(gen.throttle.get(str(w), 0.0)) + float(gen.throttle.get(f"{w}@{gen.number}", 0.0)) \
            + job.throttle_s
        self.compute_s = 0.0   # seconds computing since the last record: a straggler's own time, not its peers' waits
        path = records_path(Path(gen.job_dir), gen.number, w)
        path.parent.mkdir(parents=True, exist_ok=True)
        self.records = open(path, "a")

    def publish(self) -> None:
        for idx, shard in zip(self.shards, _exchange_shards(self.shards, None, None)):
            self.flat[idx] = shard
        self._load_flat()

    def _load_flat(self) -> None:
        torch.nn.utils.vector_to_parameters(self.flat, self.model.parameters())

    def _grad(self, ids: np.ndarray, batch=None) -> tuple[torch.Tensor, float]:
        t0 = time.perf_counter()
        try:
            if self.throttle_s:
                time.sleep(self.throttle_s)
            if len(ids) == 0:
                return torch.zeros_like(self.flat), 0.0
            return _local_grad(self.job, self.model, ids, batch)
        finally:
            self.compute_s += time.perf_counter() - t0

    def _record(self, **rec) -> None:
        # ``done``: when the batch was applied (wall clock), so a round's throughput can leave out start-up
        self.records.write(json.dumps({"worker": self.w, **rec, "compute": self.compute_s, "done": time.time()}) + "\n")
        self.records.flush()
        self.compute_s = 0.0

    def run_round(self, r: int) -> None:
        if self.gen.mode.staleness is None:
            self._sync_round(r)
        else:
            self._async_round(r)

    def _sync_round(self, r: int) -> None:
        start, end = round_range(self.gen, self.job, r)
        sizes = local_batch_sizes(self.gen.global_batch, self.gen.workers)
        for t in range(_sync_steps(self.gen, self.job, r)):
            t0 = time.perf_counter()
            lo = start + t * self.gen.global_batch
            mine = split_global_batch(sample_ids(self.job, lo, min(lo + self.gen.global_batch, end)), sizes)[self.w]
            grad, loss_sum = self._grad(mine)
            stats = torch.tensor([float(len(mine)), loss_sum])
            for s, idx in enumerate(self.shards):
                dist.reduce(torch.cat([grad[idx] * len(mine), stats]), dst=s)
            for s, idx in enumerate(self.shards):
                out = torch.empty(len(idx) + 1)  # shard + the step's global mean loss
                dist.broadcast(out, src=s)
                self.flat[idx] = out[:-1]
            self._load_flat()
            self._record(round=r, step=t, ids=mine.tolist(), loss_sum=loss_sum, loss=float(out[-1]),
                         pushed=len(self.flat), pulled=len(self.flat), time=time.perf_counter() - t0)

    def _async_round(self, r: int) -> None:
        start, end = round_range(self.gen, self.job, r)
        b, key = self.gen.local_batch, f"claim/{self.gen.number}/{r}"
        clock = 0
        while True:
            claimed = self.store.add(key, b)  # atomic: this worker alone trains positions claimed-b .. claimed
            lo = start + claimed - b
            if lo >= end:
                break
            t0 = time.perf_counter()
            ids = sample_ids(self.job, lo, min(start + claimed, end))
            grad, loss_sum = self._grad(ids)
            pushes = [torch.cat([grad[idx], torch.tensor([float(len(ids)), loss_sum])]) for idx in self.shards]
            works = [dist.isend(m, dst=s) for s, m in enumerate(pushes)]
            for work in works:
                work.wait()
            clock += 1
            slowest, version = [], []
            for s, idx in enumerate(self.shards):  # SSP: a server holds this reply while we run too far ahead
                out = torch.empty(len(idx) + 2)
                dist.recv(out, src=s)
                self.flat[idx] = out[:-2]
                slowest.append(int(out[-2]))
                version.append(int(out[-1]))
            self._load_flat()
            self._record(round=r, step=clock, ids=ids.tolist(), loss_sum=loss_sum, loss=loss_sum / len(ids),
                         clock=clock, slowest=min(slowest), version=version, pushed=len(self.flat),
                         pulled=len(self.flat), time=time.perf_counter() - t0)
        done = [torch.cat([torch.zeros(len(idx)), torch.tensor([DONE, 0.0])]) for idx in self.shards]
        for work in [dist.isend(m, dst=s) for s, m in enumerate(done)]:
            work.wait()

    def save(self, r: int) -> None:  # workers hold no state: the servers' shards are the model
        self.records.flush()


def records_path(job_dir: Path, generation: int, worker: int) -> Path:
    return Path(job_dir) / "ps" / "records" / f"gen-{generation:04d}-worker-{worker:03d}.jsonl"


def _sync_steps(gen: Generation, job, r: int) -> int:
    start, end = round_range(gen, job, r)
    return math.ceil((end - start) / gen.global_batch)


class _SparseServer(_Server):
    """A server that receives only the pushed positions and sends only the pulled ones (``ps_sparse``)."""

    def publish(self) -> None:  # workers pull what each batch reads
        pass

    def _reply(self, w: int, pull: torch.Tensor, a: float, b: float):
        msg = torch.cat([self.shard.detach()[pull], torch.tensor([a, b])])
        return dist.isend(msg, dst=self.gen.servers + w), msg

    def run_round(self, r: int) -> None:
        P, W, n = self.gen.servers, self.gen.workers, len(self.shard)
        if self.gen.mode.staleness is None:  # every worker's exchange t, summed; one exchange more than steps
            for _ in range(_sync_steps(self.gen, self.job, r) + 1):
                total, samples, loss_sum, pulls = torch.zeros(n), 0.0, 0.0, {}
                for v in range(W):
                    _, header, idx, vals, pulls[v] = recv_exchange(P + v)
                    total.index_add_(0, idx, vals)
                    samples, loss_sum = samples + float(header[2]), loss_sum + float(header[3])
                if samples:
                    self._apply(total / samples)
                sends = [self._reply(v, pull, loss_sum / samples if samples else 0.0, 0.0) for v, pull in pulls.items()]
                for work, _ in sends:
                    work.wait()
            return
        s = self.gen.mode.staleness
        clock, done, held, sends, pulls = np.zeros(W, dtype=np.int64), set(), [], [], {}
        while len(done) < W:
            sender, header, idx, vals, pull = recv_exchange(None)
            w = sender - P
            if float(header[2]) == DONE:
                done.add(w)
            else:
                if len(idx):
                    grad = torch.zeros(n)
                    grad[idx] = vals
                    self._apply(grad)
                    clock[w] += 1
                pulls[w] = pull
                held.append(w)
            active = [clock[v] for v in range(W) if v not in done]
            slowest = min(active) if active else int(clock.max())
            for v in [v for v in held if clock[v] - slowest <= s]:
                held.remove(v)
                sends.append(self._reply(v, pulls.pop(v), float(slowest), float(self.version)))
        for work, _ in sends:
            work.wait()


class _SparseWorker(_Worker):
    """Per batch: pull the positions it reads, compute, push the gradient there with the next batch's pull."""

    def __init__(self, *args):
        super().__init__(*args)
        self.layout = RowLayout(self.model, self.shards)

    def publish(self) -> None:  # the next pull brings every position a batch reads
        pass

    def _batches(self, r: int):
        start, end = round_range(self.gen, self.job, r)
        if self.gen.mode.staleness is None:
            sizes = local_batch_sizes(self.gen.global_batch, self.gen.workers)
            for t in range(_sync_steps(self.gen, self.job, r)):
                lo = start + t * self.gen.global_batch
                yield split_global_batch(sample_ids(self.job, lo, min(lo + self.gen.global_batch, end)), sizes)[self.w]
            return
        b, key = self.gen.local_batch, f"claim/{self.gen.number}/{r}"
        while (claimed := self.store.add(key, b)) - b + start < end:  # atomic: this worker alone trains them
            yield sample_ids(self.job, start + claimed - b, min(start + claimed, end))

    def run_round(self, r: int) -> None:
        P, L, sync = self.gen.servers, self.layout, self.gen.mode.staleness is None
        batches = self._batches(r)
        ids, push, clock, rows = next(batches, None), None, 0, 0
        none = (np.empty(0, dtype=np.int64), torch.empty(0, dtype=torch.int64))
        while True:
            t0 = time.perf_counter()
            batch = self.job.get_batch(torch.as_tensor(ids)) if ids is not None and len(ids) else None
            if batch is not None:
                read = L.rows_read(self.model, batch[0])
                rows, pos = sum(len(x) for x in read), L.positions(read)
            else:
                rows, pos = 0, (L.dense if ids is not None else np.empty(0, dtype=np.int64))
            owned = L.split(pos) if len(pos) else [none] * P
            for s in range(P):
                idx, vals, samples, loss_sum = push[s] if push else (none[1], torch.empty(0), 0.0, 0.0)
                send_exchange(s, idx, vals, samples, loss_sum, owned[s][1])
            replies = []
            for s in range(P):
                out = torch.empty(len(owned[s][1]) + 2)
                dist.recv(out, src=s)
                self.flat[owned[s][0]] = out[:-2]
                replies.append(out[-2:])
            if push:
                clock += 1
                done_ids, done_loss, done_rows, moved, took = push[P]
                info = ({"loss": float(replies[0][0])} if sync else
                        {"loss": done_loss / max(len(done_ids), 1), "clock": clock,
                         "slowest": min(int(x[0]) for x in replies), "version": [int(x[1]) for x in replies]})
                self._record(round=r, step=clock - (1 if sync else 0), ids=done_ids.tolist(), loss_sum=done_loss,
                             rows=done_rows, pushed=moved, pulled=moved, time=took, **info)
            if ids is None:
                break
            self._load_flat()
            grad, loss_sum = self._grad(ids, batch)
            vals = grad[torch.as_tensor(pos)] * (len(ids) if sync else 1)
            push = [(owned[s][1], vals[torch.as_tensor(L.server[pos] == s)], float(len(ids)), loss_sum)
                    for s in range(P)] + [(ids, loss_sum, rows, len(pos), time.perf_counter() - t0)]
            ids = next(batches, None)
        if not sync:
            for s in range(P):
                send_exchange(s, none[1], torch.empty(0), DONE, 0.0, none[1])
