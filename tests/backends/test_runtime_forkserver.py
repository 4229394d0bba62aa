"""The local backend's coordinators forked from its runtime forkserver (src/dlsched/backends/runtime_forkserver.py),
with the real runtime: once the server has loaded, a start forks; the coordinator trains, stops and finishes as a
spawned one does, its exit code known."""
import json
import os
import subprocess
from pathlib import Path

import psutil

from tests.waiting import wait_until
from dlsched.backends import runtime_forkserver
from dlsched.backends.base import Launch, read_progress
from dlsched.backends.local import DEFAULT_RUNTIME, LocalBackend
from dlsched.spec import load_job_spec
from dlsched.train.files import read_status

REPO = Path(__file__).resolve().parents[2]


def mlp(samples: int):
    return load_job_spec(json.dumps({"name": "m", "entry": "examples/mlp.py:make_job", "gpus": 1, "batch_size": 12,
                                     "params": {"num_samples": samples, "throttle_s": 0.05}}), fmt="json")


def steps(d):
    return [r for r in read_progress(d, 0)[0] if "event" not in r]


def test_a_start_once_the_server_loaded_forks_a_coordinator_that_trains_stops_resumes_and_says_its_exit_code(tmp_path):
    b = LocalBackend(runtime=[*DEFAULT_RUNTIME, "--threads", "1", "--ckpt-every", "3"], cwd=REPO)
    one, two, three, four = (tmp_path / str(i) for i in (1, 2, 3, 4))
    try:
        # spawned where no server of this process has loaded yet; the second start of a process starts one
        b.start(Launch(1, mlp(120), one, 1, 12))
        b.start(Launch(4, mlp(120), four, 1, 12))
        wait_until(lambda: (live := [s for s in runtime_forkserver._servers.values() if not s.lost])
                   and all(s.loaded() for s in live), 180, "the runtime forkserver loaded")
        job = Launch(2, mlp(1200), two, 1, 12)
        b.start(job)
        forked = b._procs[2]
        assert not isinstance(forked, subprocess.Popen)
        coordinator, server = psutil.Process(forked.pid), psutil.Process(forked._server._proc.pid)
        # a fork of the server, never exec'd: it has the server's modules, torch among them, and its command line
        assert coordinator.ppid() == server.pid != os.getpid() and coordinator.cmdline() == server.cmdline()
        wait_until(lambda: steps(two), 120, "the forked coordinator's first step")
        # its CPU up to its first step imported nothing: a spawned one spends ~2.5 CPU-s on torch and dynamo alone
        assert sum(coordinator.cpu_times()[:2]) < 2.0, coordinator.cpu_times()
        wait_until(lambda: len(steps(two)) >= 4, 120, "its 4th step")
        b.stop(2, two)                                  # SIGTERM: checkpoint, exit 143, as a spawned coordinator
        assert forked.returncode == 143 and read_status(two)["state"] == "stopped"
        b.start(job)                                     # resumed from its checkpoint, forked again
        assert not isinstance(b._procs[2], subprocess.Popen)
        assert wait_until(lambda: b.poll(2, two).state != "running", 180, "job 2 finished") and \
            read_status(two)["state"] == "finished"
        for i, d in ((1, one), (4, four)):
            assert wait_until(lambda: b.poll(i, d).state != "running", 120, f"job {i} ended")
            assert read_status(d)["state"] == "finished"
        # a stop at once, inside its start-up: the SIGTERM waits for the runtime's handler (blocked from the fork on)
        b.start(Launch(3, mlp(1200), three, 1, 12))
        early = b._procs[3]
        assert not isinstance(early, subprocess.Popen)
        b.stop(3, three)
        assert early.returncode == 143, early.returncode
    finally:
        b.stop_all()
