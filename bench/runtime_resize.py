"""Rescale pause: stop-free resize vs full checkpoint-restart, side by side in one run (issue 5).

Pause = time from the resize command to the first completed step at the new size.
  stop-free, cold: control.json asks for M workers; the new processes start and build the model
                   while the old group keeps training, then a one-step stop, broadcast, new group.
  stop-free, standby: the same with prepared spare workers (--standby), so only the stop remains.
  checkpoint-restart (what TorchElastic does): stop every worker right after a checkpoint, start
                   the job again with M workers, every worker loads the checkpoint.
"stall" = how long training actually stood still (stop flag → first step at the new size).
Target: pause ≤ 2 s for ResNet-20 on CPU.
"""
from __future__ import annotations

import argparse
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


def start(job_dir: Path, workers: int, a, *extra: str) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "dlsched.train.run", "--job-dir", str(job_dir), "--entry", a.entry, "--workers",
           str(workers), "--batch-size", str(a.batch), "--threads", str(a.threads), "--no-replace-stragglers",
           "--param", f"num_samples={a.batch * 20}", "--param", f"epochs={max(1, a.steps // 20)}", *extra]
    return subprocess.Popen(cmd, env={**os.environ, "PYTHONPATH": str(REPO / "src")}, start_new_session=True)


def wait(pred, proc, timeout=300):
    deadline = time.time() + timeout
    while time.time() < deadline:
        got = pred()
        if got:
            return got
        if proc.poll() is not None:
            raise SystemExit(f"job ended early (rc {proc.returncode})")
        time.sleep(0.01)
    raise SystemExit("timed out")


def steps(job_dir):
    return [r for r in read_progress(job_dir) if "event" not in r]


def stop_free(job_dir: Path, a, standby: int) -> tuple[float, float, float, float]:
    proc = start(job_dir, a.frm, a, "--ckpt-every", "0", "--standby", str(standby))
    wait(lambda: len(steps(job_dir)) >= 3, proc)
    if standby:
        wait(lambda: json.loads((job_dir / "status.json").read_text()).get("standby_ready", 0) >= standby, proc)
    write_control(job_dir, a.to, None, 1)
    ev = wait(lambda: [r for r in read_progress(job_dir) if r.get("event") == "resized"], proc)[0]
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    step_s = [r["time"] for r in steps(job_dir)]
    return ev["pause_s"], ev["stall_s"], ev["regroup_s"], step_s[2] - step_s[1]


def checkpoint_restart(job_dir: Path, a) -> tuple[float, int]:
    proc = start(job_dir, a.frm, a, "--ckpt-every", "3")
    wait(lambda: any(r.get("event") == "checkpoint" for r in read_progress(job_dir)), proc)
    lost = steps(job_dir)[-1]["step"] - 3
    requested = time.time()
    os.killpg(proc.pid, signal.SIGKILL)  # stop every worker (they lose their in-memory state)
    proc.wait()
    proc = start(job_dir, a.to, a, "--ckpt-every", "0")
    first = wait(lambda: [r for r in steps(job_dir) if r["time"] > requested], proc)[0]
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    return first["time"] - requested, lost


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--entry", default=str(REPO / "examples" / "resnet20.py") + ":make_job")
    ap.add_argument("--frm", type=int, default=2)
    ap.add_argument("--to", type=int, default=4)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--steps", type=int, default=400, help="steps in the job (20 per epoch; it is killed long before)")
    ap.add_argument("--threads", type=int, default=1)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        cold = stop_free(Path(d) / "cold", a, 0)
        warm = stop_free(Path(d) / "warm", a, max(0, a.to - a.frm))
        restart, lost = checkpoint_restart(Path(d) / "restart", a)
    name = Path(a.entry.split(":")[0]).stem
    print(f"resize {a.frm}->{a.to} workers, {name}, global batch {a.batch}, CPU, {a.threads} thread(s)/worker:")
    for label, r in (("cold new workers", cold), ("standby workers", warm)):
        print(f"  stop-free ({label + '):':18s} pause {r[0]:.2f} s  (training stalled {r[1]:.2f} s, of which "
              f"regroup+broadcast {r[2]:.2f} s; one step at {a.frm} workers takes {r[3]:.2f} s)")
    print(f"  checkpoint-restart:             pause {restart:.2f} s  (+{lost} steps redone since the checkpoint)")
    print(f"  ratio checkpoint-restart / stop-free: cold {restart / cold[0]:.1f}x, standby {restart / warm[0]:.1f}x; "
          f"target pause <= 2 s")


if __name__ == "__main__":
    main()
