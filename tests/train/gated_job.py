"""The example MLP job with a gate that holds chosen worker processes at a chosen moment (e2e tests).

Each worker process takes a ticket when it builds its model (``O_EXCL`` files in ``gate_dir``, so
tickets are 0, 1, 2, ... in the order workers start); the first ``free`` tickets pass, later ones wait
until ``gate_dir/open`` exists: while building the model (``hold="prepare"``: the worker never gets
ready) or when the model is moved to its device at the start of a generation (``hold="join"``: ready,
but it never joins the group). A waiting worker writes ``gate_dir/waiting-<ticket>`` first: the
observable event a test waits for before acting. Only workers build models; the coordinator only
calls ``make_job``, so it takes no ticket.

``hold="pause"`` instead holds the run's progress, not its workers: every batch read waits while
``gate_dir/pause`` exists, so a test can act between two steps however slowly the machine runs; a batch read while
``gate_dir/full`` exists raises ENOSPC, as the job's own write to a full disk does.
"""
from __future__ import annotations

import dataclasses
import errno
import os
import sys
import time
from pathlib import Path

from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))
import mlp  # noqa: E402


class Gate:
    def __init__(self, gate_dir: Path, free: int):
        self.dir, self.free, self.ticket = gate_dir, free, None

    def take_ticket(self) -> None:
        i = 0
        while True:
            try:
                os.close(os.open(self.dir / f"ticket-{i}", os.O_CREAT | os.O_EXCL | os.O_WRONLY))
                self.ticket = i
                return
            except FileExistsError:
                i += 1

    def wait(self) -> None:
        if self.ticket is None or self.ticket < self.free or (self.dir / "open").exists():
            return
        (self.dir / f"waiting-{self.ticket}").touch()
        while not (self.dir / "open").exists():
            time.sleep(0.02)


class HeldAtJoin(nn.Module):
    """The MLP, whose move to the generation's device waits at the gate."""

    def __init__(self, net: nn.Module, gate: Gate):
        super().__init__()
        self.net, self._gate = net, gate

    def forward(self, x):
        return self.net(x)

    def to(self, *args, **kwargs):
        self._gate.wait()
        return super().to(*args, **kwargs)


def make_job(gate_dir: str, free: int = 0, hold: str = "prepare", **params) -> "mlp.TrainJob":
    job = mlp.make_job(**params)
    gate_path = Path(gate_dir)
    gate_path.mkdir(parents=True, exist_ok=True)
    if hold == "pause":
        def paused_batch(ids):
            while (gate_path / "pause").exists():
                time.sleep(0.02)
            if (gate_path / "full").exists():
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(gate_path / "full"))
            return job.get_batch(ids)
        return dataclasses.replace(job, get_batch=paused_batch)

    def make_model() -> nn.Module:
        gate = Gate(gate_path, free)
        gate.take_ticket()
        if hold == "prepare":
            gate.wait()
        return HeldAtJoin(job.make_model(), gate if hold == "join" else Gate(gate_path, 0))

    return dataclasses.replace(job, make_model=make_model)
