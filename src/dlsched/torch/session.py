"""One script process's place in an elastic job: group membership, the step boundary, state and progress.

A step is one batch of the ``ElasticDataLoader``; its boundary is the loader's next ``__next__``. There the
session commits the step (progress record, periodic checkpoint) and obeys the coordinator's stop flag, which
rode in a sync step's all-reduce of the step scalars so every rank acts after the same step (with several
workers, one step in about ``SYNC_S`` is a sync step; each names the next, so the ranks agree without
asking): a resize leaves the process group and joins the next generation's (survivors keep their state, rank 0 broadcasts it to newcomers);
a preemption checkpoints and exits. Protocol: ``dlsched.train.protocol``; the worker it mirrors:
``dlsched.train.worker``.
"""
from __future__ import annotations

import atexit
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
from dlsched.train.data import PartitionTable
from dlsched.train.protocol import SCRIPT_JOB, STOP_PREEMPT, End, Plan, WorkerEnv, end_key
from dlsched.train.scaling import local_batch_sizes
from dlsched.train.store_client import connect_store
from dlsched.torch.accumulation import MicroBatches
from dlsched.torch.adaptive_batch import AdaptiveBatch
from dlsched.torch.epoch_loss import EpochLoss
from dlsched.torch.flag_watch import FlagWatch
from dlsched.torch.lr_control import LrControl
from dlsched.torch.lr_rule import RULES, LrFactor
from dlsched.torch.membership import GroupMembership
from dlsched.torch.noise import GradientNoiseEstimator
from dlsched.torch.outbox import ProgressOutbox
from dlsched.torch.registry import StateRegistry
from dlsched.torch.rng_state import BATCH, EPOCH, RankStreams
from dlsched.torch.lr_plan import LrPlanner
from dlsched.torch.schedule_pace import next_epoch_table, pace_schedulers
from dlsched.torch.step_record import StepRecords
from dlsched.torch.step_scalars import StepScalars
from dlsched.torch.sync_cadence import SyncCadence



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
        self.lr_control = LrControl(self)
        self.micro = MicroBatches()  # the open step's micro-batches (gradient accumulation)
        self.registry = StateRegistry(self.lr_control.pre_step, self.lr_control.post_step, self.micro)
        self.models, self.objects = self.registry.models, self.registry.objects
        self.membership = GroupMembership(self)
        self.progress = ProgressOutbox(env.store if env else None)
        self.table: PartitionTable | None = None
        self.loader_batch: int | None = None
        self.epoch_limit: int | None = None   # the loader's steps_per_epoch, in samples at its batch
        self.requested_batch: int | None = None  # the scheduler's global batch; None = the loader's
        self.reference_batch: int | None = None
        self.adaptive: AdaptiveBatch | None = None  # the loader's autoscale_batch_size opt-in
        self.epoch, self.epochs, self.step = 0, None, 0
        self.layout = 0  # bumped by every regroup: loaders rebuild their iterators
        self.open: dict | None = None  # the step whose batch is out
        self.metrics: dict[str, float] = {}
        self.epoch_loss = EpochLoss()  # epoch_end's mean_loss
        self.noise = GradientNoiseEstimator()
        self.factor = LrFactor()
        self.step_lr: float | None = None
        self.step_lr_factor: float | None = None   # the LR rule's share of step_lr: the schedule's LR is the rest
        self.setup_s: float | None = None
        self.record = None
        self.step_records = StepRecords()
        self.lr_planner = LrPlanner()
        self.last_boundary = time.perf_counter()
        self.watch = FlagWatch(env.store, self) if env else None
        self.cadence = SyncCadence()
        self.scalars = StepScalars()
        self.rng = RankStreams()
        self.own_s = 0.0  # this rank's own time in its last sync step, sent with the next one's scalars

    # -- registration ---------------------------------------------------------------------------------
    def register(self, name: str, obj: Any) -> None:
        self.registry.register(name, obj)

    def attach_loader(self, num_samples: int, batch_size: int, shuffle: bool, seed: int, limit: int | None) -> None:
        if self.loader_batch is not None:
            raise UserError("ElasticDataLoader: one training loader per job (evaluate with a torch DataLoader)")
        self.loader_batch, self.epoch_limit = batch_size, limit
        if self.table is None:
            self.table = PartitionTable.fresh(num_samples, seed, self.epoch, shuffle=shuffle)
            self.table.limit = limit
        elif self.table.num_samples != num_samples:
            raise UserError(f"ElasticDataLoader: an epoch has {num_samples} samples (the dataset's, or a sampler's "
                            f"draws), the job's checkpoint {self.table.num_samples}")

    # -- sizes ---------------------------------------------------------------------------------------
    @property
    def global_batch(self) -> int:
        return self.requested_batch or self.loader_batch or 1

    @property
    def local_batches(self) -> list[int]:
        if self.plan is not None and self.plan.local_batches is not None and sum(self.plan.local_batches) == self.global_batch:
            return self.plan.local_batches
        return local_batch_sizes(self.global_batch, self.world)

    # -- group membership -----------------------------------------------------------------------------
    def join(self) -> None:
        """Enter the job's current generation (first call only): the state is registered by now."""
        if self.joined:
            return
        self.registry.discover()
        if not self.models:   # a plain model trained on: each worker its own replica, lost at every restart
            raise UserError("the training loop started with no model wrapped in dt.ElasticDataParallel: wrap it, "
                            "`model = dt.ElasticDataParallel(net.to(dt.device()))`; a plain one's gradients are not "
                            "all-reduced over the workers and its weights are not checkpointed (docs/porting.md)")
        pace_schedulers(self.objects.values(), self)
        if self.env is None:  # standalone: one worker, nothing to wait for
            if not dist.is_initialized():
                dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
            self.joined = True
            self._rebuild_models()
            self.last_boundary = time.perf_counter()
            return
        self.membership.enter()
        if first_group(self):
            # the job's start state is the script's as its loop first starts (its own warm start included): a
            # restart before the first periodic checkpoint restores it, and never runs on what the script's top
            # loads then (a pre-trained file since rewritten, the script's own export of a later model), nor draws
            # other random numbers (a forked worker's streams are seeded from the OS)
            self.rng.gather(self.world, EPOCH)
            if self.rank == 0:
                self._save()
        self.rng.apply(EPOCH)

    def _adopt(self, plan: Plan) -> None:
        self.step = plan.step
        if self.ckpt_every_set is None:
            self.ckpt_every = plan.ckpt_every
        if plan.table is not None:
            self.table = with_limit(PartitionTable.from_snapshot(plan.table), self)
            self.epoch = self.table.epoch
        self.reference_batch = plan.reference_batch
        self.epoch_loss = EpochLoss(plan.epoch_loss)  # the whole epoch's so far: from the End or the checkpoint
        if self.adaptive is not None:  # the job picks its own batch: keep it, within bounds at this size
            self.requested_batch = self.adaptive.regrouped(self.global_batch, self.world, self._reference())
        else:
                self.requested_batch = sum(plan.local_batches) if plan.local_batches else self.requested_batch
        self.cadence.restart(self.step)
        self.own_s = 0.0
        if self.global_batch != self.factor.batch:
            self.lr_control.retarget()

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
        return {"objects": self.registry.state(), "noise": self.noise.state_dict(), "factor": asdict(self.factor),
                "epoch": self.epoch, "requested_batch": self.requested_batch,
                "adaptive": self.adaptive.state_dict() if self.adaptive is not None else None,
                "rng": self.rng.snapshot()}

    def _load(self, state: dict) -> None:
        self.registry.load(state["objects"])
        self.noise.load_state_dict(state["noise"])
        self.factor = LrFactor(**state["factor"])
        self.epoch, self.requested_batch = state["epoch"], state["requested_batch"]
        if self.adaptive is not None and state.get("adaptive"):
            self.adaptive.load_state_dict(state["adaptive"])
        if "table" in state:  # a checkpoint (a broadcast's table comes with the plan)
            self.step = state["step"]
            self.table = with_limit(PartitionTable.from_snapshot(state["table"]), self) if state["table"] else self.table

    def _save(self, finished: bool = False) -> None:
        state = {**self._state(), "step": self.step, "table": self.table.snapshot() if self.table else None,
                 "global_batch": self.requested_batch, "ramp": None, "epoch_loss": self.epoch_loss.sums(),
                 "finished": finished}
        if finished:   # captured at no step of this run's end: a run trained on from it keeps the script's streams
            state["rng"] = None
        path = storage.for_job(self.job_dir, self.plan and self.plan.checkpoint_uri).save(
            SCRIPT_JOB, self.step, state)
        self._emit({"event": "checkpoint", "step": self.step, "path": str(path), "time": time.time()})

    # -- the step boundary -----------------------------------------------------------------------------
    def begin_step(self, n: int, mine: list[int]) -> None:
        """The loader hands out the next global batch (``n`` samples, ``mine`` on this rank): take it."""
        self.table.advance(n)
        if self.env is not None and os.getppid() != self.parent:
            self._exit(3)  # the coordinator is gone (killed): an orphan must not keep training
        sync = self.cadence.due(self.step + 1, self.world)
        self.open = {"since": self.last_boundary, "n": n, "share": len(mine),
                     "sync": sync, "measure": sync and self.cadence.measures(), "waited": 0.0}
        self.record_open_step(mine)   # before the all-reduce: a step that never commits is rolled back with it

    def record_open_step(self, ids: list[int]) -> None:
        """The open step's sample ids (``record_samples``); a step's last record counts (``[]`` retracts it)."""
        if self.record is not None:
            self.record.write(json.dumps({"run": self.plan.run, "generation": self.generation, "step": self.step + 1,
                                          "ids": ids}) + "\n")

    def extras(self, step_open: dict | None) -> list[float]:
        """[stop flag, this rank's |g_local|² (EDP's hooks), rank 0's proposed batch (0: none), steps to the
        next sync step and whether it measures (rank 0's), each rank's own seconds in its sync step before
        (``own_time``: this one's may still run its optimizer step)] for a sync step's all-reduce."""
        out = [0.0] * (5 + self.world)  # a list: one worker syncs every step, and tensor writes are slow Python
        if step_open is not None:   # the flag as the step ends (read as it began, a stop waited for a second step)
            out[0] = self.watch.flag(self.generation) if self.watch is not None and self.rank == 0 else 0.0
            out[5 + self.rank] = self.own_s
        if self.rank == 0:
            out[3], out[4] = self.cadence.plan(next((m.noise_every for m in self.models if m.noise_every), None),
                                               self.noise.updates)
        out[1] = sum(float(m._local_sqr) for m in self.models if m._local_sqr is not None)
        out[2] = float(getattr(self.adaptive, "proposed", None) or 0)
        return out

    def boundary(self, at: str = BATCH) -> None:
        """Commit the open step: record it, checkpoint when due, then obey the stop flag. ``at``: where the script is
        (``rng_state``): where its loader draws the next batch, or between epochs (a loop that broke out)."""
        if self.open is None:
            return
        step_open, self.open = self.open, None
        self.step += 1
        reduced = None
        if step_open["sync"]:  # the step scalars, every rank's at once
            ended = time.perf_counter()   # this rank's own work in the step ends: the wait for the scalars is not
            reduced = self.scalars.summed(lambda: self.extras(step_open)) if self.world > 1 else self.extras(step_open)
            self.own_s = own_time(step_open, ended)
            for m in self.models:
                m._after_sync(self, reduced)
        if reduced is None:  # between sync steps: nothing to obey, nothing measured
            reduced = [0.0] * 5
        else:
            self.cadence.synced(self.step, reduced[3], reduced[4])
        wall = time.perf_counter() - self.last_boundary  # data loading included: the step as the job sees it
        if self.rank == 0:
            self.cadence.observe(wall)
            self.epoch_loss.add(self.metrics.get("loss"), step_open["n"], self.step)
            self._emit(self.step_records.build(self, step_open["n"], wall, reduced[5:]))
            if self.job_dir is not None:
                self.lr_planner.after_step(self)
        if self.adaptive is not None:
            self.adaptive.at_boundary(self, int(reduced[2]), wall)
        obey(self, reduced[0], at)
        self.last_boundary = time.perf_counter()

    # -- epochs and reports ----------------------------------------------------------------------------
    def next_epoch(self) -> None:
        """Every rank moves on together; the table advances before the boundary, so an End carries it.

        ``mean_loss``: ``dlsched.torch.epoch_loss`` (rank 0's; the others adopt its sums at a regroup)."""
        if self.open is not None:  # a step the loop broke out after, committed below: the ending epoch's
            self.epoch_loss.add(self.metrics.get("loss"), self.open["n"], self.step + 1)
        self.table = next_epoch_table(self.table, self._reference()) if self.table is not None else None
        self.epoch += 1
        if self.rank == 0:
            self._emit({"event": "epoch_end", "epoch": self.epoch - 1, "mean_loss": self.epoch_loss.close(),
                        "time": time.time()})
        self.boundary(EPOCH)

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
        self.progress.emit(record)

    def _flush(self) -> None:
        self.progress.flush()


