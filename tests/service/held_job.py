"""The example MLP job held at its first batch until ``gate`` exists: an ordinary job that keeps its GPUs for as
long as a test needs (the ensemble test opens the gate once the ensemble has planned inside its first share)."""
from __future__ import annotations

import dataclasses
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))
import mlp  # noqa: E402


def make_job(gate: str, **params):
    job = mlp.make_job(**params)

    def get_batch(ids):
        while not os.path.exists(gate):
            time.sleep(0.05)
        return job.get_batch(ids)

    return dataclasses.replace(job, get_batch=get_batch)
