"""A script's step record (``dlsched.train.protocol``'s progress schema), as rank 0 emits it at each commit."""
from __future__ import annotations

import time


# below it a rank's own time is noise (a busy machine's scheduling), and a slowness that small costs a step little:
# every rank under it reads alike, so the straggler rule flags none of them
OWN_TIME_FLOOR_S = 0.02


class StepRecords:
    """Builds the records; the part that changes only at a regroup, a batch change, an epoch or a measurement is
    kept between steps (a 10 ms step cannot afford rebuilding it)."""

    def __init__(self):
        self._key: tuple | None = None
        self._context: dict = {}

    def build(self, s, n: int, wall: float, times: list[float]) -> dict:
        """Session ``s``'s record of the step just committed: ``n`` samples in ``wall`` s, ``times`` per rank."""
        table = s.table
        key = (s.layout, s.epoch, s.epochs, s.generation, s.global_batch, s.noise.updates)
        if key != self._key:
            self._key = key
            self._context = {
                "epoch": s.epoch, "generation": s.generation, "workers": s.world,
                "batch_size": s.global_batch, "epochs": s.epochs,
                "grad_noise": s.noise.record(s._reference())}
        metrics, s.metrics = s.metrics, {}
        setup_s, s.setup_s = s.setup_s, None
        # per rank, the step's mean share over its own time: the straggler rule compares the ranks' times. Over its
        # own share, a rank given one sample less (8 over 3: 3, 3, 2) read 2/3 as fast while every rank waited
        # alike, and was replaced again and again; shares a scheduler sized to the devices' speeds should take alike
        per_worker = [n / len(times) / max(t, OWN_TIME_FLOOR_S) for t in times]
        return {"time": time.time(), "step": s.step, **self._context,
                "samples": table.trained, "total_samples": table.planned(s.epochs) if s.epochs else None,
                "loss": metrics.pop("loss", None),
                "samples_per_s": n / max(wall, 1e-9), "lr": s.step_lr, "lr_factor": s.step_lr_factor,
                "per_worker_samples_per_s": per_worker,
                "table": list(table.offsets), "setup_s": setup_s, "metrics": metrics}
