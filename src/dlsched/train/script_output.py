"""A script's own output, echoed from the workers' logs to the coordinator's stdout, one prefixed line each.

Each worker writes its stdout and stderr to ``DIR/logs/worker-<id>.log`` (kept as the record, and what
``dlsched logs --worker K`` shows); a user who runs ``dlsched train -- python train.py`` as they ran ``torchrun``
expects their prints and a failing rank's traceback in the terminal (and, under the service, in ``dlsched logs``).
Read from the files, not a pipe: a worker must never block on, or die with, a coordinator's stdout.
"""
from __future__ import annotations

from pathlib import Path
from typing import Callable

CHUNK = 1 << 16  # bytes read from one log per pass: a chatty worker cannot hold up the coordinator's loop


class ScriptOutput:
    def __init__(self, logs: Path, write: Callable[[str], None] | None):
        self.logs, self.write = logs, write  # write None: nothing to echo (a make_job job has no script)
        # log -> offset echoed up to; workers append, so a resumed job's logs hold the last run's lines: not echoed
        self.read_to: dict[Path, int] = {log: log.stat().st_size for log in logs.glob("worker-*.log")} if write else {}

    def echo(self, final: bool = False) -> None:
        """Echo the complete lines each worker wrote since the last call (``final``: the unfinished one too)."""
        if self.write is None:
            return
        for log in sorted(self.logs.glob("worker-*.log"), key=_worker_id):
            start = self.read_to.get(log, 0)
            try:
                with open(log, "rb") as f:
                    f.seek(start)
                    data = f.read(CHUNK if not final else -1)
            except OSError:
                continue
            whole = final or (len(data) == CHUNK and b"\n" not in data)  # a line longer than a chunk goes in pieces
            end = len(data) if whole else data.rfind(b"\n") + 1
            if end <= 0:
                continue
            self.read_to[log] = start + end
            prefix = f"[worker {_worker_id(log)}] "
            for line in data[:end].decode(errors="replace").splitlines():
                self.write(prefix + line)


def _worker_id(log: Path) -> int:
    return int(log.stem.removeprefix("worker-"))