def with_limit(table: PartitionTable, s: Session) -> PartitionTable:
    """The job's table with the script's own epoch length (its loader's ``steps_per_epoch`` now, not the run's
    before)."""
    if s.loader_batch is not None:
        table.limit = s.epoch_limit
    return table


def obey(s: Session, flag: float, at: str) -> None:
    """After session ``s`` committed a step: its checkpoint when due, then the stop flag (a preemption checkpoints
    and exits, a resize regroups). Every rank's random streams go with a checkpoint (``rng_state``)."""
    checkpoint = s.job_dir is not None and bool(s.ckpt_every) and s.step % s.ckpt_every == 0
    if checkpoint or flag >= float(STOP_PREEMPT):
        s.rng.gather(s.world, at)   # every rank's random streams, as they stand at this step
    if checkpoint and s.rank == 0:
        s._save()
    if flag >= float(STOP_PREEMPT):
        if s.rank == 0:
            if not checkpoint:
                s._save()
            s._flush()
            s.store.set(end_key(s.generation), End(finished=False, preempted=True, step=s.step).to_json())
        s._exit()
    if flag > 0:
        # after an epoch's last step the script evaluates, every rank of this group together (a DDP forward
        # syncs buffers, an all_reduce sums the accuracy): a newcomer joining there started the next epoch and met
        # them in another collective. The group regroups where a rank draws its next batch.
        s.membership.due = True
        if s.table is None or not s.table.done:
            s.membership.draw(at)


