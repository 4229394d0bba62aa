"""The x a job's loss curve is fitted on: its optimizer steps while its batch never changed, else reference-batch
steps, the samples trained over its first batch. A step at twice the batch trains twice the samples, so in steps a
curve bends at every batch change, and an LR schedule paced by samples (``dlsched.torch.schedule_pace``: epochs,
or the reference batch's steps) is no schedule in steps at all. Predictions go back to steps: along the records
behind the job, at the batch it trains at now ahead of it."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from dlsched.service.progress_history import ProgressHistory
from dlsched.train.files import planned_samples


@dataclass(frozen=True)
class ProgressAxis:
    unit: float                # samples in one x: the first batch
    past_x: np.ndarray         # x and step of each step logged (the last record of a step replayed after a restart)
    past_steps: np.ndarray
    batch_now: float

    @classmethod
    def of(cls, history: ProgressHistory) -> "ProgressAxis | None":
        """None while the job trained at one batch (x is the step), or where its records cannot place samples."""
        batches, samples, steps = history.column("batch_size"), history.column("samples"), history.column("step")
        ok = np.isfinite(batches) & (batches > 0) & np.isfinite(samples) & np.isfinite(steps)
        if not ok.any() or np.all(batches[ok] == batches[ok][0]):   # every round, a day's rows: no sort
            return None
        k, idx = np.unique(steps[ok][::-1], return_index=True)   # the last record of each step
        s = samples[ok][::-1][idx]
        if np.any(np.diff(s) <= 0):   # samples that do not grow with the steps: no map between them
            return None
        unit = float(batches[ok][0])
        return cls(unit, s / unit, k, float(batches[ok][-1]))

    def x(self, samples: np.ndarray) -> np.ndarray:
        return np.asarray(samples, float) / self.unit

    def steps(self, x) -> np.ndarray:
        """Steps at ``x``: interpolated along the steps logged, then one per ``batch_now`` samples."""
        x = np.asarray(x, float)
        x_now, step_now = self.past_x[-1], self.past_steps[-1]
        ahead = step_now + (x - x_now) * self.unit / self.batch_now
        return np.where(x > x_now, ahead, np.interp(x, self.past_x, self.past_steps))

    def plan_x(self, plan: dict) -> np.ndarray | None:
        """The x of an LR plan's steps (``train.files.planned_samples``); None for a plan that does not say its
        samples."""
        samples = planned_samples(plan)
        return None if samples is None else self.x(samples)
