"""Local backend: each job is one runtime coordinator process on this machine (it spawns the workers).

A node of the cluster declaration may be "N GPU slots": one worker process per slot, so the whole system runs on a
CPU-only laptop. A node declared with a real ``gpu_type`` on a machine with CUDA maps its slots to CUDA devices: the
backend hands each job the slot indices it holds and sets ``CUDA_VISIBLE_DEVICES`` to their devices; the runtime
pins each worker to one of them (NCCL) and jobs never share one. A resize re-books the job's slots (growth takes
free ones, shrinking gives the surplus back) and hands the runtime the new device list through ``control.json``, so
workers added later get their own GPU too. The slots a resize takes from a job with ``Launch.hold_given_back`` (a
shrink, a move, a grow given up unconfirmed) stay booked, to no job, until ``release``: the group before it may
still train there, and a count per node alone let the next job take the lowest free slot, that one. Coordinators run
in their own session (process group) so that a SIGKILL of the service leaves them training (the default runtime is
forked from ``runtime_forkserver``, which has torch loaded, from the second start on); after a restart
``attach`` finds them again through ``DIR/launch.json`` (pid + process start time, which guards against pid reuse),
and the books with them: its ``slots``, the ``releasing`` ones held back, and the slots ``before`` its last resize
(a grow given up after a restart returns to the slots its workers train on).
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable, Mapping, Sequence

import psutil

from dlsched.backends import runtime_forkserver
from dlsched.backends.base import (Backend, Launch, PollResult, atomic_write_json, ended_unwatched,
                                   runtime_command, write_control)
from dlsched.backends.coordinator_exit import coordinator_exit
from dlsched.backends.stop_grace import stop_grace
from dlsched.paths import pythonpath_with_src
from dlsched.spec import NodeSpec
from dlsched.faults import fault_point
from dlsched.train import fence
from dlsched.train.files import read_regular
from dlsched.train.preemption import signal_group, sigterm_blocked

DEFAULT_RUNTIME = [sys.executable, "-m", "dlsched.train.run"]


SLOT_TYPE = "slot"  # NodeSpec.gpu_type of a node whose "GPUs" are just worker slots


def gpu_devices(nodes: Sequence[NodeSpec], cuda_count: int) -> dict[str, list[int]]:
    """CUDA device ids per node with real GPUs (gpu_type other than "slot"), numbered in declaration order.

    All local nodes share this machine's devices; a node whose devices do not exist (no CUDA, or fewer
    devices than declared) keeps plain slots."""
    out, first = {}, 0
    for n in nodes:
        if n.gpu_type != SLOT_TYPE and n.gpus and first + n.gpus <= cuda_count:
            out[n.name], first = list(range(first, first + n.gpus)), first + n.gpus
    return out


def assign_slots(placement: Mapping[str, int], held: Mapping[str, set[int]]) -> dict[str, list[int]]:
    """The lowest free slot indices on each node for a placement {node: count}; ``held`` = indices taken."""
    out = {}
    for node, count in placement.items():
        taken, free, i = held.get(node, set()), [], 0
        while len(free) < count:
            if i not in taken:
                free.append(i)
            i += 1
        out[node] = free
    return out


def resize_slots(current: Mapping[str, Sequence[int]], placement: Mapping[str, int],
                 others: Mapping[str, set[int]]) -> dict[str, list[int]]:
    """A job's slots after a resize to ``placement`` {node: count}: on each node it keeps its lowest held slots
    (the workers there stay put), gives back the rest, and grows into the lowest slots nobody holds."""
    out = {}
    for node, count in placement.items():
        if count <= 0:
            continue
        mine = sorted(current.get(node, ()))[:count]
        extra = assign_slots({node: count - len(mine)}, {node: set(others.get(node, ())) | set(mine)})[node]
        out[node] = sorted(mine + extra)
    return out


def slot_devices(slots: Mapping[str, Sequence[int]], devices: Mapping[str, Sequence[int]]) -> list[str]:
    """The CUDA devices behind a job's slots (slots on nodes without real GPUs have none)."""
    return [str(devices[node][i]) for node, idx in slots.items() if node in devices for i in idx]


def gpu_env(slots: Mapping[str, Sequence[int]], devices: Mapping[str, Sequence[int]]) -> dict[str, str]:
    """Environment giving a job exactly the GPUs behind its slots; "" (CPU only) when none is a real GPU.

    Without ``devices`` (no node declares real GPUs) the environment is left alone."""
    if not devices:
        return {}
    return {"CUDA_VISIBLE_DEVICES": ",".join(slot_devices(slots, devices))}


