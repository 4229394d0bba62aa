"""A script process's membership in the job's process group, generation by generation.

It waits for a plan naming it, forms the generation's group (state from the checkpoint, or rank 0's
broadcast), and leaves it again at a resize. Protocol: ``dlsched.train.protocol``.
"""
from __future__ import annotations

import os
import time

import torch
import torch.distributed as dist

from dlsched.ray.host import RAY_NODE_IP_ENV
from dlsched.train import storage
from dlsched.train.data import record_path
from dlsched.train.protocol import (GATE_RUN, SCRIPT_JOB, End, Plan, Ready, end_key, gate_key, group_prefix, plan_key,
                                    ready_key)
from dlsched.torch.rng_state import BATCH
from dlsched.train.peer_cut import CutWatch
from dlsched.train.worker import PG_TIMEOUT, gather_ranks, pick_backend, wait_key


class GroupMembership:
    def __init__(self, session):
        self.s = session  # the state the group shares, and where the plan lands
        self.cut: CutWatch | None = None   # this generation's, with peers on other nodes (Ray)
        self.due = False   # a step's boundary asked for a regroup, left for the rank's next batch (``draw``)

    def enter(self) -> None:
        """Say this worker is prepared, then join the first generation that names it."""
        s = self.s
        s.store.set(ready_key(s.wid), Ready(os.environ.get("CUDA_VISIBLE_DEVICES")).to_json())
        self.enter_next_plan()

    def planned(self) -> tuple[int, int]:
        """(rank, world) the first plan naming this worker gives it, before it joins: waits for the current
        generation's plan; a standby worker, named by none yet, is (-1, the plan's world), and so is a newcomer to
        a running group: its generation's plan waits for it to be ready (in the loop), so waiting here hung the grow."""
        s = self.s
        if s.env.joining and not s.store.check([plan_key(s.generation)]):
            return -1, len(Plan.from_json(s.store.get(plan_key(s.generation - 1))).wids)
        plan = Plan.from_json(wait_key(s.store, plan_key(s.generation), s.parent))
        return (plan.wids.index(s.wid) if s.wid in plan.wids else -1), len(plan.wids)

    def draw(self, at: str = BATCH) -> None:
        """Before a rank draws its next batch (``at``: or between epochs): the regroup a step's boundary asked for
        (``due``), if any."""
        if self.due:
            self.due = False
            self.regroup(at)

    def regroup(self, at: str) -> None:
        """A resize: rank 0 hands the state over (the End), every rank leaves this generation's group and joins the
        next one (or exits, if scaled in). Every rank's random streams go with the state (``rng_state``)."""
        s = self.s
        s.rng.gather(s.world, at)
        if s.rank == 0:
            s._flush()
            s.store.set(end_key(s.generation), End(
                finished=False, step=s.step, table=s.table.snapshot() if s.table else None,
                epoch_loss=s.epoch_loss.sums(), lr=s.step_lr).to_json())
        for m in s.models:
            m._unwrap()
        if self.cut is not None:
            self.cut.__exit__(None, None, None)
        dist.destroy_process_group()
        s.generation += 1
        self.enter_next_plan()

    def enter_next_plan(self) -> None:
        s = self.s
        while True:
            plan = Plan.from_json(wait_key(s.store, plan_key(s.generation), s.parent))
            if s.wid in plan.wids:
                break
            if s.joined:  # scaled in
                s._exit()
            s.generation += 1  # standby: stay prepared for a later generation
        self._form_group(plan)

    def _form_group(self, plan: Plan) -> None:
        s = self.s
        gen, rank, world = plan.generation, plan.wids.index(s.wid), len(plan.wids)
        started = time.perf_counter()
        s.plan, s.rank, s.world = plan, rank, world
        if not gather_ranks(s.store, gen, world, s.parent, orphaned=s._exit):
            self._cancelled(plan)
        backend, device = pick_backend(plan.devices)
        if backend == "nccl":
            torch.cuda.set_device(device)
        dist.init_process_group(backend, store=dist.PrefixStore(group_prefix(gen), s.store), rank=rank,
                                world_size=world, timeout=PG_TIMEOUT)
        if os.environ.get(RAY_NODE_IP_ENV):   # a peer's node may fall off the network: fail the step, not wait 60 s
            self.cut = CutWatch(s.store, gen).__enter__()
        if plan.restore:
            state = storage.load(plan.restore, SCRIPT_JOB)
            s._load(state)
        else:
            box = [s._state() if rank == 0 else None]
            dist.broadcast_object_list(box, src=0, device=device if backend == "nccl" else None)
            state = box[0]
            if rank != 0:
                s._load(state)
        # this rank's streams (rank 0's too: a resize may make another process rank 0); a survivor of a regroup is
        # where they were captured already, a new process restores them when its script gets there
        s.rng.receive(state.get("rng"), rank, now=s.joined)
        s._adopt(plan)
        s._rebuild_models()
        s.setup_s = time.perf_counter() - started
        if s.store.compare_set(gate_key(gen), "", GATE_RUN) != GATE_RUN.encode():
            self._cancelled(plan)
        s.joined = True
        s.layout += 1
        s.last_boundary = time.perf_counter()
        if plan.record_samples and s.record is None:
            path = record_path(s.job_dir, s.wid)
            path.parent.mkdir(parents=True, exist_ok=True)
            s.record = open(path, "a", buffering=1)

    def _cancelled(self, plan: Plan) -> None:
        """Stopped before this generation's first step: rank 0 saves the state carried over in memory."""
        s = self.s
        if plan.wids.index(s.wid) == 0:
            s._adopt(plan)
            if plan.carried:
                s._save()
            s._flush()
            s.store.set(end_key(plan.generation),
                        End(finished=False, preempted=True, cancelled=True, step=plan.step).to_json())
        s._exit()
