"""One script process's place in an elastic job: group membership, the step boundary, state and progress.

A step is one batch of the ``ElasticDataLoader``; its boundary is the loader's next ``__next__``. There the
session commits the step (progress record, periodic checkpoint) and obeys the coordinator's stop flag, which
rode in the step's gradient all-reduce so every rank acts after the same step: a resize leaves the process
group and joins the next generation's (survivors keep their state, rank 0 broadcasts it to newcomers);
a preemption checkpoints and exits. Protocol: ``dlsched.train.protocol``; the worker it mirrors:
``dlsched.train.worker``.
"""
from __future__ import annotations

import gc
import json
import os
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from dlsched.errors import UserError
from dlsched.train import storage
from dlsched.train.data import PartitionTable, record_path, split_global_batch
from dlsched.train.protocol import (GATE_CANCEL, GATE_RUN, PROGRESS_QUEUE, SCRIPT_JOB, STOP_PREEMPT, End, Plan, Ready,
                                    WorkerEnv, arrived_key, end_key, gate_key, group_prefix, plan_key, ready_key,
                                    stop_key)
from dlsched.train.scaling import local_batch_sizes
from dlsched.train.worker import PG_TIMEOUT, connect_store, wait_key
from dlsched.torch.lr_rule import RAMP_STEPS, RULES, LrFactor, compensate_momentum, default_rule, target_factor
from dlsched.torch.noise import GradientNoiseEstimator

LRScheduler = torch.optim.lr_scheduler.LRScheduler
FLAG_POLL_S = 0.05  # rank 0 reads the stop flag at most this often: a resize waits at most this long for it
FLUSH_S = 0.25  # step records reach progress.jsonl at most this late


