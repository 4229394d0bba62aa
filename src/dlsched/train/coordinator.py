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
import os
import signal
import time
import uuid
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist

from dlsched.train import storage
from dlsched.train import preemption, worker_forkserver
from dlsched.train.autoscale import StragglerDetector
from dlsched.train.devices import job_devices
from dlsched.train.forking import preload_in_forkserver
from dlsched.train.files import job_program, read_status, write_status
from dlsched.train.progress_log import ProgressLog
from dlsched.train.no_space import is_no_space
from dlsched.train.job import TrainJob, build_job
from dlsched.train.launcher import default_launcher, make_launcher
from dlsched.train.progress_lines import HumanProgress
from dlsched.train.replayed_records import ReplayedRecords
from dlsched.train.resume_log import read_resume_log, skipped_events
from dlsched.train.script_output import ScriptOutput
from dlsched.train.resizer import Resizer
from dlsched.train.protocol import (GATE_CANCEL, PROGRESS_QUEUE, SCRIPT_JOB, STOP_PREEMPT, End, Plan, Ready, end_key,
                                    gate_key, plan_key, ready_key, stop_key)
from dlsched.train.scaling import BatchMode, local_batch_sizes
from dlsched.train.script import forkable_script, resolve_command
from dlsched.train.start_state import StartState, at_asked_batch, fresh_start, resumed_start
from dlsched.train.worker_loss import WorkerLoss
from dlsched.train.worker_pool import WorkerPool

POLL_S = 0.02  # waiting on something under way (a stop, workers exiting)
IDLE_POLL_S = 0.1  # the main loop between events: each pass wakes this process and the store's thread
# several times, which on a machine the workers saturate preempts a worker and stalls its peers at the
# next all-reduce; a death, a finish or a control request is seen at most this much later


EXIT_STOPPED = 128 + signal.SIGTERM  # stopped on request, checkpoint written: the shell's "terminated by SIGTERM"


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
    max_local_batch: int | None = None  # a script's: ElasticDataLoader's default (the spec's max_local_batch)

    def __post_init__(self) -> None:
        if self.launcher == "ray":
            # a replacement needs a bundle while the straggler still holds its own; the scheduler granted no spare
            self.replace_stragglers = False


def planned_samples(job: TrainJob) -> int | None:
    """Samples the job will train on: per epoch x epochs; None under a convergence rule (it may end sooner)."""
    return None if job.target_loss is not None else job.num_samples * job.epochs


