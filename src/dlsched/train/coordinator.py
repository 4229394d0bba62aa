"""The job coordinator: owns the TCPStore, the worker processes, the partition table and the job folder.

Loop: drain the workers' step reports into progress.jsonl (and the partition offsets they carry),
watch control.json for a higher generation, watch worker processes. A resize is stop-free: new
workers are started and build their model while the old group keeps training; only when all are
ready does the coordinator raise the stop flag, read the final offsets, and publish the next
generation's plan (survivors keep their state, rank 0 broadcasts it). A worker that dies takes the
in-memory state with it, so then — and only then — the group is replaced from the last checkpoint.

SIGTERM (``preemption``) is acted on at the next safe point, whatever the job is doing: a resize still
waiting for its new workers is abandoned, a generation that has not trained its first step is
cancelled through its gate (rank 0 checkpoints the state it carried over, if any), otherwise the
group finishes the step it is in and checkpoints it. Every worker is pinned to its own GPU
(``devices``), at start and on every resize, from the devices the backend granted the job.
"""
from __future__ import annotations

import json
import multiprocessing
import multiprocessing.forkserver
import os
import signal
import time
import uuid
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist

from dlsched.errors import UserError
from dlsched.train import storage
from dlsched.train import preemption
from dlsched.train.autoscale import StragglerDetector
from dlsched.train.data import PartitionTable
from dlsched.train.devices import free_devices, job_devices, keepers, visible_devices
from dlsched.train.files import Control, ProgressLog, control_bytes, last_generation, read_control, write_status
from dlsched.train.job import TrainJob, build_job
from dlsched.train.launcher import WorkerHandle, default_launcher, make_launcher
from dlsched.train.progress_lines import HumanProgress
from dlsched.train.script import ScriptLauncher
from dlsched.train.protocol import (GATE_CANCEL, GATE_RUN, PROGRESS_QUEUE, SCRIPT_JOB, STOP_PREEMPT, STOP_RESIZE, End,
                                    Held, Plan, Ready, WorkerEnv, end_key, gate_key, plan_key, ready_key, stop_key,
                                    survivor_key)
from dlsched.train.worker import PG_TIMEOUT
from dlsched.train.scaling import BatchMode, LrRamp, global_batch_after_resize, local_batch_sizes

POLL_S = 0.02
# survivors of a lost peer report once their collective fails: at once when the peer's sockets close (its
# process died), after the process-group timeout when its node fell off the network without closing them
SURVIVOR_WAIT_S = PG_TIMEOUT.total_seconds() + 15


EXIT_STOPPED = 128 + signal.SIGTERM  # stopped on request, checkpoint written: the shell's "terminated by SIGTERM"


def _start_forkserver_shielded() -> None:
    """Start the forkserver ignoring SIGTERM: it and the workers it forks inherit SIG_IGN (exec keeps it).

    A backend stops a job by SIGTERM to its whole process group; only the coordinator must react (it
    asks the workers to finish the step and checkpoint); a worker or forkserver killed mid-step would
    lose the step. SIGTERM stays blocked meanwhile (a blocked signal is kept pending even while
    ignored), so one arriving in this window reaches the coordinator's handler afterwards.
    """
    with preemption.sigterm_blocked():
        handler = signal.signal(signal.SIGTERM, signal.SIG_IGN)
        try:
            multiprocessing.forkserver.ensure_running()
        finally:
            signal.signal(signal.SIGTERM, handler)


