"""Start real training jobs (coordinator + worker processes) for the e2e tests."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from dlsched.train.progress_log import read_progress

REPO = Path(__file__).resolve().parents[2]
MLP = f"{REPO / 'examples' / 'mlp.py'}:make_job"
GATED = f"{Path(__file__).with_name('gated_job.py')}:make_job"   # the MLP with a test's gate (gated_job.py)


def start_job(job_dir: Path, workers: int, *extra: str, entry: str = MLP, env: dict | None = None,
              new_session: bool = False) -> subprocess.Popen:
    """``new_session``: the coordinator leads its own process group, as the local backend starts it."""
    env = {**os.environ, **(env or {}),
           "PYTHONPATH": os.pathsep.join([str(REPO / "src"), os.environ.get("PYTHONPATH", "")])}
    cmd = [sys.executable, "-m", "dlsched.train.run", "--job-dir", str(job_dir), "--entry", entry,
           "--workers", str(workers), "--threads", "1", *extra]
    return subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=new_session)


def step_losses(job_dir: Path) -> list[float]:
    return [r["loss"] for r in read_progress(job_dir) if "event" not in r]


def events(job_dir: Path, name: str) -> list[dict]:
    return [r for r in read_progress(job_dir) if r.get("event") == name]


def wait_for_step(job_dir: Path, step: int, proc: subprocess.Popen, timeout: float = 60) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        steps = [r["step"] for r in read_progress(job_dir) if "event" not in r]
        if steps and steps[-1] >= step:
            return
        if proc.poll() is not None:
            raise AssertionError(f"job ended early rc={proc.returncode}: {proc.stdout.read()}")
        time.sleep(0.05)
    raise AssertionError(f"step {step} not reached in {timeout}s")


def finish(proc: subprocess.Popen, timeout: float = 90) -> None:
    out, _ = proc.communicate(timeout=timeout)
    assert proc.returncode == 0, out


def wait_for_event(job_dir: Path, name: str, count: int, proc: subprocess.Popen, timeout: float = 60) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if len(events(job_dir, name)) >= count:
            return
        if proc.poll() is not None:
            raise AssertionError(f"job ended before {count} {name} events rc={proc.returncode}")
        time.sleep(0.05)
    raise AssertionError(f"{count} {name} events not seen in {timeout}s")


def wait_for_standby(job_dir: Path, count: int, proc: subprocess.Popen, timeout: float = 60) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            if json.loads((job_dir / "status.json").read_text()).get("standby_ready", 0) >= count:
                return
        except FileNotFoundError:
            pass
        if proc.poll() is not None:
            raise AssertionError(f"job ended before {count} standby workers were ready")
        time.sleep(0.05)
    raise AssertionError(f"{count} standby workers not ready in {timeout}s")
