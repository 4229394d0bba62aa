"""Autoscaling rules and straggler detection of the AutoScaling Engine (Or, Zhang, Freedman, MLSys 2020).

Pure functions over measured throughputs (algorithms.md §6.1): the coordinator or a scheduler
feeds them what the workers report and acts on the answer.
* Condition 1, throughput scaling efficiency: s = (ΔR/Δk)/r_k with r_k = R_k/k; scale if s > S.
* Condition 2, utility vs cost: pass iff U(T_new) − U(T_old) > C_new − C_old with
  T_k = elapsed + b·t_k and C_k = C_past + t_k·b·k·P.
* The "scale by N every K steps" schedule over the worker counts tried so far.
* Stragglers: EWMA (α = 0.1) of each worker's throughput as a fraction of the median; < 0.8 → replace.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Protocol

import numpy as np

DEFAULT_S = 0.1
DEFAULT_PRICE = 1 / 3600  # per worker-second
STRAGGLER_ALPHA = 0.1
STRAGGLER_THRESHOLD = 0.8


def scaling_efficiency(r_k: float, r_kd: float, k: int, d: int) -> float:
    """s_{k,d} = ((R_{k+d} − R_k)/d) / (R_k/k): the marginal worker's speed relative to an average one."""
    return ((r_kd - r_k) / d) / (r_k / k)


def passes_efficiency(r_k: float, r_kd: float, k: int, d: int, threshold: float = DEFAULT_S) -> bool:
    return scaling_efficiency(r_k, r_kd, k, d) > threshold


class Utility(Protocol):
    def __call__(self, t: float) -> float: ...


@dataclass(frozen=True)
class LinearUtility:
    """U(t) = y0 − (y0/x0)·t: worth y0 now, nothing at x0 seconds, negative after."""

    y0: float
    x0: float

    def __call__(self, t: float) -> float:
        return self.y0 - (self.y0 / self.x0) * t


@dataclass(frozen=True)
class StepUtility:
    """Value ``values[i]`` when done by ``ends[i]`` (values strictly decreasing, ends increasing); −values[0] after the last end."""

    values: tuple[float, ...]
    ends: tuple[float, ...]

    def __post_init__(self):
        if len(self.values) != len(self.ends) or not self.values:
            raise ValueError("StepUtility needs as many values as ends, at least one")
        if np.any(np.diff(self.values) >= 0) or np.any(np.diff(self.ends) <= 0):
            raise ValueError("StepUtility values must strictly decrease and ends strictly increase")

    def __call__(self, t: float) -> float:
        i = int(np.searchsorted(self.ends, t, side="left"))
        return self.values[i] if i < len(self.values) else -self.values[0]


def passes_utility(utility: Callable[[float], float], elapsed_s: float, remaining_batches: int,
                   step_s_old: float, workers_old: int, step_s_new: float, workers_new: int,
                   cost_past: float = 0.0, price: float = DEFAULT_PRICE) -> bool:
    """Or et al.'s condition 2: the utility gained by finishing earlier must exceed the extra cost."""
    b = remaining_batches
    t_old, t_new = elapsed_s + b * step_s_old, elapsed_s + b * step_s_new
    c_old = cost_past + step_s_old * b * workers_old * price
    c_new = cost_past + step_s_new * b * workers_new * price
    return utility(t_new) - utility(t_old) > c_new - c_old


@dataclass(frozen=True)
class ScheduleConfig:
    spawn_size: int = 4  # N
    min_workers: int = 1
    max_workers: int = 64
    threshold: float = DEFAULT_S
    min_consecutive_passes: int = 3
    min_batches_for_staying: int = 100


def next_worker_count(observed: dict[int, tuple[float, int]], cfg: ScheduleConfig,
                      condition: Callable[[int, float, int, float], bool] | None = None) -> int:
    """The scaling schedule run every K steps.

    ``observed[n] = (avg aggregate samples/s at n workers, batches measured at n)``; ``condition``
    (default: condition 1 with ``cfg.threshold``) says whether going n_i → n_{i+1} was worth it.
    """
    cond = condition or (lambda k, rk, kd, rkd: passes_efficiency(rk, rkd, k, kd - k, cfg.threshold))
    counts = sorted(observed)
    if len(counts) == 1:
        n = counts[0]
        return min(n + cfg.spawn_size, cfg.max_workers)
    results = [cond(a, observed[a][0], b, observed[b][0]) for a, b in zip(counts, counts[1:])]
    if all(results) and counts[-1] < cfg.max_workers:
        target = counts[-1] + cfg.spawn_size
    elif not all(results[: cfg.min_consecutive_passes]) and counts[0] > cfg.min_workers:
        target = counts[0] - cfg.spawn_size
    else:
        first_fail = next((i for i, ok in enumerate(results) if not ok), None)
        target = counts[first_fail] if first_fail is not None else counts[-1]
        nxt = next((c for c in counts if c > target), None)
        if nxt is not None and observed[nxt][1] < cfg.min_batches_for_staying:
            target = nxt
    return int(min(max(target, cfg.min_workers), cfg.max_workers))


@dataclass
class StragglerDetector:
    """EWMA of each worker's throughput relative to the median; rank 0 (the master) is never a straggler."""

    alpha: float = STRAGGLER_ALPHA
    threshold: float = STRAGGLER_THRESHOLD
    ewma: dict[int, float] = field(default_factory=dict)

    def update(self, throughput: dict[int, float]) -> list[int]:
        """Feed one step's per-worker samples/s keyed by worker id (master first); return the stragglers."""
        median = float(np.median(list(throughput.values())))
        if median <= 0:
            return []
        for wid, r in throughput.items():
            frac = r / median
            prev = self.ewma.get(wid, 1.0)  # healthy until shown otherwise: one slow warm-up step flags nobody
            self.ewma[wid] = (1 - self.alpha) * prev + self.alpha * frac
        master = next(iter(throughput))
        return [w for w in throughput if w != master and self.ewma[w] < self.threshold]

    def forget(self, wid: int) -> None:
        self.ewma.pop(wid, None)
