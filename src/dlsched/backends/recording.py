"""A backend that starts nothing and records what it was asked to do.

Why: the scheduling round must be measurable (``bench/service_round_latency.py``) and its decisions testable
without processes; both need the same inert stand-in, so it lives here once rather than in a test and a bench."""
from __future__ import annotations

from dlsched.backends.base import Backend, PollResult


class RecordingBackend(Backend):
    """Every job it "starts" reports ``running`` forever; ``calls`` lists (action, job_id, ...) in order."""

    name = "recording"

    def __init__(self) -> None:
        self.calls: list[tuple] = []

    def start(self, launch) -> None:
        self.calls.append(("start", launch.job_id, launch.num_gpus))

    def resize(self, launch) -> None:
        self.calls.append(("resize", launch.job_id))

    def stop(self, *args) -> None:
        self.calls.append(("stop",) + args[:1])

    def poll(self, job_id, job_dir) -> PollResult:
        return PollResult("running")

    def attach(self, job_id, job_dir) -> bool:
        return True

    def shutdown(self) -> None:
        pass
