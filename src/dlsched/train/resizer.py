"""The coordinator's stop-free resize: control.json requests and straggler swaps.

Newcomers are started and prepare while the old group keeps training; only when all are ready is the
group stopped after one step, and the next generation published (keepers carry the state in memory).
A rejoin (``worker_loss``: a shrunk group grows back into slots the backend still holds for it) takes the same
path, answering no request of the scheduler's.
"""
from __future__ import annotations

import time

from dlsched.train.data import PartitionTable
from dlsched.train.devices import free_devices, keepers
from dlsched.train.files import Control, ControlWatch
from dlsched.train.launcher import NoFreeSlot
from dlsched.train.polling import Backoff
from dlsched.train.protocol import STOP_PREEMPT, STOP_RESIZE, End, end_key, ready_key, stop_key
from dlsched.train.scaling import global_batch_after_resize

POLL_S = 0.02
ENDED = "the job ended before its new workers joined"   # the scheduler's request is moot, not lost
LOST = "a worker of the training group died"   # worker_loss takes the group over from here
REJOIN_READY_S = 300.0   # a rejoin's newcomers must be ready by then (a worker start under load takes ~30 s)


class Resizer:
    def __init__(self, coordinator):
        self.c = coordinator  # publishes the plans, owns the group
        # its generation starts past what earlier runs answered: ``Coordinator.run`` sets it from the job's log
        self.control = ControlWatch(coordinator.dir, lambda error: coordinator.progress.write(
            {"event": "control_rejected", "error": error, "time": time.time()}))
        self.active = False  # a resize is under way (straggler detection pauses)
        self.rejoin: dict | None = None  # the rejoin under way: its event's extra fields

    def poll_control(self) -> None:
        ctl = self.control.poll()
        if ctl is not None:
            self.resize(ctl)

    def close(self) -> None:
        """At the job's end: a request that came too late to act on is reported, so nobody waits for it."""
        ctl = self.control.poll()
        if ctl is not None and (ctl.workers != len(self.c.wids) or ctl.batch_size not in (None, self.c.global_batch)):
            self.abandon(ENDED)

    def replace(self, drop: list[int]) -> None:
        """Swap stragglers for fresh workers, keeping the group's size."""
        self.resize(Control(len(self.c.wids), None, self.c.answers.get(self.c.generation, -1)), drop=drop)

    def resize(self, ctl: Control, drop: list[int] = (), rejoin: dict | None = None) -> None:
        """Stop-free resize and/or batch change: prepare newcomers first, then stop after one step.

        ``drop`` names workers to replace (stragglers): they leave like scaled-in workers. ``rejoin``: the fields of
        a ``rejoined`` event, for a group growing back after a loss (then no free slot abandons it, not the job)."""
        self.active, self.rejoin = True, rejoin
        devices, generation = list(self.c.pool.devices), self.c.generation
        try:
            self._resize_now(ctl, list(drop))
        finally:
            self.active, self.rejoin = False, None
        if self.c.generation == generation and self.c.answers.get(generation) != ctl.generation:
            self.c.pool.devices = devices   # not done (abandoned, stopped): the group keeps the devices it has
        self.c.standby_ready = sum(w in self.c.pool.seen for w in self.c.standby)

    def abandon(self, reason: str) -> None:
        """The old group trains on at its size. ``control_generation`` names the request given up (the service
        hands the job back the GPUs it trains on only if no newer request came since)."""
        if self.rejoin is not None:   # no request of the scheduler's: nothing for the service to give back
            reason, generation = f"rejoin: {reason}", None
        else:
            generation = self.control.generation
        self.c.progress.write({"event": "resize_abandoned", "time": time.time(), "reason": reason,
                               "control_generation": generation})

    def _group_ended(self) -> bool:
        """The group finished training (its End says so, or a script's workers all exited 0 without one): the
        resize has nothing left to move, and waiting on would hold the finish (forever, for an End never set)."""
        c = self.c
        key = end_key(c.generation)
        if c.store.check([key]) and End.from_json(c.store.get(key)).finished:
            return True
        return bool(c.wids) and all(c.pool.procs[w].poll() == 0 for w in c.wids)

    def _wait_ready(self, wids: list[int]) -> bool:
        """Wait for new workers to finish their preparation, while the current group keeps training.

        False when one of them failed, a worker died, the job is being stopped or has ended, or a newer request
        came (the resize is abandoned)."""
        c, pool = self.c, self.c.pool
        deadline = time.monotonic() + REJOIN_READY_S
        while not all(c.store.check([ready_key(w)]) for w in wids):
            if c.stop_requested:
                self.abandon("stop requested")
                return False
            if self._group_ended():
                self.abandon(ENDED)
                return False
            newer = self.control.waiting()
            if newer is not None:   # the scheduler asked again (or gave this one up, past its deadline): newcomers go
                self.abandon(f"superseded by a newer request (generation {newer.generation})")
                return False
            for w in wids:
                if pool.procs[w].poll() is not None:   # not retried here: the scheduler decides again
                    self.abandon(f"new worker {w} exited with {pool.procs[w].returncode}: {pool.log_tail(w)}")
                    return False
            revoked = pool.revoked(wids)
            if revoked:   # the backend took their slots back, or their node is lost: they would never join
                self.abandon(f"the slots of new worker(s) {revoked} were taken back or lost with their node")
                return False
            if self.rejoin is not None and time.monotonic() > deadline:   # no scheduler's deadline gives it up
                self.abandon(f"new worker(s) not ready in {REJOIN_READY_S:g} s")
                return False
            c._drain()
            if pool.dead(c.wids):
                self.abandon(LOST)
                return False
            time.sleep(POLL_S)
        return True

    def _resize_now(self, ctl: Control, drop: list[int]) -> None:
        c, pool = self.c, self.c.pool
        if c.stop_requested:
            return  # the main loop stops the job instead
        requested = time.time()
        workers, batch_size = ctl.workers, ctl.batch_size
        if ctl.devices is not None:
            pool.devices = list(ctl.devices)
        old = list(c.wids)
        drop = drop + pool.revoked(old)   # a move on Ray: the backend reserved their successors elsewhere
        keep = keepers([w for w in old if w not in drop], pool.device_of, pool.devices, workers)
        if keep == old and workers == len(old) and batch_size in (None, c.global_batch):
            c.answers[c.generation] = ctl.generation  # nothing to change: the group is what the request asks for
            return
        leaving = [w for w in old if w not in keep]
        # newcomers get the job's devices the keepers do not use; a prepared spare fits when it has that device
        held = [pool.device_of[w] for w in keep] + [pool.device_of[w] for w in pool.leaving + leaving]
        new = []
        for device in free_devices(pool.devices, held, workers - len(keep)):
            spare = next((w for w in c.standby if pool.device_of[w] == device), None)
            if spare is None:
                try:
                    new += pool.spawn(c.generation + 1, [device], workers, joining=True)
                except NoFreeSlot as e:
                    if self.rejoin is None:
                        raise   # the scheduler granted every worker a slot: the backend's books are wrong
                    self.abandon(str(e))   # the slot went back to the backend since room() counted it
                    pool.kill(new)
                    return
            else:
                c.standby.remove(spare)
                new.append(spare)
        if not self._wait_ready(new):
            pool.kill(new)
            return
        gen = c.generation
        stopped = time.time()
        # no worker may stay (the job moved to other GPUs): the state goes through a checkpoint instead of memory
        c.store.set(stop_key(gen), STOP_RESIZE if keep else STOP_PREEMPT)
        backoff = Backoff()
        while not c.store.check([end_key(gen)]):
            if c.stop_requested:  # preempted meanwhile: this step's end becomes the stop (checkpointed)
                c.store.compare_set(stop_key(gen), STOP_RESIZE, STOP_PREEMPT)
            c._drain()
            if pool.dead(c.wids):
                self.abandon(LOST)
                pool.kill(new)
                return
            if self._group_ended():   # a script that ended without an End: none will come
                self.abandon(ENDED)
                pool.kill(new)
                return
            backoff.sleep()
        end = End.from_json(c.store.get(end_key(gen)))
        if end.finished or (end.preempted and c.stop_requested):
            if end.finished:
                self.abandon(ENDED)
            pool.kill(new)  # _finish / _stop take it from here
            return
        c._drain()
        restore = None
        if keep:
            step, table, eloss, lr = end.step, end.table and PartitionTable.from_snapshot(end.table), end.epoch_loss, end.lr
        else:
            start = c._initial_state()
            restore, step, table, eloss = start.restore, start.step, start.table, start.epoch_loss
            lr = c.ramp and c.ramp.lr(step - 1)  # the LR of the last step taken
        gb = batch_size or (c.global_batch and global_batch_after_resize(c.o.batch_mode, c.global_batch,
                                                                        len(old), workers))
        ramp = c.ramp
        if ramp is not None and gb != c.global_batch:
            ramp = ramp.rescaled(lr, c.global_batch, gb, step)
        wids = keep + new
        for w in leaving:
            c.detector.forget(w)
        c._publish(wids, step, table, gb, ramp, eloss, restore, answers=ctl.generation)
        pool.leaving += leaving  # they exit on their own; reaped without blocking the loop
        c.standby += pool.spawn(c.generation, c.o.standby - len(c.standby), workers)
        c.pending_resize = {"event": "resized" if self.rejoin is None else "rejoined", "time": requested,
                            "generation": c.generation, "from_workers": len(old), "workers": workers,
                            "replaced": list(drop), "batch_size": gb, "step": step, "requested_at": requested,
                            "stopped_at": stopped, **(self.rejoin or {})}