@dataclass
class Options:
    job_dir: Path
    entry: str | None  # a make_job entry, or None with ``command``
    workers: int
    command: list[str] | None = None  # the user's own script (dlsched.torch), e.g. ["python", "train.py"]
    batch_size: int | None = None
    params: dict = field(default_factory=dict)
    batch_mode: BatchMode = BatchMode.FIXED_GLOBAL
    ckpt_every: int = 20
    threads: int = 0  # torch threads per worker; 0 = max(1, cpus // workers)
    record_samples: bool = False  # write per-step sample ids (exactly-once audit; tests)
    max_restarts: int = 3
    replace_stragglers: bool = True  # EWMA < 0.8 of the median -> swap the worker for a fresh one
    reference_batch: int | None = None  # the global batch the job's lr is given at (the spec's); None = the job's
    standby: int = 0  # workers kept started and prepared, so a scale-out waits only for the broadcast
    launcher: str = field(default_factory=default_launcher)  # "local" (forked here) or "ray" (one actor per bundle)
    checkpoint_uri: str | None = None  # a path or fsspec URI (dlsched.train.storage); None = DIR/ckpt

    def __post_init__(self) -> None:
        if self.launcher == "ray":
            # a replacement needs a bundle while the straggler still holds its own; the scheduler granted no spare
            self.replace_stragglers = False


@dataclass(frozen=True)
class StartState:
    """Where a group starts: fresh, or the latest checkpoint (``restore``, a path or URI) in its storage."""

    restore: str | None
    step: int
    table: PartitionTable | None  # None: a script's fresh start (its loader builds the table)
    global_batch: int | None  # None: the script's own batch
    ramp: LrRamp | None  # None: a script applies its own LR rule
    epoch_loss: tuple[float, int]
    finished: bool


def planned_samples(job: TrainJob) -> int | None:
    """Samples the job will train on: per epoch x epochs; None under a convergence rule (it may end sooner)."""
    return None if job.target_loss is not None else job.num_samples * job.epochs


