"""Resize of a user-script (dlsched.torch) job with prepared standby workers: stall and pause.

One job: ``bench/torch_overhead_job.py --mode dlsched`` under ``python -m dlsched.train.run --workers 1
--standby 2``; once both spares are ready, control.json asks for 3 workers, later for 2. From the runtime's
``resized`` events: pause = request -> first step at the new size; stall = the old group's stop -> that step
(what training loses). Target (issue 13): stall <= 2 s with standby workers. CPU, gloo; no GPU was lent.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))

from dlsched.train.files import write_control  # noqa: E402

from dlsched.train.progress_log import read_progress


def wait(pred, proc, timeout=300.0):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if pred():
            return
        if proc.poll() is not None:
            raise RuntimeError(f"job ended early (exit {proc.returncode})")
        time.sleep(0.05)
    raise TimeoutError("bench job did not get there in time")


def main() -> None:
    with tempfile.TemporaryDirectory() as d:
        job = Path(d) / "job"
        env = {**os.environ, "PYTHONPATH": str(REPO / "src"), "OMP_NUM_THREADS": "1"}
        proc = subprocess.Popen([sys.executable, "-m", "dlsched.train.run", "--job-dir", str(job), "--workers", "1",
                                 "--standby", "2", "--threads", "1", "--no-replace-stragglers", "--", "python",
                                 str(REPO / "bench" / "torch_overhead_job.py"), "--mode", "dlsched", "--steps", "2000",
                                 "--batch", "48", "--width", "256", "--step-s", "0.02", "--out", str(Path(d) / "o.json")],
                                env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        try:
            status = lambda: json.loads((job / "status.json").read_text()) if (job / "status.json").exists() else {}
            resized = lambda: [r for r in read_progress(job) if r.get("event") == "resized"]
            for generation, workers in enumerate([3, 2], start=1):
                wait(lambda: status().get("standby_ready", 0) >= 2 or generation > 1, proc)
                write_control(job, workers, None, generation)
                wait(lambda: len(resized()) >= generation, proc)
            for e in resized():
                print(f"resize {e['from_workers']} -> {e['workers']}: stall {e['stall_s']:.2f} s, "
                      f"pause {e['pause_s']:.2f} s   target stall <= 2 s   {'MET' if e['stall_s'] <= 2 else 'MISSED'}")
        finally:
            os.killpg(proc.pid, signal.SIGKILL)  # the coordinator, its workers and its standbys
            proc.wait()


if __name__ == "__main__":
    main()
