"""Which steps carry the step scalars (stop flag, gradient noise, compute times, proposed batch) with several
workers: one in about every ``SYNC_S`` seconds. Each such step names the next one in its all-reduce (rank 0's
choice), so every rank agrees without asking; the steps between cost what plain DDP's do (no norms, no
second all-reduce), which is what keeps the wrapper cheap on short steps. The gradient noise is measured on
one sync step in about every ``NOISE_S`` (rank 0 names it too): its two passes over the gradients (each
local |g|² before the all-reduce, |g_B|² after) were the largest cost left on short CPU steps.
"""
from __future__ import annotations

import time

SYNC_S = 0.2  # seconds between sync steps: also the most a stop flag waits, beside flag_watch.FLAG_POLL_S
MAX_SYNC_GAP = 16  # steps between sync steps at most
NOISE_S = 1.0  # seconds between noise measurements (without noise_every): ~60 a minute, plenty for its EMA
NOISE_FIRST = 10  # sync steps measured back to back first: one estimate alone is often negative (|G|² < 0), and
                  # the EMA (θ = 0.9) settles over about 1/(1 - θ) = 10; a short job would otherwise report none


class SyncCadence:
    def __init__(self):
        self.next_sync = 1  # the step number of the next sync step
        self.measure_next = True  # whether the next sync step measures the gradient noise
        self.measured_at = -NOISE_S  # when this rank last began a measured step
        self.step_s = 0.0  # rank 0's EMA of the step time

    def due(self, step: int, world: int) -> bool:
        """Is ``step`` (the one about to run) a sync step? One worker: every step (nothing to agree on)."""
        return world == 1 or step >= self.next_sync

    def gap(self, every: int | None) -> int:
        """Rank 0's choice of steps to the next sync step: the model's ``noise_every``, else ~SYNC_S apart."""
        if every or not self.step_s:   # no step timed yet (the first sync step plans before it is): the next one
            return every or 1          # (was MAX_SYNC_GAP: 3 s steps kept a stop and the noise 16 steps, 48 s, away)
        return min(MAX_SYNC_GAP, max(1, int(SYNC_S / self.step_s)))

    def plan(self, every: int | None, measured: int) -> tuple[int, float]:
        """Rank 0's choice of the next sync step: steps to it, and 1.0 when it measures (every one with the
        model's ``noise_every``, or while the noise has fewer than NOISE_FIRST measurements), else 0.0."""
        due = every or measured < NOISE_FIRST or time.perf_counter() - self.measured_at >= NOISE_S - SYNC_S / 2
        return self.gap(every), 1.0 if due else 0.0

    def measures(self) -> bool:
        """Does the sync step about to run measure? (Called once as it begins.)"""
        if self.measure_next:
            self.measured_at = time.perf_counter()
        return self.measure_next

    def synced(self, step: int, gap: float, measure: float) -> None:
        self.next_sync = step + max(1, int(gap))
        self.measure_next = measure > 0

    def observe(self, wall: float) -> None:
        self.step_s = wall if not self.step_s else 0.8 * self.step_s + 0.2 * wall

    def restart(self, step: int) -> None:
        """A new generation: its first step syncs and measures."""
        self.next_sync, self.measure_next = step + 1, True
