"""One elastic data-parallel worker process (all-reduce mode).

The worker lives across generations: it builds the job once, then for each generation it is part
of, it joins a fresh process group (c10d over the coordinator's TCPStore, gloo on CPU, NCCL on GPU),
receives parameters and optimizer state by broadcast from rank 0 (stop-free resize) or loads the
checkpoint (after a worker died), trains synchronous steps, and leaves the group when the
coordinator raises the generation's stop flag. A generation starts training only once its ranks claim
its gate; the coordinator may cancel it before that (a SIGTERM while it forms), and then rank 0
checkpoints the state the group carried over, so a preemption at any moment loses nothing. The stop
decision, per-rank sample counts, loss and compute times ride in the same single all-reduce as the
gradients, so every rank stops after the same step without an extra round trip. Gradients live in
one flat buffer (``p.grad`` are views into it), so backward writes straight into the all-reduce buffer.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import time
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist

from dlsched.train import storage
from dlsched.train.data import PartitionTable, record_path, split_global_batch
from dlsched.train.devices import collective_backend
from dlsched.train.job import TrainJob, build_job
from dlsched.train.no_space import exits_no_space
from dlsched.train.peer_cut import CutWatch
from dlsched.train.polling import Backoff
from dlsched.train.protocol import (GATE_CANCEL, GATE_RUN, PROGRESS_QUEUE, STOP_PREEMPT, End, Held, Plan, Ready,
                                    arrived_key, end_key, gate_key, group_prefix, plan_key, ready_key, stop_key,
                                    survivor_key)
from dlsched.train.scaling import LrRamp, micro_batches, set_lr_compensated
from dlsched.train.store_client import connect_store

PG_TIMEOUT = timedelta(seconds=60)


def wait_key(store: dist.TCPStore, key: str, parent: int) -> bytes:
    """Block until ``key`` exists; exit quietly if the coordinator (our parent) is gone."""
    backoff = Backoff()
    while not store.check([key]):
        if os.getppid() != parent:
            sys.exit(3)
        backoff.sleep()
    return store.get(key)


def gather_ranks(store: dist.TCPStore, gen: int, world: int, parent: int, orphaned=sys.exit) -> bool:
    """Arrive, then wait until every rank of generation ``gen`` arrived, so that c10d's rendezvous (which cannot be
    interrupted) never waits on a missing rank; False when the coordinator cancels the generation meanwhile.
    ``orphaned(3)`` when the coordinator (our parent) is gone."""
    arrived, gate = arrived_key(gen), gate_key(gen)
    store.add(arrived, 1)
    backoff = Backoff()
    while store.add(arrived, 0) < world:
        if store.check([gate]) and store.get(gate) == GATE_CANCEL.encode():
            return False
        if os.getppid() != parent:
            orphaned(3)
        backoff.sleep()
    return True


def fault_slowdown(worker_id: int) -> float:
    """Fault injection for straggler tests and demos: DLSCHED_FAULT_SLOW_WORKER="wid:seconds" slows one worker."""
    spec = os.environ.get("DLSCHED_FAULT_SLOW_WORKER", "")
    wid, _, secs = spec.partition(":")
    return float(secs) if wid.strip() == str(worker_id) else 0.0


def pick_backend(devices: list[str]) -> tuple[str, torch.device]:
    """NCCL when every rank of the generation has its own GPU, else gloo on CPU — same code either way.

    ``devices``: each rank's device (``dlsched.train.devices``); this process sees its own first, as cuda:0.
    NCCL refuses two ranks of one communicator on the same device, hence one GPU per worker. A worker the
    Ray launcher started in a GPU bundle (``DLSCHED_GPU_PER_WORKER=1``, every rank of such a job) sees only
    the GPU Ray gave its bundle, as cuda:0, whatever the coordinator's (GPU-less) device list says.
    """
    if os.environ.get("DLSCHED_GPU_PER_WORKER") == "1" and torch.cuda.is_available():
        return "nccl", torch.device("cuda", 0)
    if collective_backend(devices, torch.cuda.is_available()) == "nccl":
        return "nccl", torch.device("cuda", 0)
    return "gloo", torch.device("cpu")


class Worker:
    def __init__(self, job: TrainJob, store: dist.TCPStore, worker_id: int, job_dir: Path):
        self.job, self.store, self.wid, self.job_dir = job, store, worker_id, Path(job_dir)
        self.parent = os.getppid()
        torch.manual_seed(job.seed)  # identical initial weights on every worker
        self.model = job.make_model()
        self.optimizer = job.make_optimizer(self.model)
        self.device = torch.device("cpu")
        self.record = None
        self.joined = False
        self.fault_slow_s = fault_slowdown(worker_id)

    # -- state transfer -------------------------------------------------------------------------
    def _state(self) -> dict:
        return {"model": self.model.state_dict(), "optim": self.optimizer.state_dict()}

    def _load_state(self, state: dict) -> None:
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optim"])

    def _attach_flat_grads(self, world: int) -> torch.Tensor:
        """One buffer: [all grads | n_samples, loss_sum, stop_flag | compute seconds per rank]."""
        params = [p for p in self.model.parameters() if p.requires_grad]
        total = sum(p.numel() for p in params)
        buf = torch.zeros(total + 3 + world, device=self.device)
        off = 0
        for p in params:
            p.grad = buf[off : off + p.numel()].view_as(p)
            off += p.numel()
        self.n_grad = total
        return buf

    # -- one generation ---------------------------------------------------------------------------
    def run(self, generation: int) -> None:
        while True:
            plan = Plan.from_json(wait_key(self.store, plan_key(generation), self.parent))
            if self.wid not in plan.wids:
                if self.joined:  # scaled in: leave
                    return
                generation += 1  # standby: stay prepared for a later generation
                continue
            self.joined = True
            finished = self.run_generation(plan)
            if finished:
                return
            generation += 1

    def run_generation(self, plan: Plan) -> bool:
        gen, rank, world = plan.generation, plan.wids.index(self.wid), len(plan.wids)
        self.checkpoints = storage.for_job(self.job_dir, plan.checkpoint_uri)
        t_join = time.perf_counter()
        backend, self.device = pick_backend(plan.devices)
        self.model.to(self.device)
        if not gather_ranks(self.store, gen, world, self.parent):
            return self._cancelled(plan, rank)
        dist.init_process_group(backend, store=dist.PrefixStore(group_prefix(gen), self.store),
                                rank=rank, world_size=world, timeout=PG_TIMEOUT)
        try:
            if plan.restore:
                self._load_state(storage.load(plan.restore, self.job.name))
            else:
                box = [self._state() if rank == 0 else None]
                dist.broadcast_object_list(box, src=0, device=self.device if backend == "nccl" else None)
                if rank != 0:
                    self._load_state(box[0])
            self.setup_s = time.perf_counter() - t_join  # new group + state broadcast: the stop-free pause's core
            if self.store.compare_set(gate_key(gen), "", GATE_RUN) != GATE_RUN.encode():
                return self._cancelled(plan, rank)
            with CutWatch(self.store, gen):   # a peer lost with its link: fail the step now, not at PG_TIMEOUT
                return self._train(plan, rank, world)
        finally:
            dist.destroy_process_group()

    def _cancelled(self, plan: Plan, rank: int) -> bool:
        """The job stops before this generation's first step: rank 0 checkpoints the state carried over from
        the previous generation (it lives only in memory), or nothing when the plan restored a checkpoint."""
        if rank == 0:
            if plan.carried:
                self._save(plan.step, PartitionTable.from_snapshot(plan.table), sum(plan.local_batches),
                           LrRamp(**plan.ramp), tuple(plan.epoch_loss))
            self.store.set(end_key(plan.generation),
                           End(finished=False, preempted=True, cancelled=True, step=plan.step).to_json())
        return True

    def _train(self, plan: Plan, rank: int, world: int) -> bool:
        job, gen = self.job, plan.generation
        if plan.record_samples and self.record is None:
            path = record_path(self.job_dir, self.wid)
            path.parent.mkdir(parents=True, exist_ok=True)
            self.record = open(path, "a", buffering=1)
        table = PartitionTable.from_snapshot(plan.table)
        step, ramp = plan.step, LrRamp(**plan.ramp)
        locals_ = plan.local_batches
        global_batch = sum(locals_)
        ep_loss, ep_n = plan.epoch_loss
        ckpt_every, stop = plan.ckpt_every, stop_key(gen)
        buf = self._attach_flat_grads(world)
        tail = buf[self.n_grad :]
        self.model.train()
        while True:
            if table.done:
                finished = self._epoch_end(table.epoch, ep_loss / max(ep_n, 1), rank)
                if finished:
                    if rank == 0:
                        self._save(step, table, global_batch, ramp, (0.0, 0), finished=True)
                        self.store.set(end_key(gen), End(finished=True, step=step).to_json())
                    return True
                table, ep_loss, ep_n = table.next_epoch(), 0.0, 0
            t_start = time.perf_counter()
            # what a peer's loss during this step rolls back to
            held = Held(step, table.snapshot(), [ep_loss, ep_n], self.optimizer.param_groups[0]["lr"])
            ids = table.take(global_batch)
            shares = split_global_batch(ids, locals_)
            mine = torch.as_tensor(shares[rank])
            set_lr_compensated(self.optimizer, ramp.lr(step))
            buf.zero_()  # the grads are views into it
            loss_sum, start = torch.zeros((), device=self.device), 0
            for size in micro_batches(len(mine), job.max_local_batch):
                chunk = mine[start : start + size]
                start += size
                if size == 0:
                    continue
                x, y = job.get_batch(chunk)
                loss = job.loss_fn(self.model(x.to(self.device)), y.to(self.device))
                (loss * size).backward()
                loss_sum += loss.detach() * size  # stays on the device: no sync per micro-batch
            if job.throttle_s or self.fault_slow_s:
                time.sleep(job.throttle_s + self.fault_slow_s)
            if self.device.type == "cuda":
                torch.cuda.synchronize()  # honest per-worker compute time for the straggler rule
            compute_s = time.perf_counter() - t_start
            flag = float(self.store.get(stop)) if rank == 0 and self.store.check([stop]) else 0.0
            stats = [float(len(mine)), 0.0, flag] + [0.0] * world
            stats[3 + rank] = compute_s
            tail.copy_(torch.tensor(stats))  # one host-to-device copy for all the step's scalars
            tail[1] += loss_sum
            if self.record is not None:  # before the commit: a step that never commits is rolled back with it
                self.record.write(json.dumps({"run": plan.run, "generation": gen, "step": step + 1,
                                              "ids": shares[rank].tolist()}) + "\n")
            try:
                dist.all_reduce(buf)
            except RuntimeError as e:   # a peer died (its node was lost): the step does not commit here
                self.store.set(survivor_key(gen, self.wid), dataclasses.replace(held, error=str(e)[:200]).to_json())
                return False            # wait for the coordinator's next plan, holding the last step's state
            reduced = tail.tolist()  # one device-to-host copy
            n_total = reduced[0]
            buf[: self.n_grad].div_(max(n_total, 1.0))
            self.optimizer.step()
            step += 1
            step_loss = reduced[1] / max(n_total, 1.0)
            ep_loss, ep_n = ep_loss + reduced[1], ep_n + int(n_total)
            if rank == 0:
                wall = time.perf_counter() - t_start
                times = reduced[3:]
                self.store.queue_push(PROGRESS_QUEUE, json.dumps({
                    "time": time.time(), "step": step, "epoch": table.epoch, "generation": gen,
                    "samples": table.trained, "loss": step_loss,
                    "samples_per_s": n_total / wall, "workers": world, "batch_size": global_batch,
                    "lr": self.optimizer.param_groups[0]["lr"],
                    "per_worker_samples_per_s": [len(s) / max(t, 1e-9) for s, t in zip(shares, times)],
                    "table": table.snapshot()["offsets"], "setup_s": self.setup_s}))
                self.setup_s = None
                if ckpt_every and step % ckpt_every == 0:
                    self._save(step, table, global_batch, ramp, (ep_loss, ep_n))
            if reduced[2] >= float(STOP_PREEMPT):  # the job is being stopped: checkpoint this step, leave
                if rank == 0:
                    if not (ckpt_every and step % ckpt_every == 0):
                        self._save(step, table, global_batch, ramp, (ep_loss, ep_n))
                    self.store.set(end_key(gen), End(finished=False, preempted=True, step=step).to_json())
                return True
            if reduced[2] > 0:
                if rank == 0:
                    self.store.set(end_key(gen), End(
                        finished=False, step=step, table=table.snapshot(), epoch_loss=[ep_loss, ep_n],
                        lr=self.optimizer.param_groups[0]["lr"]).to_json())
                return False

    def _epoch_end(self, epoch: int, mean_loss: float, rank: int) -> bool:
        job = self.job
        done = epoch + 1 >= job.epochs or (job.target_loss is not None and mean_loss <= job.target_loss)
        if rank == 0:
            self.store.queue_push(PROGRESS_QUEUE, json.dumps({"event": "epoch_end", "epoch": epoch, "mean_loss": mean_loss,
                                                         "time": time.time()}))
        return done

    def _save(self, step, table, global_batch, ramp, epoch_loss, finished=False) -> None:
        state = {**self._state(), "step": step, "table": table.snapshot(), "global_batch": global_batch,
                 "ramp": {"base_lr": ramp.base_lr, "k": ramp.k, "t0": ramp.t0, "T": ramp.T},
                 "epoch_loss": list(epoch_loss), "finished": finished}
        path = self.checkpoints.save(self.job.name, step, state)
        self.store.queue_push(PROGRESS_QUEUE, json.dumps({"event": "checkpoint", "step": step, "path": str(path),
                                                     "time": time.time()}))


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description="dlsched elastic worker (started by dlsched.train.run)")
    ap.add_argument("--store", required=True)
    ap.add_argument("--worker-id", type=int, required=True)
    ap.add_argument("--generation", type=int, required=True)
    ap.add_argument("--job-dir", required=True)
    ap.add_argument("--entry", required=True)
    ap.add_argument("--params", default="{}")
    ap.add_argument("--threads", type=int, default=0)
    args = ap.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    store = connect_store(args.store)
    with exits_no_space():   # its coordinator stops the job as out of disk, not as a worker lost
        job = build_job(args.entry, json.loads(args.params))
        worker = Worker(job, store, args.worker_id, Path(args.job_dir))
        # what this process really sees, for status.json (a GPU must never be shared, even after resizes)
        store.set(ready_key(args.worker_id), Ready(os.environ.get("CUDA_VISIBLE_DEVICES")).to_json())
        worker.run(args.generation)
    if worker.record is not None:
        worker.record.close()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)  # skip interpreter teardown: torch/gloo thread shutdown takes seconds on a loaded machine


if __name__ == "__main__":
    main()
