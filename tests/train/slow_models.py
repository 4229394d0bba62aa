"""An ensemble member with a floor on its step time, so that it is still training when a test acts (a stop, a new
share) on a fast machine as on a busy one (the tiny CNNs alone finish in seconds)."""
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples" / "ensemble"))
from models import WideCNN  # noqa: E402


class SlowWideCNN(WideCNN):
    def __init__(self, step_s: float = 0.1, **kw) -> None:
        super().__init__(**kw)
        self.step_s = step_s

    def forward(self, x):
        if self.training:
            time.sleep(self.step_s)
        return super().forward(x)


class DiskFillingCNN(SlowWideCNN):
    """A training step while ``marker`` exists raises ENOSPC, as the member's own write to a full disk does."""

    def __init__(self, marker: str = "", **kw) -> None:
        super().__init__(**kw)
        self.marker = marker

    def forward(self, x):
        if self.training and Path(self.marker).exists():
            import errno
            import os
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), self.marker)
        return super().forward(x)


class StallingCNN(WideCNN):
    """Hangs in its constructor (a profiling rank that never reports), every time or only while ``marker`` does not
    exist yet (it then creates it: the measurement's second attempt goes through)."""

    def __init__(self, marker: str = "", **kw) -> None:
        if not marker or not Path(marker).exists():
            if marker:
                Path(marker).touch()
            time.sleep(3600)
        super().__init__(**kw)


class TeardownHangingCNN(WideCNN):
    """Its rank's process-group teardown never returns (a rank waiting on a FileStore's file that was removed,
    DeepSpeed #7941): built inside the profiling rank, it replaces that rank's ``destroy_process_group``."""

    def __init__(self, **kw) -> None:
        import torch.distributed as dist

        dist.destroy_process_group = lambda *a, **k: time.sleep(3600)
        super().__init__(**kw)


class ProfiledFastCNN(WideCNN):
    """Untimed for its first ``fast_steps`` training steps in a process, then ``step_s`` a step: its profile (five
    steps in processes of their own) runs far faster than it trains, as a profile taken on a quiet machine does
    next to one training on a busy one."""

    def __init__(self, step_s: float = 0.2, fast_steps: int = 8, **kw) -> None:
        super().__init__(**kw)
        self.step_s, self.fast_steps, self.steps = step_s, fast_steps, 0

    def forward(self, x):
        if self.training:
            self.steps += 1
            if self.steps > self.fast_steps:
                time.sleep(self.step_s)
        return super().forward(x)


class PidRecordingCNN(SlowWideCNN):
    """Appends the id of the process that builds it to ``pid_file``: a member re-formed is built again in a new
    process, one that trains on is not."""

    def __init__(self, pid_file: str = "", **kw) -> None:
        super().__init__(**kw)
        import os
        with open(pid_file, "a") as f:
            f.write(f"{os.getpid()}\n")