class Session:
    def __init__(self, env: WorkerEnv | None, lr_rule: str = "auto", ckpt_every: int | None = None):
        if lr_rule not in RULES:
            raise UserError(f"lr_rule={lr_rule!r}: expected one of {', '.join(RULES)}")
        self.env, self.lr_rule = env, lr_rule
        self.ckpt_every_set = ckpt_every  # None: the runtime's --ckpt-every (the plan's)
        self.ckpt_every = ckpt_every if ckpt_every is not None else 20
        self.store = connect_store(env.store) if env else None
        self.wid = env.worker_id if env else 0
        self.generation = env.generation if env else 0
        self.job_dir = Path(env.job_dir) if env else None
        self.parent = os.getppid()
        self.plan: Plan | None = None
        self.rank, self.world = 0, 1
        self.joined = False
        self.models: list = []  # ElasticDataParallel instances, in creation order
        self.objects: dict[str, Any] = {}  # name -> object with state_dict/load_state_dict
        self.hooked: set[int] = set()
        self.table: PartitionTable | None = None
        self.loader_batch: int | None = None
        self.requested_batch: int | None = None  # the scheduler's global batch; None = the loader's
        self.reference_batch: int | None = None
        self.epoch, self.epochs, self.step = 0, None, 0
        self.layout = 0  # bumped by every regroup: loaders rebuild their iterators
        self.open: dict | None = None  # the step whose batch is out
        self.metrics: dict[str, float] = {}
        self.noise = GradientNoiseEstimator()
        self.factor = LrFactor()
        self.reduced: list[float] | None = None  # the step's all-reduced extras (EDP's comm hook)
        self.step_lr: float | None = None
        self.setup_s: float | None = None
        self.record = None
        self.last_boundary = time.perf_counter()
        self.outbox: list[dict] = []  # records not yet pushed to the coordinator
        self.flushed = self.flag_checked = 0.0

    # -- registration ---------------------------------------------------------------------------------
    def register(self, name: str, obj: Any) -> None:
        if not (hasattr(obj, "state_dict") and hasattr(obj, "load_state_dict")):
            raise UserError(f"register({name!r}): {type(obj).__name__} has no state_dict/load_state_dict")
        self.objects[name] = obj
        if isinstance(obj, torch.optim.Optimizer) and id(obj) not in self.hooked:
            self.hooked.add(id(obj))
            obj.register_step_pre_hook(self._pre_step)
            obj.register_step_post_hook(self._post_step)

    def _discover(self) -> None:
        """Register every optimizer training a wrapped model, its LR schedulers and every GradScaler."""
        params = {id(p): i for m in self.models for i, p in enumerate(m.module.parameters())}
        known = {id(o) for o in self.objects.values()}
        optimizers, schedulers, scalers = [], [], []
        for obj in gc.get_objects():
            if id(obj) in known:
                continue
            kind = type(obj)
            if issubclass(kind, torch.optim.Optimizer):
                mine = [params[id(p)] for g in obj.param_groups for p in g["params"] if id(p) in params]
                if mine or not params:
                    optimizers.append((min(mine, default=0), obj))
            elif issubclass(kind, LRScheduler):
                schedulers.append(obj)
            elif issubclass(kind, torch.amp.GradScaler):
                scalers.append(obj)
        optimizers = [o for _, o in sorted(optimizers, key=lambda t: t[0])]
        for i, opt in enumerate(optimizers):
            self.register(f"optimizer{i}", opt)
            for j, sched in enumerate(s for s in schedulers if s.optimizer is opt):
                self.register(f"optimizer{i}.scheduler{j}.{type(sched).__name__}", sched)
        for i, scaler in enumerate(scalers):
            self.register(f"scaler{i}", scaler)

    def attach_loader(self, num_samples: int, batch_size: int, shuffle: bool, seed: int) -> None:
        if self.loader_batch is not None:
            raise UserError("ElasticDataLoader: one training loader per job (evaluate with a torch DataLoader)")
        self.loader_batch = batch_size
        if self.table is None:
            self.table = PartitionTable.fresh(num_samples, seed, self.epoch, shuffle=shuffle)
        elif self.table.num_samples != num_samples:
            raise UserError(f"ElasticDataLoader: dataset has {num_samples} samples, the job's checkpoint "
                            f"{self.table.num_samples}")

    # -- sizes ---------------------------------------------------------------------------------------
    @property
    def global_batch(self) -> int:
        return self.requested_batch or self.loader_batch or 1

    @property
    def local_batches(self) -> list[int]:
        if self.plan is not None and self.plan.local_batches is not None:
            return self.plan.local_batches
        return local_batch_sizes(self.global_batch, self.world)

    # -- group membership -----------------------------------------------------------------------------
    def join(self) -> None:
        """Enter the job's current generation (first call only): the state is registered by now."""
        if self.joined:
            return
        self._discover()
        if self.env is None:  # standalone: one worker, nothing to wait for
            if not dist.is_initialized():
                dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
            self.joined = True
            self._rebuild_models()
            self.last_boundary = time.perf_counter()
            return
        self.store.set(ready_key(self.wid), Ready(os.environ.get("CUDA_VISIBLE_DEVICES")).to_json())
        self._enter_next_plan()

    def _enter_next_plan(self) -> None:
        while True:
            plan = Plan.from_json(wait_key(self.store, plan_key(self.generation), self.parent))
            if self.wid in plan.wids:
                break
            if self.joined:  # scaled in
                self._exit()
            self.generation += 1  # standby: stay prepared for a later generation
        self._form_group(plan)

    def _form_group(self, plan: Plan) -> None:
        gen, rank, world = plan.generation, plan.wids.index(self.wid), len(plan.wids)
        started = time.perf_counter()
        self.plan, self.rank, self.world = plan, rank, world
        if not self._gather(gen, world):
            self._cancelled(plan)
        dist.init_process_group("gloo", store=dist.PrefixStore(group_prefix(gen), self.store), rank=rank,
                                world_size=world, timeout=PG_TIMEOUT)
        if plan.restore:
            self._load(storage.load(plan.restore, SCRIPT_JOB))
        else:
            box = [self._state() if rank == 0 else None]
            dist.broadcast_object_list(box, src=0)
            if rank != 0:
                self._load(box[0])
        self._adopt(plan)
        self._rebuild_models()
        self.setup_s = time.perf_counter() - started
        if self.store.compare_set(gate_key(gen), "", GATE_RUN) != GATE_RUN.encode():
            self._cancelled(plan)
        self.joined = True
        self.layout += 1
        self.last_boundary = time.perf_counter()
        if plan.record_samples and self.record is None:
            path = record_path(self.job_dir, self.wid)
            path.parent.mkdir(parents=True, exist_ok=True)
            self.record = open(path, "a", buffering=1)

    def _adopt(self, plan: Plan) -> None:
        self.step = plan.step
        if self.ckpt_every_set is None:
            self.ckpt_every = plan.ckpt_every
        if plan.table is not None:
            self.table = PartitionTable.from_snapshot(plan.table)
            self.epoch = self.table.epoch
        self.reference_batch = plan.reference_batch
        self.requested_batch = sum(plan.local_batches) if plan.local_batches else self.requested_batch
        if self.global_batch != self.factor.batch:
            self._retarget()

    def _gather(self, gen: int, world: int) -> bool:
        """Every rank arrives before c10d's uninterruptible rendezvous; False when the generation is cancelled."""
        self.store.add(arrived_key(gen), 1)
        while self.store.add(arrived_key(gen), 0) < world:
            if self.store.check([gate_key(gen)]) and self.store.get(gate_key(gen)) == GATE_CANCEL.encode():
                return False
            if os.getppid() != self.parent:
                self._exit(3)
            time.sleep(0.002)
        return True

    def _cancelled(self, plan: Plan) -> None:
        """Stopped before this generation's first step: rank 0 saves the state carried over in memory."""
        if plan.wids.index(self.wid) == 0:
            self._adopt(plan)
            if plan.carried:
                self._save()
            self._flush()
            self.store.set(end_key(plan.generation),
                           End(finished=False, preempted=True, cancelled=True, step=plan.step).to_json())
        self._exit()

    def _leave_group(self) -> None:
        for m in self.models:
            m._unwrap()
        dist.destroy_process_group()

    def _rebuild_models(self) -> None:
        for m in self.models:
            m._wrap(self.world)

    def _exit(self, code: int = 0) -> None:
        self._flush()
        if self.record is not None:
            self.record.close()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)  # skips the script's remaining code and torch's slow teardown

    # -- state -----------------------------------------------------------------------------------------
    def _reference(self) -> int:
        return self.reference_batch or self.loader_batch or self.global_batch

    def _state(self) -> dict:
        objects = {f"model{i}": m.module.state_dict() for i, m in enumerate(self.models)}
        objects.update({name: obj.state_dict() for name, obj in self.objects.items()})
        return {"objects": objects, "noise": self.noise.state_dict(), "factor": asdict(self.factor),
                "epoch": self.epoch, "requested_batch": self.requested_batch}

    def _load(self, state: dict) -> None:
        objects = state["objects"]
        for i, m in enumerate(self.models):
            m.module.load_state_dict(objects[f"model{i}"])
        for name, obj in self.objects.items():
            if name not in objects:
                raise UserError(f"the job's state has no {name!r} (registered here, not in the job's first run)")
            obj.load_state_dict(objects[name])
        self.noise.load_state_dict(state["noise"])
        self.factor = LrFactor(**state["factor"])
        self.epoch, self.requested_batch = state["epoch"], state["requested_batch"]
        if "table" in state:  # a checkpoint (a broadcast's table comes with the plan)
            self.step = state["step"]
            self.table = PartitionTable.from_snapshot(state["table"]) if state["table"] else self.table

    def _save(self, finished: bool = False) -> None:
        state = {**self._state(), "step": self.step, "table": self.table.snapshot() if self.table else None,
                 "global_batch": self.requested_batch, "ramp": None, "epoch_loss": [0.0, 0],
                 "finished": finished}
        path = storage.for_job(self.job_dir, self.plan and self.plan.checkpoint_uri).save(
            SCRIPT_JOB, self.step, state)
        self._emit({"event": "checkpoint", "step": self.step, "path": str(path), "time": time.time()})

    # -- LR rule ---------------------------------------------------------------------------------------
    def _rule(self) -> str:
        if self.lr_rule != "auto":
            return self.lr_rule
        opts = [o for o in self.objects.values() if isinstance(o, torch.optim.Optimizer)]
        return default_rule(opts[0]) if opts else "linear"

    def _retarget(self) -> None:
        rule, reference = self._rule(), self._reference()
        target = target_factor(rule, self.global_batch, reference, self.noise)
        sgd = any(isinstance(o, torch.optim.SGD) for o in self.objects.values())
        self.factor = self.factor.retarget(self.step, target, RAMP_STEPS if rule == "linear" and sgd else 0,
                                           self.global_batch)
        if self.rank == 0 and (target != 1.0 or self.factor.start != 1.0):
            self._emit({"event": "lr_rule", "time": time.time(), "rule": rule, "from_batch": reference,
                        "to_batch": self.global_batch, "factor": target, "ramp_steps": self.factor.ramp})

    def _pre_step(self, optimizer, args, kwargs) -> None:
        f = self.factor.at(self.step)
        if isinstance(optimizer, torch.optim.SGD):
            compensate_momentum(optimizer, self.factor.at(self.step - 1), f)
        self._saved_lrs = [g["lr"] for g in optimizer.param_groups]
        for g in optimizer.param_groups:
            g["lr"] = g["lr"] * f
        self.step_lr = float(optimizer.param_groups[0]["lr"])
        for m in self.models:
            m._measure_before_step(self)

    def _post_step(self, optimizer, args, kwargs) -> None:
        for g, lr in zip(optimizer.param_groups, self._saved_lrs):
            g["lr"] = lr

    # -- the step boundary -----------------------------------------------------------------------------
    def begin_step(self) -> list[int]:
        """Take the next global batch from the table; this rank's sample ids."""
        ids = self.table.take(self.global_batch)
        mine = split_global_batch(ids, self.local_batches)[self.rank].tolist()
        if self.env is not None and os.getppid() != self.parent:
            self._exit(3)  # the coordinator is gone (killed): an orphan must not keep training
        flag, now = 0.0, time.perf_counter()
        if self.store is not None and self.rank == 0 and now - self.flag_checked >= FLAG_POLL_S:
            self.flag_checked = now  # a store round trip per step would cost more than the step on small models
            if self.store.check([stop_key(self.generation)]):
                flag = float(self.store.get(stop_key(self.generation)))
        self.open = {"flag": flag, "started": time.perf_counter(), "n": len(ids), "share": len(mine)}
        self.reduced = None
        if self.record is not None:  # before the all-reduce: a step that never commits is rolled back with it
            self.record.write(json.dumps({"run": self.plan.run, "generation": self.generation, "step": self.step + 1,
                                          "ids": mine}) + "\n")
        return mine

    def extras(self, step_open: dict | None) -> torch.Tensor:
        """[stop flag, this rank's |g_local|² (set by EDP), compute seconds per rank] for the all-reduce."""
        out = torch.zeros(2 + self.world)
        if step_open is not None:
            out[0] = step_open["flag"]
            out[2 + self.rank] = time.perf_counter() - step_open["started"]
        return out

    def boundary(self) -> None:
        """Commit the open step: record it, checkpoint when due, then obey the stop flag."""
        if self.open is None:
            return
        step_open, self.open = self.open, None
        self.step += 1
        reduced = self.reduced
        if reduced is None:  # no wrapped backward this step: one small all-reduce of its own
            tail = self.extras(step_open)
            if self.world > 1:
                dist.all_reduce(tail)
            reduced = tail.tolist()
        wall = time.perf_counter() - self.last_boundary  # data loading included: the step as the job sees it
        if self.rank == 0:
            self._emit(self._step_record(step_open["n"], wall, reduced[2:]))
        if self.job_dir is not None and self.ckpt_every and self.step % self.ckpt_every == 0 and self.rank == 0:
            self._save()
        flag = reduced[0]
        if flag >= float(STOP_PREEMPT):
            if self.rank == 0:
                if not (self.ckpt_every and self.step % self.ckpt_every == 0):
                    self._save()
                self._flush()
                self.store.set(end_key(self.generation), End(finished=False, preempted=True, step=self.step).to_json())
            self._exit()
        if flag > 0:
            if self.rank == 0:
                self._flush()
                self.store.set(end_key(self.generation), End(
                    finished=False, step=self.step, table=self.table.snapshot() if self.table else None,
                    epoch_loss=[0.0, 0], lr=self.step_lr).to_json())
            self._leave_group()
            self.generation += 1
            self._enter_next_plan()
        self.last_boundary = time.perf_counter()

    def _step_record(self, n: int, wall: float, times: list[float]) -> dict:
        shares = self.local_batches
        noise = None
        if self.noise.measured:
            ref = self._reference()
            noise = {"sqr": max(self.noise.sqr, 0.0), "var": self.noise.variance(ref), "reference_batch": ref}
        table = self.table
        return {"time": time.time(), "step": self.step, "epoch": self.epoch, "generation": self.generation,
                "samples": table.epoch * table.num_samples + table.consumed, "loss": self.metrics.pop("loss", None),
                "samples_per_s": n / max(wall, 1e-9), "workers": self.world, "batch_size": self.global_batch,
                "lr": self.step_lr, "per_worker_samples_per_s": [s / max(t, 1e-9) for s, t in zip(shares, times)],
                "table": table.snapshot()["offsets"], "setup_s": self.setup_s, "epochs": self.epochs,
                "total_samples": table.num_samples * self.epochs if self.epochs else None,
                "grad_noise": noise, "metrics": self._take_metrics()}

    def _take_metrics(self) -> dict:
        self.setup_s = None
        out, self.metrics = self.metrics, {}
        return out

    # -- epochs and reports ----------------------------------------------------------------------------
    def next_epoch(self) -> None:
        """Every rank moves on together; the table advances before the boundary, so an End carries it."""
        self.table = self.table.next_epoch() if self.table is not None else None
        self.epoch += 1
        if self.rank == 0:
            self._emit({"event": "epoch_end", "epoch": self.epoch - 1, "time": time.time()})
        self.boundary()

    def finish(self) -> None:
        self.boundary()
        if self.env is not None and self.rank == 0:
            self._save(finished=True)
            self._flush()
            self.store.set(end_key(self.generation), End(finished=True, step=self.step).to_json())

    def report(self, metrics: dict[str, float]) -> None:
        if self.rank != 0:
            return
        if self.open is not None:
            self.metrics.update(metrics)
        else:
            self._emit({"event": "metrics", "time": time.time(), "step": self.step, "epoch": self.epoch,
                        "metrics": metrics})

    def _emit(self, record: dict) -> None:
        if self.store is None:  # standalone: the user's terminal, every event and every 50th step
            if "event" not in record and record["step"] % 50 and not record["metrics"]:
                return
            shown = {k: v for k, v in record.items() if k in ("event", "step", "epoch", "loss", "lr", "metrics")}
            print("dlsched:", json.dumps(shown), flush=True)
            return
        self.outbox.append(record)
        if "event" in record or time.perf_counter() - self.flushed >= FLUSH_S:
            self._flush()

    def _flush(self) -> None:
        """Step records go to the coordinator in batches (one store round trip), events at once."""
        if self.outbox and self.store is not None:
            self.store.queue_push(PROGRESS_QUEUE, json.dumps(self.outbox))
        self.outbox, self.flushed = [], time.perf_counter()


_session: Session | None = None


def init(lr_rule: str = "auto", ckpt_every: int | None = None) -> Session:
    """Join the job's elastic group (standalone outside the scheduler). ``lr_rule``: auto, linear, sqrt,
    adascale or none (``dlsched.torch.lr_rule``); ``ckpt_every``: steps between checkpoints (0 = never;
    default: the runtime's ``--ckpt-every``)."""
    global _session
    if _session is None:
        env = WorkerEnv.from_env(os.environ)
        if env is not None and env.threads:
            torch.set_num_threads(env.threads)
        _session = Session(env, lr_rule=lr_rule, ckpt_every=ckpt_every)
    return _session


def current_session() -> Session:
    return _session if _session is not None else init()
