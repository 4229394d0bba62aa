"""The workers' forkserver: forked from a thread-free coordinator, spawned otherwise; either way it ignores
SIGTERM and its workers hold none of the coordinator's descriptors (the job's lock among them)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from dlsched.paths import pythonpath_with_src

PROBE = r'''
import json, multiprocessing, multiprocessing.forkserver, os, sys, threading, time

import torch  # noqa: F401  (a coordinator has torch loaded when it starts the server)

from dlsched.train import worker_forkserver


def report(path):
    fds = {os.readlink(f"/proc/self/fd/{fd}") for fd in os.listdir("/proc/self/fd") if fd.isdigit()
           and os.path.exists(f"/proc/self/fd/{fd}")}
    with open(path, "w") as f:
        json.dump({"ppid": os.getppid(), "fds": sorted(fds)}, f)


if __name__ == "__main__":
    lock_path, mode, out = sys.argv[1:]
    lock = os.open(lock_path, os.O_RDONLY)   # stands for the job folder's lock the coordinator holds
    if mode == "thread":
        threading.Thread(target=threading.Event().wait, daemon=True).start()
    print("written-before-the-fork", end=" ")   # stdout is a pipe: block-buffered, still unflushed
    worker_forkserver.start_shielded(fork=True)
    server = multiprocessing.forkserver._forkserver._forkserver_pid
    if mode == "restart":   # the server died: the next start replaces it, still deaf to SIGTERM
        os.kill(server, 9)
        while open(f"/proc/{server}/stat").read().rsplit(")", 1)[1].split()[0] != "Z":
            time.sleep(0.01)
        worker_forkserver.start_shielded(fork=True)
        server = multiprocessing.forkserver._forkserver._forkserver_pid
    p = multiprocessing.get_context("forkserver").Process(target=report, args=(out,))
    p.start()
    p.join()
    with open(f"/proc/{server}/status") as f:
        ignored = int(next(l for l in f if l.startswith("SigIgn:")).split()[1], 16)
    with open(f"/proc/{server}/cmdline", "rb") as f:
        cmdline = f.read().decode().split("\0")
    print(json.dumps({"server": server, "exitcode": p.exitcode, "sigterm_ignored": bool(ignored >> 14 & 1),
                      "server_cmdline": cmdline, "own_cmdline": open("/proc/self/cmdline").read().split("\0"),
                      "worker": json.load(open(out))}))
'''


def run_probe(tmp_path: Path, mode: str) -> dict:
    probe = tmp_path / "probe.py"
    probe.write_text(PROBE)
    lock = tmp_path / "job.lock"
    lock.write_text("")
    env = {**os.environ, "PYTHONPATH": pythonpath_with_src(os.environ.get("PYTHONPATH"))}
    env.pop("PYTHONUNBUFFERED", None)   # a coordinator's stdout (output.log) is block-buffered
    r = subprocess.run([sys.executable, str(probe), str(lock), mode, str(tmp_path / "worker.json")],
                       capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0, r.stderr
    assert r.stdout.count("written-before-the-fork") == 1, r.stdout   # no worker wrote it again
    out = json.loads(r.stdout.strip().split("written-before-the-fork ", 1)[1])
    assert out["exitcode"] == 0
    assert out["worker"]["ppid"] == out["server"]      # the worker came from the server
    assert out["sigterm_ignored"]                      # a stop to the job's process group reaches the coordinator only
    assert str(lock) not in out["worker"]["fds"]       # a worker never holds the job's lock
    return out


def test_a_thread_free_coordinator_forks_the_server_itself_and_pays_no_second_torch_import(tmp_path):
    out = run_probe(tmp_path, "alone")
    assert out["server_cmdline"] == out["own_cmdline"]   # a fork: the same command line, no fresh interpreter


def test_a_coordinator_running_a_thread_spawns_the_server_as_multiprocessing_does(tmp_path):
    out = run_probe(tmp_path, "thread")
    assert any("multiprocessing.forkserver" in part for part in out["server_cmdline"])


def test_a_server_that_died_is_replaced_and_the_replacement_ignores_sigterm_too(tmp_path):
    out = run_probe(tmp_path, "restart")
    assert any("multiprocessing.forkserver" in part for part in out["server_cmdline"])
