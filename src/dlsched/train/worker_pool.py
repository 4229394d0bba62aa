"""The coordinator's worker processes: start them (one per device), watch, reap and kill them."""
from __future__ import annotations

import json
import os
from pathlib import Path

from dlsched.train.devices import free_devices, visible_devices
from dlsched.train.launcher import WorkerHandle
from dlsched.train.protocol import WorkerEnv


class WorkerPool:
    def __init__(self, opts, launcher, store, job_dir: Path, devices: list[str]):
        self.o = opts
        self.launcher = launcher
        self.store = store
        self.dir = job_dir
        self.devices = devices  # the job's devices; a resize may move it to others
        self.procs: dict[int, WorkerHandle] = {}
        self.next_wid = 0
        self.leaving: list[int] = []  # scaled-in workers, exiting on their own
        self.device_of: dict[int, str] = {}  # worker -> the one device it may use ("" = CPU)
        self.seen: dict[int, str | None] = {}  # worker -> CUDA_VISIBLE_DEVICES the worker itself reported

    def spawn(self, generation: int, devices: list[str] | int, world: int, joining: bool = False) -> list[int]:
        """Start workers, one per entry of ``devices`` (or that many on free devices); ``joining``: newcomers to a
        running group, whose generation's plan waits for them to be ready."""
        if isinstance(devices, int):
            devices = free_devices(self.devices, (self.device_of[w] for w in self.procs), devices)
        threads = self.o.threads or max(1, (os.cpu_count() or 1) // max(world, 1))
        store = f"{self.launcher.store_host}:{self.store.port}"
        wids = []
        for device in devices:
            wid, self.next_wid = self.next_wid, self.next_wid + 1
            log = self.dir / "logs" / f"worker-{wid}.log"
            if self.o.command:
                spec = WorkerEnv(store, wid, generation, str(self.dir), threads, self.o.max_local_batch,
                                 self.o.reference_batch, joining)
            else:
                spec = ["--store", store, "--worker-id", str(wid), "--generation", str(generation),
                        "--job-dir", str(self.dir), "--entry", self.o.entry, "--params", json.dumps(self.o.params),
                        "--threads", str(threads)]
            self.procs[wid] = self.launcher.start(spec, log, visible_devices(device, self.devices))
            self.device_of[wid] = device
            wids.append(wid)
        return wids

    def log_tail(self, wid: int) -> str:
        """The worker's last log line; a worker whose process never started (under Ray, its actor died first: its
        node was lost) has none."""
        try:
            lines = (self.dir / "logs" / f"worker-{wid}.log").read_text(errors="replace").strip().splitlines()
        except FileNotFoundError:
            return "(no log: it never started)"
        return lines[-1] if lines else ""

    def revoked(self, wids: list[int]) -> list[int]:
        """Those of ``wids`` whose reservation the backend took back (moved elsewhere): they leave."""
        return self.launcher.revoked({w: self.procs[w] for w in wids})

    def dead(self, wids: list[int]) -> list[int]:
        """Those of ``wids`` that exited with an error."""
        return [w for w in wids if self.procs[w].poll() not in (None, 0)]

    def reap_leaving(self) -> None:
        for w in [w for w in self.leaving if self.procs[w].poll() is not None]:
            self.leaving.remove(w)
            self._forget(w)

    def kill(self, wids: list[int]) -> None:
        for w in wids:
            if w in self.leaving:
                self.leaving.remove(w)
            p = self._forget(w)
            if p is not None and p.poll() is None:
                p.kill()
                p.wait()

    def _forget(self, wid: int) -> WorkerHandle | None:
        self.device_of.pop(wid, None)
        self.seen.pop(wid, None)
        return self.procs.pop(wid, None)
