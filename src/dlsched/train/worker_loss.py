"""What the coordinator does when a worker dies: shrink onto the survivors in memory (and grow back into the
slots the backend still holds for the job), else restart from the last checkpoint."""
from __future__ import annotations

import json
import re
import time

from dlsched.errors import JobFailed, UserError
from dlsched.train.data import PartitionTable
from dlsched.train.files import Control
from dlsched.train.peer_cut import publish_lost
from dlsched.train.protocol import GATE_RUN, Held, end_key, gate_key, survivor_key
from dlsched.train.scaling import global_batch_after_resize
from dlsched.train.worker import PG_TIMEOUT

POLL_S = 0.02
BAD_INPUT = 2  # a worker's exit code for bad input: a script's UserError (dlsched.torch) or argparse error
# survivors of a lost peer report once their collective fails: at once when the peer's sockets close (its
# process died) or once they cut them (peer_cut: its node fell off the network); the process-group timeout
# bounds a peer neither closed nor cut
SURVIVOR_WAIT_S = PG_TIMEOUT.total_seconds() + 15


class WorkerLoss:
    def __init__(self, coordinator):
        self.c = coordinator  # publishes the plans, owns the group
        self.restarts = 0
        self.rejoins = 0

    def handle(self, dead: list[int]) -> None:
        bad = [w for w in dead if self.c.pool.procs[w].returncode == BAD_INPUT]
        if bad:  # the same again on a restart: the job fails now, with the worker's line
            line = re.sub(r"^(\[rank\d+\]: )+", "", self.c.pool.log_tail(bad[0]))
            raise UserError(f"worker {bad[0]} exited {BAD_INPUT}: {line.removeprefix('dlsched.errors.UserError: ')}")
        old = len(self.c.wids)
        if self.c.launcher.shrink_on_loss and self._shrink_onto_survivors(dead):
            self._rejoin(dead, old)
        else:
            self._recover(dead)

    def _survivor_states(self, survivors: list[int]) -> dict[int, Held] | None:
        """Each survivor's report of the state it holds, once all reported; None if one died too, the
        generation ended anyway (finished, stopped), never started training, or they did not report in time."""
        c = self.c
        gen, deadline = c.generation, time.monotonic() + SURVIVOR_WAIT_S
        if not (c.store.check([gate_key(gen)]) and c.store.get(gate_key(gen)).decode() == GATE_RUN):
            return None   # lost while the group formed: no step, so no survivor report to wait for
        while time.monotonic() < deadline and not c.stop_requested:
            c._drain()
            if c.store.check([end_key(gen)]) or any(c.pool.procs[w].poll() is not None for w in survivors):
                return None
            if c.store.check([survivor_key(gen, w) for w in survivors]):
                return {w: Held.from_json(c.store.get(survivor_key(gen, w))) for w in survivors}
            time.sleep(POLL_S)
        return None

    def _shrink_onto_survivors(self, dead: list[int]) -> bool:
        """A worker died mid-step (its node was lost, its actor killed): the others carry on from the last step they all
        committed, in memory, as a smaller group - no restart, no checkpoint. False when that is not possible
        (no survivor, they disagree on the step, one died too): the caller recovers from the checkpoint."""
        c = self.c
        old = list(c.wids)
        survivors = [w for w in old if w not in dead]
        if survivors:
            publish_lost(c.store, c.generation, c.dir, dead, survivors)
        states = self._survivor_states(survivors) if survivors else None
        if not states or len({(s.step, json.dumps(s.table, sort_keys=True)) for s in states.values()}) != 1:
            return False
        held = states[survivors[0]]
        exit_codes = [c.pool.procs[w].returncode for w in dead]
        c.pool.kill(dead)
        for w in dead:
            c.detector.forget(w)
        step, table = held.step, PartitionTable.from_snapshot(held.table)
        gb = global_batch_after_resize(c.o.batch_mode, c.global_batch, len(old), len(survivors))
        ramp = c.ramp if gb == c.global_batch else c.ramp.rescaled(held.lr, c.global_batch, gb, step)
        lost_at = c.last_report["step"] if c.last_report else step
        c.pending_resize = None
        c._publish(survivors, step, table, gb, ramp, held.epoch_loss)
        c.progress.write({"event": "shrunk", "time": time.time(), "workers_lost": dead,
                          "exit_codes": exit_codes, "from_workers": len(old),
                          "workers": len(survivors), "new_generation": c.generation, "step": step,
                          "lost_steps": max(0, lost_at - step), "batch_size": gb})
        return True

    def _rejoin(self, dead: list[int], old: int) -> None:
        """After a shrink, grow back into the slots the backend still holds for the job (under Ray the lost worker's
        actor died on a live node - the OOM killer, a crash - and its bundle is still the job's), stop-free like a
        resize, while the survivors train on. A slot lost with its node is not the job's any more: the scheduler
        re-plans the job instead (the service's ``workers_lost``)."""
        c = self.c
        count = c.launcher.room(old)
        if count <= len(c.wids):
            return
        self.rejoins += 1
        if self.rejoins > c.o.max_restarts:   # a worker that keeps dying where it runs (out of memory)
            raise JobFailed(f"workers {dead} died; gave up after {c.o.max_restarts} rejoins: "
                            f"{c.pool.log_tail(dead[0])} (worker logs in {c.dir / 'logs'})")
        c.resizer.resize(Control(count, None, c.answers.get(c.generation, -1)),
                         rejoin={"workers_lost": dead, "rejoins": self.rejoins})

    def _recover(self, dead: list[int]) -> None:
        """A worker died: its peers' state is suspect mid-collective, so replace the group from the checkpoint."""
        c = self.c
        self.restarts += 1
        lost_at = c.last_report["step"] if c.last_report else 0
        errors = {w: c.pool.procs[w].returncode for w in dead}
        if self.restarts > c.o.max_restarts:
            raise JobFailed(f"workers {errors} died; gave up after {c.o.max_restarts} restarts: "
                            f"{c.pool.log_tail(dead[0])} (worker logs in {c.dir / 'logs'})")
        old = len(c.wids)
        c.pool.kill(list(c.pool.procs))
        count = c.launcher.room(old)   # under Ray a dead worker's bundle may have gone with its node
        if not count:
            raise JobFailed(f"workers {errors} died and left no slot to restart in: {c.pool.log_tail(dead[0])}")
        c.pending_resize = None
        c._drain()
        start = c._initial_state()
        gb, ramp = start.global_batch, start.ramp
        if gb is not None and count != old:   # fewer workers: the batch rule a shrink follows
            gb = global_batch_after_resize(c.o.batch_mode, gb, old, count)
            if ramp is not None and gb != start.global_batch:
                ramp = ramp.rescaled(ramp.lr(start.step - 1), start.global_batch, gb, start.step)
        wids = c.pool.spawn(c.generation + 1, count, count)
        c.standby = c.pool.spawn(c.generation + 1, c.o.standby, count)
        c._publish(wids, start.step, start.table, gb, ramp, start.epoch_loss, start.restore)
        c.progress.write({"event": "worker_lost", "time": time.time(), "workers_lost": list(errors),
                          "exit_codes": list(errors.values()), "new_generation": c.generation,
                          "restored_step": start.step, "lost_steps": max(0, lost_at - start.step),
                          "checkpoint": str(start.restore) if start.restore else None})