class Coordinator:
    def __init__(self, opts: Options):
        self.o = opts
        # the workers' forkserver (a script's too, run as ``python SCRIPT.py``): first, before this process has threads
        self.forks = opts.launcher == "local" and (opts.command is None or forkable_script(resolve_command(opts.command)))
        if self.forks:
            if opts.command is not None:
                preload_in_forkserver("dlsched.torch")
            worker_forkserver.start_shielded(fork=True)
        self.dir = Path(opts.job_dir)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.checkpoints = storage.for_job(self.dir, opts.checkpoint_uri)
        (self.dir / "logs").mkdir(exist_ok=True)
        self.job: TrainJob | None = build_job(opts.entry, opts.params) if opts.command is None else None
        self.job_name = self.job.name if self.job else SCRIPT_JOB
        self.launcher = make_launcher(opts.launcher, self.dir, opts.command)
        self.store = dist.TCPStore(self.launcher.store_host, 0, is_master=True, wait_for_workers=False,
                                   timeout=timedelta(seconds=60))
        human = HumanProgress()
        self.progress = ProgressLog(self.dir, echo=human, first=True)
        # a script's prints reach the terminal / output.log as torchrun's do (a make_job job has no script)
        self.script_output = ScriptOutput(self.dir / "logs", human.output if opts.command else None)
        self.run_id = uuid.uuid4().hex[:12]   # tells this run's steps from a resumed run's (same generations)
        visible = os.environ.get("CUDA_VISIBLE_DEVICES")
        self.pool = WorkerPool(opts, self.launcher, self.store, self.dir,
                               job_devices(visible, 0 if visible is not None else torch.cuda.device_count()))
        self.resizer = Resizer(self)
        self.worker_loss = WorkerLoss(self)
        self.generation = -1
        self.answers: dict[int, int] = {}  # generation -> the control.json request its group was formed for (-1: none)
        self.wids: list[int] = []
        self.last_report: dict | None = None
        self.pending_resize: dict | None = None  # resize waiting for its first step
        self.standby: list[int] = []
        self.detector = StragglerDetector()
        self.stragglers: list[int] = []
        self.standby_ready = 0
        self.plan: Plan | None = None
        self.replays = ReplayedRecords()

    @property
    def stop_requested(self) -> bool:
        return preemption.requested()

    # -- plans --------------------------------------------------------------------------------------
    def _publish(self, wids, step, table, global_batch, ramp, epoch_loss, restore=None, answers=None) -> None:
        """The next generation's plan; ``answers``: the control request it is formed for (None: a group formed for
        no request, after a worker loss or a straggler swap, answers what the one it replaces answered)."""
        self.answers[self.generation + 1] = self.answers.get(self.generation, -1) if answers is None else answers
        self.generation += 1
        self.wids = wids
        self.global_batch, self.ramp = global_batch, ramp
        self.plan = Plan(generation=self.generation, wids=wids, step=step, table=table and table.snapshot(),
                         local_batches=local_batch_sizes(global_batch, len(wids)) if global_batch else None,
                         ramp={"base_lr": ramp.base_lr, "k": ramp.k, "t0": ramp.t0, "T": ramp.T} if ramp else None,
                         epoch_loss=list(epoch_loss), restore=str(restore) if restore else None,
                         carried=restore is None and step > 0,
                         devices=[self.pool.device_of[w] for w in wids],
                         ckpt_every=self.o.ckpt_every, record_samples=self.o.record_samples,
                         reference_batch=self.o.reference_batch, run=self.run_id,
                         checkpoint_uri=self.o.checkpoint_uri)
        self.store.set(plan_key(self.generation), self.plan.to_json())
        self._status("running")

    def _status(self, state: str, error: str | None = None) -> None:
        write_status(self.dir, state, os.getpid(), len(self.wids), error, generation=self.generation,
                     program=job_program(self.o.entry, self.o.command),
                     worker_pids=[self.pool.procs[w].pid for w in self.wids if w in self.pool.procs],
                     standby_ready=self.standby_ready, devices=self.pool.devices,
                     worker_devices=[self.pool.seen.get(w) for w in self.wids])

    def _watch_ready(self) -> None:
        """Refresh status.json when workers become ready: standby count, and the devices workers report."""
        changed = False
        for w in self.pool.procs:
            if w not in self.pool.seen and self.store.check([ready_key(w)]):
                self.pool.seen[w] = Ready.from_json(self.store.get(ready_key(w))).cuda_visible_devices
                changed = True
        ready = sum(w in self.pool.seen for w in self.standby)
        if changed or ready != self.standby_ready:
            self.standby_ready = ready
            self._status("running")

    def _initial_state(self, batch: int | None = None) -> StartState:
        """Fresh start, or resume from the newest valid checkpoint in its storage (torn newer ones are skipped);
        ``batch``: the global batch to start at instead of the command's or the checkpoint's (a worker loss's)."""
        latest, state, skipped = self.checkpoints.newest_valid(self.job_name)
        for path, error in skipped:
            self.progress.write({"event": "checkpoint_skipped", "time": time.time(), "checkpoint": str(path),
                                 "error": error})
        if latest is None:
            return fresh_start(self.job, batch or self.o.batch_size, self.o.batch_mode, self.o.workers,
                               self.o.reference_batch)
        return at_asked_batch(resumed_start(latest, state, self.job), batch)

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
            # the request the step's group was formed for, not the newest one read: the group before a resize trains
            # on while newcomers prepare, and only a step of the new one proves the slots it left are free
            rec["control_generation"] = self.answers.get(rec["generation"], -1)
            if self.job is not None:
                rec["total_samples"] = planned_samples(self.job)
            if self.global_batch is None:
                self.global_batch = rec["batch_size"]  # a script's own batch, first seen
            if (rec["generation"] == self.generation and self.o.replace_stragglers and len(self.wids) > 1
                    and not self.resizer.active and rec["per_worker_samples_per_s"]):  # a script's sync steps only
                slow = self.detector.update(dict(zip(self.wids, rec["per_worker_samples_per_s"])))
                if slow and not self.stragglers:
                    self.stragglers = slow
                    self.progress.write({"event": "straggler", "time": time.time(), "workers": slow,
                                         "ewma": [round(self.detector.ewma[w], 3) for w in slow]})
        if self.replays.keep(rec):   # a restart's replayed evaluation or epoch end is recorded once
            self.progress.write(rec)   # echoed as a human line to output.log: what `dlsched logs -f` shows

    # -- main loop ----------------------------------------------------------------------------------
    def run(self) -> int:
        preemption.install()  # already done by ``run`` before its imports; here for in-process callers
        checkpointed = self._initial_state()
        start = at_asked_batch(checkpointed, self.o.batch_size)
        # a script that ended on its own (an early stop: no checkpoint says finished) is a finished job too
        ended = self.job is None and (read_status(self.dir) or {}).get("state") == "finished"
        if start.finished or ended:   # `dlsched train` on a finished job's folder printed nothing at all, exit 0
            at = f" at step {start.step} ({start.restore})" if start.finished else " (the script ended on its own)"
            more = (f" (--param epochs=N over {start.table.epoch + 1} trains on)"
                    if start.finished and self.job is not None and self.job.target_loss is None else "")
            print(f"{self.dir}: already finished{at}; nothing to train{more}", flush=True)
            self._status("finished")
            return 0
        if self.stop_requested:  # stopped while starting up: no worker exists, nothing ran since `restore`
            return self._stopped(start.step, start.restore)
        if self.forks:
            worker_forkserver.start_shielded()
        # a resumed job numbers its generations after the last run's, and says where it resumed: the sample
        # records the last run wrote after that step are then known to be rolled back (committed_sample_ids)
        earlier = read_resume_log(self.dir, start.step)   # one pass, none of it kept: a long job's log is gigabytes
        for e in skipped_events(earlier, time.time()):
            self.progress.write(e)
        self.resizer.control.generation = earlier.answered
        first = earlier.generation + 1
        self.generation = first - 1
        if first > 0:
            self.replays = earlier.replays
            was = checkpointed.global_batch or earlier.batch
            self.progress.write({"event": "resumed", "time": time.time(), "new_generation": first,
                                 "restored_step": start.step, "checkpoint": str(start.restore) if start.restore else None,
                                 "batch_size": start.global_batch or was, "from_batch_size": was})
        wids = self.pool.spawn(first, self.o.workers, self.o.workers)
        self.standby = self.pool.spawn(first, self.o.standby, self.o.workers)
        self._publish(wids, start.step, start.table, start.global_batch, start.ramp, start.epoch_loss, start.restore)
        try:
            while True:
                self._drain()
                key = end_key(self.generation)
                if self.store.check([key]) and End.from_json(self.store.get(key)).finished:
                    return self._finish()
                if self.wids and all(self.pool.procs[w].poll() == 0 for w in self.wids):
                    return self._finish()  # a script that ended without dlsched.torch.remaining_epochs
                dead = self.pool.dead(self.wids)
                if dead:
                    self.worker_loss.handle(dead)
                    continue
                if self.stop_requested:
                    return self._stop()
                self.resizer.poll_control()
                if self.stragglers:
                    drop, self.stragglers = self.stragglers, []
                    self.resizer.replace(drop)
                self.pool.reap_leaving()
                self._watch_ready()
                self.script_output.echo()
                time.sleep(IDLE_POLL_S)
        except Exception as e:  # noqa: BLE001 - any failure must end as status=failed, workers reaped
            self.pool.kill(list(self.pool.procs))
            if not is_no_space(e):   # a full disk is no failure of the job's: it resumes once there is room
                self._status("failed", f"{type(e).__name__}: {e}")
            raise
        finally:
            self.script_output.echo(final=True)
            self.progress.close()

    def _finish(self) -> int:
        for w in self.wids:
            self.pool.procs[w].wait()
        self.pool.kill(self.standby)
        self._drain()
        self.resizer.close()
        self.script_output.echo(final=True)  # the script's last lines before the job's end
        self.progress.write({"event": "finished", "time": time.time(), "step": self.last_report and self.last_report["step"]})
        self._status("finished")
        self.pool.kill(list(self.pool.procs))
        return 0

    def _stop(self) -> int:
        """SIGTERM: workers finish the current step, rank 0 checkpoints it, all exit; a resume redoes no step.

        A generation that has not started training is cancelled instead, so no step waits for slow joiners:
        then only a state carried over in memory needs rank 0 to checkpoint it; otherwise the workers just go."""
        gen = self.generation
        cancelled = self.store.compare_set(gate_key(gen), "", GATE_CANCEL) == GATE_CANCEL.encode()
        if cancelled and not self.plan.carried:
            self.pool.kill(list(self.pool.procs))
            self._drain()
            return self._stopped(self.plan.step, self.checkpoints.latest())
        if not cancelled:
            self.store.set(stop_key(gen), STOP_PREEMPT)
        needed = self.wids[:1] if cancelled else self.wids  # a cancelled generation waits for rank 0's checkpoint only
        end = None
        while not self.store.check([end_key(gen)]):
            self._drain()
            if any(self.pool.procs[w].poll() not in (None, 0) for w in needed):
                break  # no consistent state to save: the last periodic checkpoint stands
            time.sleep(POLL_S)
        else:
            end = End.from_json(self.store.get(end_key(gen)))
            if end.finished:
                return self._finish()
            self._wait_exit(needed, timeout=5.0)  # let them close their sample records; killed below anyway
        self.pool.kill(list(self.pool.procs))
        self._drain()
        return self._stopped(end and end.step, self.checkpoints.latest())

    def _wait_exit(self, wids: list[int], timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and any(self.pool.procs[w].poll() is None for w in wids):
            time.sleep(POLL_S)

    def _stopped(self, step: int | None, latest: str | None) -> int:
        self.progress.write({"event": "stopped", "time": time.time(), "step": step,
                             "checkpoint": str(latest) if latest else None})
        self._status("stopped")
        return EXIT_STOPPED

