"""How a job's coordinator process ended, read from its exit code and its ``status.json``: one reading for every
backend (the local and the Ray one each had their own, and they had drifted: a fenced coordinator was "ended (no
status)" locally, a stopped one failed its job on Ray).

A coordinator killed from outside (a signal: SIGKILL, the OOM killer), stopped (``status.json`` ``stopped``), out
of disk (``EXIT_NO_SPACE``) or fenced (``EXIT_FENCED``: another coordinator still held the job folder, nothing was
touched) did not fail its job: it is ``gone``, and the loop resumes it from its checkpoint, a bounded number of
times (``service/coordinator_loss.py``). A ``failed`` status stands whatever the exit code.
"""
from __future__ import annotations

from pathlib import Path

from dlsched.backends.base import PollResult, output_tail, read_status
from dlsched.train.fence import EXIT_FENCED
from dlsched.train.no_space import EXIT_NO_SPACE


def coordinator_exit(rc: int | None, job_dir: Path) -> PollResult:
    """``rc``: the coordinator's exit code, negative for a signal; None where it is unknown (a process adopted after
    a service restart is not this service's child)."""
    status = read_status(job_dir) or {}
    state = status.get("state")
    if state == "finished" and rc in (0, None):
        return PollResult("finished")
    if state != "failed" and (rc is None or rc < 0 or rc in (EXIT_FENCED, EXIT_NO_SPACE) or state == "stopped"):
        how = (f"killed by signal {-rc}" if rc is not None and rc < 0
               else "stopped: its job folder's disk is full" if rc == EXIT_NO_SPACE
               else f"fenced: another coordinator still held the job folder{output_tail(job_dir)}" if rc == EXIT_FENCED
               else f"ended ({state or 'no status'})")
        return PollResult("gone", f"coordinator {how}", fenced=rc == EXIT_FENCED)
    return PollResult("failed", status.get("error")
                      or (f"exit code {rc}" if rc is not None else "process ended") + output_tail(job_dir))