def _cuda_count() -> int:
    import torch  # only when a node declares real GPUs: the service need not load torch otherwise

    return torch.cuda.device_count()


class LocalBackend(Backend):
    """Start/resize/stop runtime coordinators as local subprocesses.

    ``runtime`` is the command prefix of the contract's start command; tests pass a small contract-following
    script, production uses ``python -m dlsched.train.run``. ``cwd`` is where relative ``entry`` paths
    (``examples/mlp.py:make_job``) resolve. ``nodes`` (the cluster declaration) enables one GPU per slot on
    nodes that declare real GPUs when CUDA is present; ``cuda_count`` overrides device detection.
    """

    name = "local"

    def __init__(self, runtime: list[str] | None = None, cwd: str | Path | None = None,
                 threads_per_worker: int = 1, stop_grace_s: float = 10.0, nodes: Sequence[NodeSpec] = (),
                 cuda_count: Callable[[], int] = _cuda_count):
        self.runtime = list(runtime or DEFAULT_RUNTIME)
        self.cwd = str(cwd or os.getcwd())
        self.threads_per_worker = threads_per_worker
        self.stop_grace_s = stop_grace_s
        self._procs: dict[int, subprocess.Popen | runtime_forkserver.ForkedCoordinator] = {}
        self._attached: dict[int, psutil.Process] = {}
        real = [n for n in nodes if n.gpu_type != SLOT_TYPE and n.gpus]
        self.devices = gpu_devices(nodes, cuda_count()) if real else {}
        self._slots: dict[int, dict[str, list[int]]] = {}  # job -> node -> slot indices it holds
        self._before: dict[int, dict[str, list[int]]] = {}  # job -> its slots before its last resize
        self._releasing: dict[int, dict[str, list[int]]] = {}  # job -> slots held back from every job until release

    def _held(self, except_job: int | None = None) -> dict[str, set[int]]:
        """Slot indices taken per node: held by every job but ``except_job``, or held back (``_releasing``) from
        every job, ``except_job`` too (its old workers may still run there, its new ones must not)."""
        held: dict[str, set[int]] = {}
        books = [s for job, s in self._slots.items() if job != except_job] + list(self._releasing.values())
        for slots in books:
            for node, idx in slots.items():
                held.setdefault(node, set()).update(idx)
        return held

    # -- actions ---------------------------------------------------------------------------------
    def command(self, launch: Launch) -> list[str]:
        return runtime_command(self.runtime, launch)

    def start(self, launch: Launch) -> None:
        job_dir = Path(launch.job_dir)
        job_dir.mkdir(parents=True, exist_ok=True)
        # the control file states the allocation the process starts with, so a resumed job never sees a stale one
        write_control(job_dir, launch.num_gpus, launch.batch_size, launch.generation)
        if self.attach(launch.job_id, job_dir):
            # a coordinator of this job is still alive (the service died between starting it and recording
            # that): adopt it; the control file above already moved it to this allocation
            with open(job_dir / "output.log", "ab") as log:
                log.write(f"\n== {time.strftime('%Y-%m-%d %H:%M:%S')} adopted running coordinator\n".encode())
            return
        # the job folder's lock (train/fence.py), taken here and handed to the coordinator: no second one, ever
        lock = fence.acquire(job_dir)
        if lock is None:
            self._adopt_holder(launch.job_id, job_dir, self.command(launch), launch.placement)
            return
        env = dict(os.environ)
        env["PYTHONPATH"] = pythonpath_with_src(env.get("PYTHONPATH"))
        env.setdefault("OMP_NUM_THREADS", str(self.threads_per_worker))
        env["DLSCHED_JOB_ID"] = str(launch.job_id)
        env[fence.FD_ENV] = str(lock)
        self._forget(launch.job_id)
        slots = assign_slots(launch.placement, self._held())
        self._slots[launch.job_id] = slots
        env.update(gpu_env(slots, self.devices))
        cmd = self.command(launch)
        try:
            with open(job_dir / "output.log", "ab") as log:
                log.write(f"\n== {time.strftime('%Y-%m-%d %H:%M:%S')} start: {' '.join(cmd)}\n".encode())
                log.flush()
                with sigterm_blocked():  # a stop during the runtime's start-up waits until it can checkpoint and exit 143
                    proc = self._forked(cmd, env, job_dir / "output.log", lock) or subprocess.Popen(
                        cmd, cwd=self.cwd, env=env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                        start_new_session=True, pass_fds=(lock,))
        finally:
            os.close(lock)   # the coordinator holds it now, for its life
        fault_point("coordinator-started")
        self._procs[launch.job_id] = proc
        self._attached.pop(launch.job_id, None)
        born = getattr(proc, "create_time", None) or psutil.Process(proc.pid).create_time()
        atomic_write_json(job_dir / "launch.json", {"pid": proc.pid, "create_time": born, "cmd": cmd, "slots": slots})

    def _forked(self, cmd: list[str], env: dict[str, str], log: Path, lock: int):
        """The default runtime forked from this process's runtime forkserver (``runtime_forkserver``), else None:
        another runtime, or no server loaded yet (this start spawns, as every start did: the first, and any until the
        server, started by the second, has loaded)."""
        if not runtime_forkserver.forkable(cmd):
            return None
        try:
            return runtime_forkserver.start(cmd, self.cwd, env, str(log), lock)
        except runtime_forkserver.NotReady:
            return None

    def _adopt_holder(self, job_id: int, job_dir: Path, cmd: list[str], placement: Mapping[str, int]) -> None:
        """A live coordinator holds the job's lock, though no launch.json names it (the service died between
        starting it and recording that, or the file was deleted): adopt it and record it."""
        p = fence.holder(job_dir)
        if p is None:
            raise RuntimeError(f"{fence.lock_path(job_dir)} is locked, but no live process holds it")
        slots = assign_slots(placement, self._held(except_job=job_id))
        self._attached[job_id] = p
        self._slots[job_id] = slots
        atomic_write_json(job_dir / "launch.json", {"pid": p.pid, "create_time": p.create_time(), "cmd": cmd,
                                                    "slots": slots, "adopted": True})
        with open(job_dir / "output.log", "ab") as log:
            log.write(f"\n== {time.strftime('%Y-%m-%d %H:%M:%S')} adopted coordinator {p.pid} (it holds the job lock)\n"
                      .encode())

    def resize(self, launch: Launch) -> None:
        """Re-book the job's slots for ``placement`` and tell the runtime its new count, batch and devices.

        Without a placement a job on one node stays there; one spread over nodes keeps its books (and devices)."""
        job_id, job_dir, num_gpus, placement = launch.job_id, launch.job_dir, launch.num_gpus, launch.placement or None
        current = self._slots.get(job_id, {})
        if placement is None and len(current) == 1:
            placement = {next(iter(current)): num_gpus}
        devices = None
        if placement is not None and (current or placement):
            before = self._before.pop(job_id, None)
            back = self._releasing.get(job_id, {})   # its own still: a shrink the runtime abandoned trains there
            own = {n: [*current.get(n, ()), *back.get(n, ())] for n in {*current, *back}}
            if before is not None and _counts(before) == _counts(placement) and _within(before, own):
                slots = before   # back to slots it still holds (a resize the runtime abandoned): its workers sit there
                self._take_back(job_id, before)
            else:
                slots = resize_slots(current, placement, self._held(except_job=job_id))
            self._before[job_id] = current
            self._slots[job_id] = slots
            if launch.hold_given_back:
                self._hold_back(job_id, current, slots)
            if self.devices:
                devices = slot_devices(slots, self.devices)
            self._record_slots(job_id, Path(job_dir))
        write_control(Path(job_dir), num_gpus, launch.batch_size, launch.generation, devices=devices)
        fault_point("resize-sent")

    def _hold_back(self, job_id: int, before: Mapping[str, Sequence[int]], after: Mapping[str, Sequence[int]]) -> None:
        """Book the slots ``before`` has and ``after`` lacks to no job (added to what the job holds back already)."""
        held = self._releasing.setdefault(job_id, {})
        for node, idx in before.items():
            gone = set(idx) - set(after.get(node, ())) - set(held.get(node, ()))
            if gone:
                held[node] = sorted(set(held.get(node, ())) | gone)
        if not held:
            del self._releasing[job_id]

    def _take_back(self, job_id: int, slots: Mapping[str, Sequence[int]]) -> None:
        """The job's ``slots`` are booked to it again: none of them stays held back."""
        held = {n: [i for i in idx if i not in slots.get(n, ())] for n, idx in self._releasing.pop(job_id, {}).items()}
        if any(held.values()):
            self._releasing[job_id] = {n: idx for n, idx in held.items() if idx}

    def release(self, job_id: int, job_dir: Path) -> None:
        """The job trains at its booked size (the service saw a step there): its held-back slots are free."""
        if self._releasing.pop(job_id, None) is not None:
            self._record_slots(job_id, Path(job_dir))

    def _record_slots(self, job_id: int, job_dir: Path) -> None:
        """launch.json keeps the books across a service restart (``attach`` reads them back)."""
        try:
            info = json.loads(read_regular(job_dir / "launch.json"))
        except (OSError, ValueError):
            return
        books = {"slots": self._slots.get(job_id, {}), "releasing": self._releasing.get(job_id),
                 "before": self._before.get(job_id)}
        info = {k: v for k, v in {**info, **books}.items() if k not in books or v is not None}
        atomic_write_json(job_dir / "launch.json", info)

    def stop(self, job_id: int, job_dir: Path) -> None:
        """SIGTERM the coordinator's process group, SIGKILL after the grace period (``stop_grace``: longer for a job
        whose steps are slow); its checkpoint stays."""
        proc = self._procs.pop(job_id, None)
        ps = self._attached.pop(job_id, None)
        self._forget(job_id)
        pid = proc.pid if proc else (ps.pid if ps else None)
        if pid is None:
            return
        signal_group(pid, signal.SIGTERM)   # start_new_session=True: the coordinator leads its group
        deadline = time.monotonic() + stop_grace(job_dir, self.stop_grace_s)   # its step in flight, checkpointed
        while time.monotonic() < deadline and _alive(proc, ps):
            time.sleep(0.05)
        if _alive(proc, ps):
            signal_group(pid, signal.SIGKILL)
        if proc:
            proc.wait()

    # -- observation -----------------------------------------------------------------------------
    def poll(self, job_id: int, job_dir: Path) -> PollResult:
        proc, ps = self._procs.get(job_id), self._attached.get(job_id)
        if proc is None and ps is None and not self.attach(job_id, job_dir):
            return ended_unwatched(job_dir)   # its failure while no service watched once read as gone: run again
        proc, ps = self._procs.get(job_id), self._attached.get(job_id)
        if _alive(proc, ps):
            return PollResult("running")
        rc = proc.wait() if proc else None
        self._procs.pop(job_id, None)
        self._attached.pop(job_id, None)
        self._forget(job_id)   # no process of it is left: nothing it held back is in use
        return coordinator_exit(rc, job_dir)

    def attach(self, job_id: int, job_dir: Path) -> bool:
        """Re-adopt a coordinator started by an earlier service process, if it is still that process; without a
        valid launch.json, the live holder of the job's lock (``train/fence.py``). False proves none is alive."""
        if job_id in self._procs or job_id in self._attached:
            return True
        info: dict = {}
        try:
            info = json.loads(read_regular(Path(job_dir) / "launch.json"))
            p = psutil.Process(info["pid"])
            if abs(p.create_time() - info["create_time"]) > 1e-3 or p.status() == psutil.STATUS_ZOMBIE:
                raise psutil.NoSuchProcess(info["pid"])
        except (OSError, ValueError, KeyError, TypeError, AttributeError, psutil.Error):
            if not fence.is_held(job_dir):
                return False
            self._adopt_holder(job_id, Path(job_dir), info.get("cmd", []) if isinstance(info, dict) else [],
                               {})
            return True
        self._attached[job_id] = p
        self._slots[job_id] = info.get("slots", {})  # its GPUs stay taken across a service restart
        if info.get("releasing"):                    # and so do those held back from a grow given up
            self._releasing[job_id] = info["releasing"]
        if info.get("before"):
            self._before[job_id] = info["before"]
        return True

    def booked(self, job_id: int) -> dict[str, int] | None:
        return _counts(self._slots[job_id]) if self._slots.get(job_id) else None

    def shutdown(self) -> None:
        """Leave coordinators running (a restarted service re-attaches); just forget them."""
        self._procs.clear()
        self._attached.clear()
        self._slots.clear()
        self._before.clear()
        self._releasing.clear()

    def _forget(self, job_id: int) -> None:
        """Drop a job's books: it has no process left (or is about to start afresh)."""
        self._slots.pop(job_id, None)
        self._before.pop(job_id, None)
        self._releasing.pop(job_id, None)

    def stop_all(self) -> None:
        for job_id in list(self._procs) + list(self._attached):
            self.stop(job_id, Path("."))


def _counts(placement: Mapping[str, Sequence[int] | int]) -> dict[str, int]:
    return {n: v if isinstance(v, int) else len(v) for n, v in placement.items() if v}


def _within(slots: Mapping[str, Sequence[int]], held: Mapping[str, Sequence[int]]) -> bool:
    return all(set(idx) <= set(held.get(node, ())) for node, idx in slots.items())


def _alive(proc: subprocess.Popen | runtime_forkserver.ForkedCoordinator | None, ps: psutil.Process | None) -> bool:
    if proc is not None:
        return proc.poll() is None if isinstance(proc, subprocess.Popen) else not proc.ended()
    if ps is not None:
        try:
            return ps.is_running() and ps.status() != psutil.STATUS_ZOMBIE
        except psutil.Error:
            return False
    return False
