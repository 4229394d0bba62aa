"""Which steps carry the step scalars (stop flag, gradient noise, compute times, proposed batch) with several
workers: one in about every ``SYNC_S`` seconds. Each such step names the next one in its all-reduce (rank 0's
choice), so every rank agrees without asking; the steps between cost what plain DDP's do (no norms, no
second all-reduce), which is what keeps the wrapper cheap on short steps."""
from __future__ import annotations

SYNC_S = 0.2  # seconds between sync steps: also the most a stop flag waits, beside flag_watch.FLAG_POLL_S
MAX_SYNC_GAP = 16  # steps between sync steps at most: the noise estimate still gets one step in 16


class SyncCadence:
    def __init__(self):
        self.next_sync = 1  # the step number of the next sync step
        self.step_s = 0.0  # rank 0's EMA of the step time

    def due(self, step: int, world: int) -> bool:
        """Is ``step`` (the one about to run) a sync step? One worker: every step (nothing to agree on)."""
        return world == 1 or step >= self.next_sync

    def gap(self, every: int | None) -> int:
        """Rank 0's choice of steps to the next sync step: the model's ``noise_every``, else ~SYNC_S apart."""
        return every or min(MAX_SYNC_GAP, max(1, int(SYNC_S / max(self.step_s, 1e-6))))

    def synced(self, step: int, gap: float) -> None:
        self.next_sync = step + max(1, int(gap))

    def observe(self, wall: float) -> None:
        self.step_s = wall if not self.step_s else 0.8 * self.step_s + 0.2 * wall

    def restart(self, step: int) -> None:
        """A new generation: its first step syncs."""
        self.next_sync = step + 1