class Coordinator:
    def __init__(self, opts: Options):
        self.o, self.dir = opts, Path(opts.job_dir)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.checkpoints = storage.for_job(self.dir, opts.checkpoint_uri)
        (self.dir / "logs").mkdir(exist_ok=True)
        self.job: TrainJob | None = build_job(opts.entry, opts.params) if opts.command is None else None
        self.job_name = self.job.name if self.job else SCRIPT_JOB
        self.launcher = ScriptLauncher(opts.command) if opts.command else make_launcher(opts.launcher, self.dir)
        self.store = dist.TCPStore(self.launcher.store_host, 0, is_master=True, wait_for_workers=False,
                                   timeout=timedelta(seconds=60))
        self.progress = ProgressLog(self.dir, echo=HumanProgress())
        self.run_id = uuid.uuid4().hex[:12]   # tells this run's steps from a resumed run's (same generations)
        self.procs: dict[int, WorkerHandle] = {}
        self.next_wid = 0
        self.generation = -1
        self.wids: list[int] = []
        self.control_gen = -1
        self.rejected_control: bytes | None = None  # the malformed control.json reported last
        self.restarts = 0
        self.last_report: dict | None = None
        self.pending_resize: dict | None = None  # resize waiting for its first step
        self.standby: list[int] = []
        self.leaving: list[int] = []
        self.detector = StragglerDetector()
        self.stragglers: list[int] = []
        self.resizing = False
        self.standby_ready = 0
        self.plan: Plan | None = None
        visible = os.environ.get("CUDA_VISIBLE_DEVICES")
        self.devices = job_devices(visible, 0 if visible is not None else torch.cuda.device_count())
        self.device_of: dict[int, str] = {}  # worker -> the one device it may use ("" = CPU)
        self.seen: dict[int, str | None] = {}  # worker -> CUDA_VISIBLE_DEVICES the worker itself reported

    @property
    def stop_requested(self) -> bool:
        return preemption.requested()

    # -- processes ----------------------------------------------------------------------------------
    def _spawn(self, generation: int, devices: list[str] | int, world: int) -> list[int]:
        """Start workers, one per entry of ``devices`` (or that many on free devices)."""
        if isinstance(devices, int):
            devices = free_devices(self.devices, (self.device_of[w] for w in self.procs), devices)
        threads = self.o.threads or max(1, (os.cpu_count() or 1) // max(world, 1))
        wids = []
        for device in devices:
            wid, self.next_wid = self.next_wid, self.next_wid + 1
            log = self.dir / "logs" / f"worker-{wid}.log"
            if self.o.command:
                self.procs[wid] = self.launcher.start(
                    WorkerEnv(f"{self.launcher.store_host}:{self.store.port}", wid, generation, str(self.dir), threads),
                    log, visible_devices(device, self.devices))
                self.device_of[wid] = device
                wids.append(wid)
                continue
            argv = ["--store", f"{self.launcher.store_host}:{self.store.port}", "--worker-id", str(wid), "--generation",
                    str(generation), "--job-dir", str(self.dir), "--entry", self.o.entry,
                    "--params", json.dumps(self.o.params), "--threads", str(threads)]
            self.procs[wid] = self.launcher.start(argv, self.dir / "logs" / f"worker-{wid}.log",
                                                  visible_devices(device, self.devices))
            self.device_of[wid] = device
            wids.append(wid)
        return wids

    def _wait_ready(self, wids: list[int]) -> bool:
        """Wait for new workers to finish their preparation, while the current group keeps training.

        False when one of them failed, a worker died, or the job is being stopped (the resize is abandoned)."""
        while not all(self.store.check([ready_key(w)]) for w in wids):
            if self.stop_requested:
                self.progress.write({"event": "resize_abandoned", "time": time.time(), "reason": "stop requested"})
                return False
            for w in wids:
                if self.procs[w].poll() is not None:
                    self.progress.write({"event": "resize_failed", "time": time.time(),
                                         "error": f"new worker {w} exited with {self.procs[w].returncode}: "
                                                  f"{self._log_tail(w)}"})
                    return False
            self._drain()
            if self._dead_workers():
                return False
            time.sleep(POLL_S)
        return True

    def _log_tail(self, wid: int) -> str:
        lines = (self.dir / "logs" / f"worker-{wid}.log").read_text(errors="replace").strip().splitlines()
        return lines[-1] if lines else ""

    def _dead_workers(self) -> list[int]:
        return [w for w in self.wids if self.procs[w].poll() not in (None, 0)]

    def _reap_leaving(self) -> None:
        for w in [w for w in self.leaving if self.procs[w].poll() is not None]:
            self.leaving.remove(w)
            self.procs.pop(w)
            self.device_of.pop(w, None)
            self.seen.pop(w, None)

    def _kill(self, wids: list[int]) -> None:
        for w in wids:
            if w in self.leaving:
                self.leaving.remove(w)
            p = self.procs.pop(w, None)
            self.device_of.pop(w, None)
            self.seen.pop(w, None)
            if p is not None and p.poll() is None:
                p.kill()
                p.wait()

    # -- plans --------------------------------------------------------------------------------------
    def _publish(self, wids, step, table, global_batch, ramp, epoch_loss, restore=None) -> None:
        self.generation += 1
        self.wids = wids
        self.global_batch, self.ramp = global_batch, ramp
        self.plan = Plan(generation=self.generation, wids=wids, step=step, table=table and table.snapshot(),
                         local_batches=local_batch_sizes(global_batch, len(wids)) if global_batch else None,
                         ramp={"base_lr": ramp.base_lr, "k": ramp.k, "t0": ramp.t0, "T": ramp.T} if ramp else None,
                         epoch_loss=list(epoch_loss), restore=str(restore) if restore else None,
                         carried=restore is None and step > 0,
                         devices=[self.device_of[w] for w in wids],
                         ckpt_every=self.o.ckpt_every, record_samples=self.o.record_samples,
                         reference_batch=self.o.reference_batch, run=self.run_id,
                         checkpoint_uri=self.o.checkpoint_uri)
        self.store.set(plan_key(self.generation), self.plan.to_json())
        self._status("running")

    def _status(self, state: str, error: str | None = None) -> None:
        write_status(self.dir, state, os.getpid(), len(self.wids), error, generation=self.generation,
                     worker_pids=[self.procs[w].pid for w in self.wids if w in self.procs],
                     standby_ready=self.standby_ready, devices=self.devices,
                     worker_devices=[self.seen.get(w) for w in self.wids])

    def _watch_ready(self) -> None:
        """Refresh status.json when workers become ready: standby count, and the devices workers report."""
        changed = False
        for w in self.procs:
            if w not in self.seen and self.store.check([ready_key(w)]):
                self.seen[w] = Ready.from_json(self.store.get(ready_key(w))).cuda_visible_devices
                changed = True
        ready = sum(w in self.seen for w in self.standby)
        if changed or ready != self.standby_ready:
            self.standby_ready = ready
            self._status("running")

    def _initial_state(self) -> StartState:
        """Fresh start, or resume from the newest valid checkpoint in its storage (torn newer ones are skipped)."""
        latest, state, skipped = self.checkpoints.newest_valid(self.job_name)
        for path, error in skipped:
            self.progress.write({"event": "checkpoint_skipped", "time": time.time(), "checkpoint": str(path),
                                 "error": error})
        if latest is None and self.job is None:
            return StartState(None, 0, None, self.o.batch_size, None, (0.0, 0), False)
        if latest is None:
            gb = self.o.batch_size or self.job.batch_size
            if self.o.batch_mode == BatchMode.FIXED_LOCAL and not self.o.batch_size:
                gb = self.job.batch_size * self.o.workers
            reference = self.o.reference_batch or self.job.batch_size  # the batch the job's lr is given at
            ramp = LrRamp(base_lr=self.job.lr * gb / reference)
            return StartState(None, 0, PartitionTable.fresh(self.job.num_samples, self.job.seed, 0), gb, ramp,
                              (0.0, 0), False)
        table, ramp = state["table"], state["ramp"]
        return StartState(latest, state["step"], table and PartitionTable.from_snapshot(table), state["global_batch"],
                          ramp and LrRamp(**ramp), tuple(state["epoch_loss"]), state["finished"])

    # -- reports ------------------------------------------------------------------------------------
    def _drain(self) -> None:
        while self.store.queue_len(PROGRESS_QUEUE) > 0:
            item = json.loads(self.store.queue_pop(PROGRESS_QUEUE, block=False))
            for rec in item if isinstance(item, list) else [item]:  # a script pushes its step records in batches
                self._ingest(rec)

    def _ingest(self, rec: dict) -> None:
        if "event" not in rec:
            self.last_report = rec
            table = rec.pop("table")
            setup_s = rec.pop("setup_s", None)
            if self.pending_resize and rec["generation"] == self.generation:
                ev = self.pending_resize
                ev["pause_s"] = rec["time"] - ev.pop("requested_at")
                ev["stall_s"] = rec["time"] - ev.pop("stopped_at")
                ev["regroup_s"] = setup_s  # process-group init + parameter/optimizer broadcast
                self.progress.write(ev)
                self.pending_resize = None
            rec["partition_offsets"] = table
            rec["run"] = self.run_id
            if self.job is not None:
                rec["total_samples"] = planned_samples(self.job)
            if self.global_batch is None:
                self.global_batch = rec["batch_size"]  # a script's own batch, first seen
            if (rec["generation"] == self.generation and self.o.replace_stragglers and len(self.wids) > 1
                    and not self.resizing):
                slow = self.detector.update(dict(zip(self.wids, rec["per_worker_samples_per_s"])))
                if slow and not self.stragglers:
                    self.stragglers = slow
                    self.progress.write({"event": "straggler", "time": time.time(), "workers": slow,
                                         "ewma": [round(self.detector.ewma[w], 3) for w in slow]})
        self.progress.write(rec)   # echoed as a human line to output.log: what `dlsched logs -f` shows

    # -- main loop ----------------------------------------------------------------------------------
    def run(self) -> int:
        preemption.install()  # already done by ``run`` before its imports; here for in-process callers
        start = self._initial_state()
        if start.finished:
            self._status("finished")
            return 0
        if self.stop_requested:  # stopped while starting up: no worker exists, nothing ran since `restore`
            return self._stopped(start.step, start.restore)
        if self.job is not None:
            _start_forkserver_shielded()
        # a resumed job numbers its generations after the last run's, and says where it resumed: the sample
        # records the last run wrote after that step are then known to be rolled back (committed_sample_ids)
        first = last_generation(self.dir) + 1
        self.generation = first - 1
        if first > 0:
            self.progress.write({"event": "resumed", "time": time.time(), "new_generation": first,
                                 "restored_step": start.step, "checkpoint": str(start.restore) if start.restore else None})
        wids = self._spawn(first, self.o.workers, self.o.workers)
        self.standby = self._spawn(first, self.o.standby, self.o.workers)
        self._publish(wids, start.step, start.table, start.global_batch, start.ramp, start.epoch_loss, start.restore)
        try:
            while True:
                self._drain()
                key = end_key(self.generation)
                if self.store.check([key]) and End.from_json(self.store.get(key)).finished:
                    return self._finish()
                if self.wids and all(self.procs[w].poll() == 0 for w in self.wids):
                    return self._finish()  # a script that ended without dlsched.torch.remaining_epochs
                dead = self._dead_workers()
                if dead:
                    if not (self.launcher.shrink_on_loss and self._shrink_onto_survivors(dead)):
                        self._recover(dead)
                    continue
                if self.stop_requested:
                    return self._stop()
                self._poll_control()
                if self.stragglers:
                    drop, self.stragglers = self.stragglers, []
                    self._resize(Control(len(self.wids), None, self.control_gen), drop=drop)
                self._reap_leaving()
                self._watch_ready()
                time.sleep(POLL_S)
        except Exception as e:  # noqa: BLE001 - any failure must end as status=failed, workers reaped
            self._kill(list(self.procs))
            self._status("failed", f"{type(e).__name__}: {e}")
            raise
        finally:
            self.progress.close()

    def _finish(self) -> int:
        for w in self.wids:
            self.procs[w].wait()
        self._kill(self.standby)
        self._drain()
        self.progress.write({"event": "finished", "time": time.time(), "step": self.last_report and self.last_report["step"]})
        self._status("finished")
        self._kill(list(self.procs))
        return 0

    def _stop(self) -> int:
        """SIGTERM: workers finish the current step, rank 0 checkpoints it, all exit; a resume redoes no step.

        A generation that has not started training is cancelled instead, so no step waits for slow joiners:
        then only a state carried over in memory needs rank 0 to checkpoint it; otherwise the workers just go."""
        gen = self.generation
        cancelled = self.store.compare_set(gate_key(gen), "", GATE_CANCEL) == GATE_CANCEL.encode()
        if cancelled and not self.plan.carried:
            self._kill(list(self.procs))
            self._drain()
            return self._stopped(self.plan.step, self.checkpoints.latest())
        if not cancelled:
            self.store.set(stop_key(gen), STOP_PREEMPT)
        needed = self.wids[:1] if cancelled else self.wids  # a cancelled generation waits for rank 0's checkpoint only
        end = None
        while not self.store.check([end_key(gen)]):
            self._drain()
            if any(self.procs[w].poll() not in (None, 0) for w in needed):
                break  # no consistent state to save: the last periodic checkpoint stands
            time.sleep(POLL_S)
        else:
            end = End.from_json(self.store.get(end_key(gen)))
            if end.finished:
                return self._finish()
            self._wait_exit(needed, timeout=5.0)  # let them close their sample records; killed below anyway
        self._kill(list(self.procs))
        self._drain()
        return self._stopped(end and end.step, self.checkpoints.latest())

    def _wait_exit(self, wids: list[int], timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and any(self.procs[w].poll() is None for w in wids):
            time.sleep(POLL_S)

    def _stopped(self, step: int | None, latest: str | None) -> int:
        self.progress.write({"event": "stopped", "time": time.time(), "step": step,
                             "checkpoint": str(latest) if latest else None})
        self._status("stopped")
        return EXIT_STOPPED

    def _poll_control(self) -> None:
        try:
            ctl = read_control(self.dir)
        except UserError as e:
            content = control_bytes(self.dir)
            if content != self.rejected_control:  # once per distinct content, not once per poll
                self.rejected_control = content
                self.progress.write({"event": "control_rejected", "error": str(e), "time": time.time()})
            return
        if ctl is None or ctl.generation <= self.control_gen:
            return
        self.control_gen = ctl.generation
        self._resize(ctl)

    def _resize(self, ctl: Control, drop: list[int] = ()) -> None:
        """Stop-free resize and/or batch change: prepare newcomers first, then stop after one step.

        ``drop`` names workers to replace (stragglers): they leave like scaled-in workers."""
        self.resizing = True
        try:
            self._resize_now(ctl, list(drop))
        finally:
            self.resizing = False
        self.standby_ready = sum(w in self.seen for w in self.standby)

    def _resize_now(self, ctl: Control, drop: list[int]) -> None:
        if self.stop_requested:
            return  # the main loop stops the job instead
        requested = time.time()
        workers, batch_size = ctl.workers, ctl.batch_size
        if ctl.devices is not None:
            self.devices = list(ctl.devices)
        old = list(self.wids)
        keep = keepers([w for w in old if w not in drop], self.device_of, self.devices, workers)
        if keep == old and workers == len(old) and batch_size in (None, self.global_batch):
            return  # nothing to change: don't stop the group for it
        leaving = [w for w in old if w not in keep]
        # newcomers get the job's devices the keepers do not use; a prepared spare fits when it has that device
        held = [self.device_of[w] for w in keep] + [self.device_of[w] for w in self.leaving + leaving]
        new = []
        for device in free_devices(self.devices, held, workers - len(keep)):
            spare = next((w for w in self.standby if self.device_of[w] == device), None)
            if spare is None:
                new += self._spawn(self.generation + 1, [device], workers)
            else:
                self.standby.remove(spare)
                new.append(spare)
        if not self._wait_ready(new):
            self._kill(new)
            return
        gen = self.generation
        stopped = time.time()
        # no worker may stay (the job moved to other GPUs): the state goes through a checkpoint instead of memory
        self.store.set(stop_key(gen), STOP_RESIZE if keep else STOP_PREEMPT)
        while not self.store.check([end_key(gen)]):
            if self.stop_requested:  # preempted meanwhile: this step's end becomes the stop (checkpointed)
                self.store.compare_set(stop_key(gen), STOP_RESIZE, STOP_PREEMPT)
            self._drain()
            if self._dead_workers():
                self._kill(new)
                return
            time.sleep(0.001)
        end = End.from_json(self.store.get(end_key(gen)))
        if end.finished or (end.preempted and self.stop_requested):
            self._kill(new)  # _finish / _stop take it from here
            return
        self._drain()
        restore = None
        if keep:
            step, table, eloss, lr = end.step, end.table and PartitionTable.from_snapshot(end.table), end.epoch_loss, end.lr
        else:
            start = self._initial_state()
            restore, step, table, eloss = start.restore, start.step, start.table, start.epoch_loss
            lr = self.ramp and self.ramp.lr(step - 1)  # the LR of the last step taken
        gb = batch_size or (self.global_batch and global_batch_after_resize(self.o.batch_mode, self.global_batch,
                                                                           len(old), workers))
        ramp = self.ramp
        if ramp is not None and gb != self.global_batch:
            ramp = ramp.rescaled(lr, self.global_batch, gb, step)
        wids = keep + new
        for w in leaving:
            self.detector.forget(w)
        self._publish(wids, step, table, gb, ramp, eloss, restore)
        self.leaving += leaving  # they exit on their own; reaped without blocking the loop
        self.standby += self._spawn(self.generation, self.o.standby - len(self.standby), workers)
        self.pending_resize = {"event": "resized", "time": requested, "generation": self.generation,
                               "from_workers": len(old), "workers": workers, "replaced": list(drop), "batch_size": gb, "step": step,
                               "requested_at": requested, "stopped_at": stopped}

    def _survivor_states(self, survivors: list[int]) -> dict[int, Held] | None:
        """Each survivor's report of the state it holds, once all reported; None if one died too, the
        generation ended anyway (finished, stopped), never started training, or they did not report in time."""
        gen, deadline = self.generation, time.monotonic() + SURVIVOR_WAIT_S
        if not (self.store.check([gate_key(gen)]) and self.store.get(gate_key(gen)).decode() == GATE_RUN):
            return None   # lost while the group formed: no step, so no survivor report to wait for
        while time.monotonic() < deadline and not self.stop_requested:
            self._drain()
            if self.store.check([end_key(gen)]) or any(self.procs[w].poll() is not None for w in survivors):
                return None
            if self.store.check([survivor_key(gen, w) for w in survivors]):
                return {w: Held.from_json(self.store.get(survivor_key(gen, w))) for w in survivors}
            time.sleep(POLL_S)
        return None

    def _shrink_onto_survivors(self, dead: list[int]) -> bool:
        """A worker died mid-step (its node was lost): the others carry on from the last step they all
        committed, in memory, as a smaller group - no restart, no checkpoint. False when that is not possible
        (no survivor, they disagree on the step, one died too): the caller recovers from the checkpoint."""
        old = list(self.wids)
        survivors = [w for w in old if w not in dead]
        states = self._survivor_states(survivors) if survivors else None
        if not states or len({(s.step, json.dumps(s.table, sort_keys=True)) for s in states.values()}) != 1:
            return False
        held = states[survivors[0]]
        exit_codes = [self.procs[w].returncode for w in dead]
        self._kill(dead)
        for w in dead:
            self.detector.forget(w)
        step, table = held.step, PartitionTable.from_snapshot(held.table)
        gb = global_batch_after_resize(self.o.batch_mode, self.global_batch, len(old), len(survivors))
        ramp = self.ramp if gb == self.global_batch else self.ramp.rescaled(held.lr, self.global_batch, gb, step)
        lost_at = self.last_report["step"] if self.last_report else step
        self.pending_resize = None
        self._publish(survivors, step, table, gb, ramp, held.epoch_loss)
        self.progress.write({"event": "shrunk", "time": time.time(), "workers_lost": dead,
                             "exit_codes": exit_codes, "from_workers": len(old),
                             "workers": len(survivors), "new_generation": self.generation, "step": step,
                             "lost_steps": max(0, lost_at - step), "batch_size": gb})
        return True

    def _recover(self, dead: list[int]) -> None:
        """A worker died: its peers' state is suspect mid-collective, so replace the group from the checkpoint."""
        self.restarts += 1
        lost_at = self.last_report["step"] if self.last_report else 0
        errors = {w: self.procs[w].returncode for w in dead}
        if self.restarts > self.o.max_restarts:
            raise RuntimeError(f"workers {errors} died; gave up after {self.o.max_restarts} restarts: "
                               f"{self._log_tail(dead[0])}")
        count = len(self.wids)
        self._kill(list(self.procs))
        self.pending_resize = None
        self._drain()
        start = self._initial_state()
        wids = self._spawn(self.generation + 1, count, count)
        self.standby = self._spawn(self.generation + 1, self.o.standby, count)
        self._publish(wids, start.step, start.table, start.global_batch, start.ramp, start.epoch_loss, start.restore)
        self.progress.write({"event": "worker_lost", "time": time.time(), "workers_lost": list(errors),
                             "exit_codes": list(errors.values()), "new_generation": self.generation,
                             "restored_step": start.step, "lost_steps": max(0, lost_at - start.step),
                             "checkpoint": str(start.restore) if start.restore else None})