def own_time(step_open: dict, ended: float) -> float:
    """This rank's time in a step, from the step before's end (its batch's loading included) to this one's, less its
    waits for its peers in the step's collectives (``parallel.time_backward_wait``): a slowness anywhere in the
    step (forward, backward, optimizer step, the script's own code) is its own. Its peers wait for a slow rank inside
    backward's gradient all-reduce: counted, every rank's time was the slowest's."""
    return ended - step_open["since"] - step_open["waited"]


def first_group(s: Session) -> bool:
    """A group that starts the job at its first step, its state the script's own (no checkpoint): its rank 0 saves
    that state, with every rank's random streams (each rank of it decides alike)."""
    return s.job_dir is not None and bool(s.ckpt_every) and s.step == 0 and not s.plan.restore and not s.env.joining


_session: Session | None = None


# torch's advice when a DDP script's `dist.get_rank()` runs before the loop, wrong here: the runtime forms the group
NO_GROUP = "Default process group has not been initialized"
NO_GROUP_HINT = ("dlsched: torch.distributed was used before the training loop started; the job's process group "
                 "forms when the loop starts (do not call init_process_group): before it use dt.rank() and "
                 "dt.world_size() (docs/porting.md)")


def _bad_input_exits_2(previous):
    """A worker's uncaught ``UserError`` (a bad argument: the same on every restart) exits 2, as an argparse error
    does: the coordinator then gives up at once, with its line, instead of restarting the group three times.
    Printed as before (torch's hook, installed later, wraps this one); the code is set at exit. A torch.distributed
    call before the group formed is one too, its last line saying what to change."""
    def hook(kind, value, tb):
        previous(kind, value, tb)
        no_group = issubclass(kind, ValueError) and NO_GROUP in str(value) and not (_session and _session.joined)
        if no_group:
            print(NO_GROUP_HINT, file=sys.stderr, flush=True)
        if issubclass(kind, UserError) or no_group:
            atexit.register(lambda: (sys.stdout.flush(), sys.stderr.flush(), os._exit(2)))
    return hook


def init(lr_rule: str = "auto", ckpt_every: int | None = None) -> Session:
    """Join the job's elastic group (standalone outside the scheduler). ``lr_rule``: auto, linear, sqrt,
    adascale or none (``dlsched.torch.lr_rule``); ``ckpt_every``: steps between checkpoints (0 = never;
    default: the runtime's ``--ckpt-every``)."""
    global _session
    if _session is None:
        env = WorkerEnv.from_env(os.environ)
        if env is not None and env.threads:
            torch.set_num_threads(env.threads)
        if env is not None:
            sys.excepthook = _bad_input_exits_2(sys.excepthook)
        _session = Session(env, lr_rule=lr_rule, ckpt_every=ckpt_every)
    return _session


def device() -> torch.device:
    """The device this worker trains on: its own GPU, which it sees as cuda:0 (``dlsched.train.devices``), or the
    CPU when the scheduler gave it none (or none exists)."""
    return torch.device("cuda", 0) if torch.cuda.is_available() else torch.device("cpu")


def current_session() -> Session:
    return _session if _session is not None else init()
