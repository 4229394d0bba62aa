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
# a script error at start-up hits every rank alike, each exiting on its own within moments of the first (a loaded
# machine's torch teardown takes seconds); a peer inside a collective exits once the dead one's sockets close
SETTLE_S = 10.0
RANK_PREFIX = re.compile(r"^(\[rank\d+\]: )+")   # torch's prefix on a failing rank's traceback lines


def script_error(code: int | None) -> bool:
    """An exit of the worker's own (an uncaught exception exits 1), not a signal's: a kill, the OOM killer, a lost
    node (negative; a Ray script worker's child killed by one exits 128 + N or 256 - N)."""
    return code is not None and 0 < code < 128


class WorkerLoss:
    def __init__(self, coordinator):
        self.c = coordinator  # publishes the plans, owns the group
        self.restarts = 0
        self.rejoins = 0

    def handle(self, dead: list[int]) -> None:
        self._fail_on_a_loop_left_early(dead)
        bad = [w for w in dead if self.c.pool.procs[w].returncode == BAD_INPUT]
        if bad:  # the same again on a restart: the job fails now, with the worker's line
            line = self._last_line(bad[0])
            raise UserError(f"worker {bad[0]} exited {BAD_INPUT}: {line.removeprefix('dlsched.errors.UserError: ')}")
        if not self._trained():
            self._fail_on_a_start_up_error()
        old = len(self.c.wids)
        if self.c.launcher.shrink_on_loss and self._shrink_onto_survivors(dead):
            self._rejoin(dead, old)
        else:
            self._recover(dead)

    def _last_line(self, wid: int) -> str:
        return RANK_PREFIX.sub("", self.c.pool.log_tail(wid))

    def _trained(self) -> bool:
        """Whether the job ever completed a step: in this run, or before the checkpoint it resumed from."""
        return self.c.last_report is not None or (self.c.plan is not None and self.c.plan.step > 0)

    def _settled(self, wait_s: float) -> dict[int, int]:
        """The group's workers that exited with an error, once every one has exited or a signal killed one (a
        restart case either way), at most ``wait_s`` on: a start-up error names every worker it failed, not the first."""
        c = self.c
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline and not c.stop_requested:
            codes = [c.pool.procs[w].poll() for w in c.wids]
            if all(code is not None for code in codes) or any(code is not None and code < 0 for code in codes):
                break
            time.sleep(POLL_S)
        return {w: c.pool.procs[w].returncode for w in c.wids if c.pool.procs[w].poll() not in (None, 0)}

    def _fail_on_a_start_up_error(self) -> None:
        """Every worker exited with an error of its script's before the job's first step (a typo, a missing file):
        a restart runs the same code on the same input, so the job fails now, with the first worker's line. A
        signal (a kill, a lost node), or a worker still alive, is restarted as before."""
        c = self.c
        errors = self._settled(SETTLE_S)
        if len(errors) == len(c.wids) and all(map(script_error, errors.values())):
            first = min(errors)
            raise JobFailed(f"workers {errors} died before the job's first step, not restarted (a restart would fail "
                            f"the same way): {self._last_line(first)} (worker logs in {c.dir / 'logs'})")

    def _fail_on_a_loop_left_early(self, dead: list[int]) -> None:
        """A worker of the group exited 0 (its script left ``remaining_epochs``) while its generation had not ended
        and a peer still trained: that peer's next collective failed without it. A restart replays the same
        divergence, so the job fails now, naming the worker that left."""
        c = self.c
        left = [w for w in c.wids if c.pool.procs[w].poll() == 0]
        if not left or c.store.check([end_key(c.generation)]):
            return
        report = c.last_report or {}
        if report.get("total_samples") and report.get("samples", 0) >= report["total_samples"]:
            return   # every sample trained: a rank leaving its loop is the run's end (a grow's newcomer joined then)
        rank = {w: c.wids.index(w) for w in c.wids}
        ended = ", ".join(f"worker {w} (rank {rank[w]})" for w in left)
        at = f" after step {c.last_report['step']}" if c.last_report else ""
        died = ", ".join(f"worker {d} (rank {rank[d]}, exit {c.pool.procs[d].returncode})" for d in dead)
        loops = "its loop" if len(left) == 1 else "their loops"
        raise JobFailed(f"{ended} ended {loops} (exit 0){at} while the other ranks still trained; {died} then failed "
                        f"at the next all-reduce without it. Every rank must leave dt.remaining_epochs at the same "
                        f"point: break out of it on all ranks or on none (docs/porting.md). Not restarted "
                        f"(worker logs in {c.dir / 'logs'})")

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
        # the workers lost, not the peers their loss then failed at the next collective (a node's loss: [2], not
        # [0, 2]); a start-up error, which fails every worker alike, is named whole by _fail_on_a_start_up_error
        # a peer that failed in the collective its killed peer left (exit 1) is no loss of its own: workers forked
        # from the forkserver are reaped by it, so the coordinator may see the victim and its peers gone at once
        killed = [w for w in dead if (c.pool.procs[w].returncode or 0) < 0]
        errors = {w: c.pool.procs[w].returncode for w in killed or dead}
        if self.restarts > c.o.max_restarts:
            raise JobFailed(f"workers {errors} died; gave up after {c.o.max_restarts} restarts: "
                            f"{self._last_line(dead[0])} (worker logs in {c.dir / 'logs'})")
        old = len(c.wids)
        c.pool.kill(list(c.pool.procs))
        count = c.launcher.room(old)   # under Ray a dead worker's bundle may have gone with its node
        if not count:
            raise JobFailed(f"workers {errors} died and left no slot to restart in: {self._last_line(dead[0])}")
        c.pending_resize = None
        c._drain()
        # the batch of the group lost, which the request it answers asked for, not the checkpoint's: the new group
        # answers the same request (the service shows its batch); None: a script's own batch, no request's
        start = c._initial_state(c.global_batch if c.plan is not None and c.plan.local_batches else None)
        c.replays.restored(start.step)   # after the drain: the dead group's records are in
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
