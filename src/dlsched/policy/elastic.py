"""Elastic scaling of GPUs *and* batch size by a dynamic program (Saxena et al., MASCOTS'20; docs/algorithms.md §4).

Every decision (the drivers call it on arrival, completion and periodically) gives each job a GPU count g and a
global batch b so that the sum of per-job weighted *normalised throughput* is maximal:

    u_j(g) = max_b tau_j(g, b) / (tau_j(g0_j, b0_j) * T_j**urgency),
             b in [max(b_min, g * min_local), min(b_max, g * max_local)]

where (g0, b0) is the job's smallest feasible configuration on its slowest GPU type and T_j its remaining time
there. urgency = 0 is the paper's objective (total normalised throughput); the default 0.5 also favours jobs close
to done, which lowers average JCT (measured in bench/elastic_quality.py). The objective is throughput, not goodput:
the goodput variant lives in ``goodput.py`` and reuses this engine with a different value. Jobs may wait at 0 GPUs.
``elastic-gpu-only`` is the paper's baseline: the same DP with the batch fixed at the user's request.

Choices documented here:
* Hysteresis: a running job's current (g, b) is worth ``(1 + h)`` times its value, so the optimum moves a job only
  when the cluster gains more than h of that job's value; h = 5 %, or R / (T - R) when larger (R = restart_cost, a
  30 s stall per rescale; T = time left); never when T <= R. The batch at an unchanged g is kept unless another
  batch is 5 % faster.
* Heterogeneity (Gavel's idea): jobs are offered first to the GPU type where their speed-up over their slowest type
  is largest, up to that type's capacity; the DP then runs per type, and leftovers spill to the other types.
  When no job's speed model tells the types apart, the cluster is one pool and ``gpu_type`` is left to the driver.
* Throughput at g GPUs assumes a packed placement: ceil(g / GPUs-per-node) nodes.
* For g beyond 16 the curve is evaluated at node multiples and geometric points and linearly interpolated between
  (throughput is smooth in g); the batch for the chosen g is then evaluated exactly.
* A job without a speed model is rigid: it runs at its requested GPUs and batch or waits.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Iterable

import numpy as np

from dlsched.errors import UserError
from dlsched.policy.base import Allocation, ClusterView, JobAllocation, JobView, ThroughputModel, Policy, register
from dlsched.policy.dp import solve

NEG_INF = -np.inf
DENSE_GPUS = 16            # below this every g is evaluated exactly
BATCH_CANDIDATES = 5       # global batches tried per g (geometric grid including both ends)
MEMO_SIZE = 4096           # value curves remembered across decisions (oldest dropped first)
RUN_TIME_OFFSET = 3600.0   # s added to the run time when it stands in for remaining time (Tiresias' 1 h)
TIE_BREAK = 1e-12          # per-GPU penalty: on a flat curve prefer fewer GPUs (keeps concavity)
_TIE_RAMP = TIE_BREAK * np.arange(100_001)

# value(speed, num_gpus, num_nodes, global_batch, gpu_type) -> a rate to maximise
ValueFn = Callable[[ThroughputModel, int, int, int, "str | None"], float]


def throughput_value(speed: ThroughputModel, g: int, nodes: int, b: int, gpu_type: str | None) -> float:
    return speed.throughput(g, nodes, b, gpu_type)


@dataclass(frozen=True)
class BatchRange:
    """A job's feasible configurations: global batch in [b_min, b_max], g in [g_min, g_max],
    min_local <= b/g <= max_local (min_local: the smallest per-GPU batch the job was profiled with, default 1)."""

    b_min: int
    b_max: int
    max_local: int
    g_min: int
    g_max: int
    min_local: int = 1
    batch_free: bool = False     # the job has no batch size: one nominal batch, none reported

    def fits(self, g: int, b: int) -> bool:
        return max(self.b_min, g * self.min_local) <= b <= min(self.b_max, g * self.max_local)

    def batches(self, g: int) -> np.ndarray:
        """Candidate global batches at g GPUs (empty if none): a geometric grid over the feasible interval."""
        lo, hi = max(self.b_min, g * self.min_local), min(self.b_max, g * self.max_local)
        if lo > hi:
            return np.zeros(0, dtype=int)
        return np.unique(np.round(np.geomspace(lo, hi, BATCH_CANDIDATES)).astype(int))


def batch_range(job: JobView, total_gpus: int, fixed_batch: bool = False) -> BatchRange:
    """The job's [b_min, b_max] (or its fixed batch), per-GPU limit and GPU bounds; UserError if infeasible.

    Drivers call this (through :func:`validate_elastic_job`) when a job is submitted, so a bad range is a clear
    one-line error at submit time and never a crash in the middle of a simulation.
    """
    where = f"job {job.id!r}"
    user = job.batch_size
    if all(v is None for v in (user, job.min_batch_size, job.max_batch_size, job.max_local_batch)):
        # A job that says nothing about batches (a Philly duration job): scale GPUs only, report no batch.
        g_max = min(job.max_gpus if job.max_gpus is not None else total_gpus, total_gpus)
        if job.min_gpus > g_max:
            raise UserError(f"{where}: min_gpus={job.min_gpus} is more than the {g_max} GPUs allowed")
        return BatchRange(g_max, g_max, g_max, max(1, job.min_gpus), g_max, 1, batch_free=True)
    if fixed_batch:
        if user is None:
            raise UserError(f"{where}: field batch_size is required by elastic-gpu-only (got None)")
        b_min = b_max = user
    else:
        b_min = job.min_batch_size if job.min_batch_size is not None else user
        b_max = job.max_batch_size if job.max_batch_size is not None else user
        if b_min is None or b_max is None:
            raise UserError(f"{where}: needs batch_size or min_batch_size/max_batch_size "
                            f"(got batch_size={user}, min_batch_size={job.min_batch_size}, "
                            f"max_batch_size={job.max_batch_size})")
    if b_min < 1:
        raise UserError(f"{where}: field min_batch_size must be >= 1 (got {b_min})")
    if b_min > b_max:
        raise UserError(f"{where}: min_batch_size={b_min} is larger than max_batch_size={b_max}")
    if user is not None and not fixed_batch and not b_min <= user <= b_max:
        raise UserError(f"{where}: batch_size={user} is outside [min_batch_size, max_batch_size] = [{b_min}, {b_max}]")
    max_local = job.max_local_batch if job.max_local_batch is not None else b_max
    if max_local < 1:
        raise UserError(f"{where}: field max_local_batch must be >= 1 (got {max_local})")
    # Drivers that predate JobView.min_local_batch pass it in attrs.
    min_local = job.min_local_batch if job.min_local_batch is not None else int(job.attrs.get("min_local_batch", 1))
    if not 1 <= min_local <= max_local:
        raise UserError(f"{where}: field min_local_batch={min_local} must be in [1, max_local_batch={max_local}]")
    g_max = min(job.max_gpus if job.max_gpus is not None else total_gpus, total_gpus, b_max // min_local)
    g_min = max(job.min_gpus, math.ceil(b_min / max_local))
    if g_min > g_max:
        raise UserError(f"{where}: no feasible GPU count: batch {b_min}..{b_max} with max_local_batch={max_local} "
                        f"needs >= {g_min} GPUs but at most {g_max} are allowed "
                        f"(max_gpus={job.max_gpus}, cluster={total_gpus}, one sample per GPU)")
    return BatchRange(b_min, b_max, max_local, g_min, g_max, min_local)


def validate_elastic_job(job: JobView, cluster: ClusterView, fixed_batch: bool = False) -> None:
    """Submit-time check for the elastic policies: raises UserError naming the job, field and value."""
    batch_range(job, cluster.total_gpus, fixed_batch)


def _gpu_samples(lo: int, hi: int, node_size: int) -> np.ndarray:
    """GPU counts where the throughput is evaluated: every g up to DENSE_GPUS, then node multiples and a grid."""
    dense = np.arange(lo, min(hi, DENSE_GPUS) + 1)
    if hi <= DENSE_GPUS:
        return dense
    multiples = np.arange(node_size, hi + 1, max(node_size, 1))
    grid = np.round(np.geomspace(max(lo, DENSE_GPUS), hi, 12)).astype(int)
    g = np.unique(np.concatenate((dense, multiples, grid, [hi])))
    return g[(g >= lo) & (g <= hi)]


@dataclass(frozen=True)
class JobCurve:
    """Value of each GPU count on one GPU type, and the batch chosen where it was evaluated (0 = interpolated)."""

    values: np.ndarray      # index g = 0..g_max; -inf where infeasible
    batches: np.ndarray


class ElasticPolicy(Policy):
    """The DP autoscaler. ``fixed_batch`` gives the GPU-only baseline; ``value`` switches throughput/goodput."""

    def __init__(self, name: str = "elastic", fixed_batch: bool = False, value: ValueFn = throughput_value,
                 hysteresis: float = 0.05, urgency: float = 0.5, restart_cost: float = 30.0, fairness: float = 1.0,
                 event_driven: bool = False, whole_nodes: bool = False):
        if urgency < 0:
            raise ValueError(f"urgency must be >= 0, got {urgency}")
        if not (fairness == 1 or fairness < 0):
            raise ValueError(f"fairness must be 1 (sum of speed-ups) or < 0 (power mean), got {fairness}")
        self.fairness = fairness
        self.whole_nodes = whole_nodes
        self.event_driven = event_driven     # decide only on arrival and departure (the seed's autoscaler)
        self.name = name
        self.urgency = urgency
        self.fixed_batch = fixed_batch
        self.value = value
        self.hysteresis = hysteresis
        self.restart_cost = restart_cost
        self._memo: dict = {}
        self._ranges: dict = {}

    def validate(self, job: JobView, cluster: ClusterView) -> None:
        """Submit-time check drivers call when a job arrives: UserError,
        one line naming the job, field and value, if the job has no feasible (GPUs, batch) configuration."""
        validate_elastic_job(job, cluster, self.fixed_batch)

    def _range(self, job: JobView, total: int) -> BatchRange | None:
        """:func:`batch_range`, or None when infeasible, memoised on the fields it reads: every decision sees the
        same jobs again, and the range is a pure function of them."""
        key = (job.batch_size, job.min_batch_size, job.max_batch_size, job.max_local_batch, job.min_local_batch,
               job.attrs.get("min_local_batch") if job.min_local_batch is None else None, job.max_gpus,
               job.min_gpus, total)
        try:
            return self._ranges[key]
        except KeyError:
            pass
        except TypeError:       # an unhashable attrs value: no memo
            key = None
        try:
            rng = batch_range(job, total, self.fixed_batch)
        except UserError:
            rng = None
        if key is None:
            return rng
        if len(self._ranges) >= MEMO_SIZE:
            self._ranges.pop(next(iter(self._ranges)))
        self._ranges[key] = rng
        return rng

    # ---- value curves -------------------------------------------------------------------------------------
    def _best_batch(self, job: JobView, rng: BatchRange, g: int, node_size: int, gpu_type: str) -> tuple[float, int]:
        nodes = math.ceil(g / node_size)
        best, best_b = NEG_INF, 0
        for b in rng.batches(g):
            v = self.value(job.speed, g, nodes, int(b), gpu_type)
            if v > best:
                best, best_b = v, int(b)
        return best, best_b

    def _raw_curve(self, job: JobView, rng: BatchRange, gpu_type: str, node_size: int) -> JobCurve:
        """Memoised on (speed model, range, type, node size): a pure function of hashable inputs, so repeated
        decisions over the same jobs (every arrival/completion) reuse it. Unhashable models are recomputed."""
        try:
            key = (job.speed, rng, gpu_type, node_size)
            hit = self._memo.get(key)
        except TypeError:
            return self._compute_curve(job, rng, gpu_type, node_size)
        if hit is None:
            if len(self._memo) >= MEMO_SIZE:
                self._memo.pop(next(iter(self._memo)))
            hit = self._memo[key] = self._compute_curve(job, rng, gpu_type, node_size)
        return hit

    def _compute_curve(self, job: JobView, rng: BatchRange, gpu_type: str, node_size: int) -> JobCurve:
        values = np.full(rng.g_max + 1, NEG_INF)
        batches = np.zeros(rng.g_max + 1, dtype=int)
        samples = _gpu_samples(rng.g_min, rng.g_max, node_size)
        for g in samples:
            values[g], batches[g] = self._best_batch(job, rng, int(g), node_size, gpu_type)
        ok = np.isfinite(values[samples])
        if ok.any() and len(samples) < rng.g_max - rng.g_min + 1:
            inside = np.arange(rng.g_min, rng.g_max + 1)
            values[inside] = np.interp(inside, samples[ok], values[samples][ok])
        return JobCurve(values, batches)

    @staticmethod
    def _current_type(job: JobView, type_of: dict[str, str]) -> str | None:
        for node in job.placement:
            return type_of.get(node)
        return None

    def _curve(self, job: JobView, rng: BatchRange, raw: JobCurve, ref: float, scale: float, gpu_type: str,
               node_size: int, cur_type: str | None) -> np.ndarray:
        """Normalised value curve on one type, with the wait option, hysteresis and the non-preemptible rule."""
        n = len(raw.values)
        weight = ref / scale
        u = self._utility(raw.values / ref) * weight
        u -= _TIE_RAMP[:n] if n <= len(_TIE_RAMP) else TIE_BREAK * np.arange(n)
        if self.whole_nodes and n > node_size + 1:
            # a job spanning nodes takes whole nodes: no node is shared by a distributed job (Pollux's
            # interference avoidance), so its measured all-reduce speed is the one it gets
            u[node_size + 1:][np.arange(node_size + 1, n) % node_size != 0] = NEG_INF
        u[0] = 0.0
        gc = job.num_gpus
        if gc == 0:
            return u                   # waiting: no hysteresis, no pinning
        running = True
        running_here = cur_type == gpu_type
        bonus = self._stay_bonus(job, gc) if running_here else 0.0
        if running and (not job.preemptible or math.isinf(bonus)):
            keep = np.full_like(u, NEG_INF)
            if running_here and gc < len(u):
                keep[gc] = u[gc]
            else:
                keep[0] = 0.0          # held elsewhere (or its size is no longer allowed): not on this type
            return keep
        if running_here and rng.g_min <= gc <= rng.g_max:
            u[gc] = (self._utility(self._kept_value(job, rng, gc, gpu_type, node_size, raw, ref)) * weight
                     * (1 + bonus) - TIE_BREAK * gc)
        return u

    def _utility(self, speedup):
        """A job's utility of a speed-up s over its smallest configuration (s = 1 there). ``fairness`` p = 1 is
        the sum of speed-ups (the paper's objective); p = -1 is Pollux's power mean (OSDI'21 §4.2,
        sum s**-1 minimised), shifted to 2 - 1/s so that a job's first configuration is worth 1 either way:
        growing a running job is then worth ever less, admitting a waiting one always 1."""
        if self.fairness == 1:
            return speedup
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.where(speedup > 0, 2.0 - np.power(np.maximum(speedup, 1e-300), self.fairness), NEG_INF)

    def _stay_bonus(self, job: JobView, held: int) -> float:
        """Relative speed-up a running job's rescale must bring: the hysteresis, or more when the job is close to
        done. A rescale stalls it R seconds (checkpoint-restart), so with T seconds left it pays only if the new
        rate is T / (T - R) times the current one; never when T <= R (returns inf: keep it). R is the pause the
        driver measured (``attrs["restart_s"]``: the live loop's median resize delay, the simulator's penalty),
        else ``restart_cost``: a 30 s guess kept a short live job, whose resizes take 1-2 s, at 1 GPU."""
        bonus = self.hysteresis
        restart = float(job.attrs.get("restart_s", self.restart_cost)) if self.restart_cost > 0 else 0.0
        if restart > 0 and job.remaining_samples and job.current_batch_size:
            rate = job.speed.throughput(held, max(1, len(job.placement)), job.current_batch_size)
            if rate > 0:
                left = job.remaining_samples / rate
                if left <= restart:
                    return math.inf
                bonus = max(bonus, restart / (left - restart))
        return bonus

    def _kept_value(self, job: JobView, rng: BatchRange, g: int, gpu_type: str, node_size: int, raw: JobCurve,
                    ref: float) -> float:
        b = job.current_batch_size
        if b is None or not rng.fits(g, b):
            return raw.values[g] / ref
        return self.value(job.speed, g, math.ceil(g / node_size), b, gpu_type) / ref

    # ---- decision -----------------------------------------------------------------------------------------
    def decide(self, jobs: tuple[JobView, ...], cluster: ClusterView) -> Allocation:
        ordered = sorted(jobs, key=lambda j: (j.submit_time, j.id))
        types = cluster.gpu_types
        capacity = {t: sum(n.num_gpus for n in cluster.nodes if n.gpu_type == t) for t in types}
        node_size = {t: max(n.num_gpus for n in cluster.nodes if n.gpu_type == t) for t in types}
        total = cluster.total_gpus
        type_of = {n.name: n.gpu_type for n in cluster.nodes}
        hetero = len(types) > 1

        elastic, rigid = [], []
        ranges: dict[str, BatchRange] = {}
        for job in ordered:
            rng = self._range(job, total)
            if rng is None:
                continue        # drivers reject such jobs at submit (validate_elastic_job); never crash here
            ranges[job.id] = rng
            (elastic if job.speed is not None else rigid).append(job)

        curves: dict[tuple[str, str], np.ndarray] = {}
        raws: dict[tuple[str, str], JobCurve] = {}
        speedup: dict[tuple[str, str], float] = {}
        refs: dict[str, float] = {}
        for job in elastic:
            rng = ranges[job.id]
            base = math.inf                     # the smallest finite value at g_min over the types
            for t in types:
                raw = raws[job.id, t] = self._raw_curve(job, rng, t, node_size[t])
                v = raw.values[rng.g_min]
                if math.isfinite(v) and v < base:
                    base = v
            refs[job.id] = float(base) if math.isfinite(base) and base > 0 else 1.0
        pooled = hetero and all(np.array_equal(raws[j.id, types[0]].values, raws[j.id, t].values)
                                for j in elastic for t in types[1:])
        if pooled:
            # No job runs faster on any type (its speed model ignores the type): one pool, the driver places.
            first = types[0]
            types, hetero = (first,), False
            capacity, node_size = {first: total}, {first: max(node_size.values())}
            type_of = {name: first for name in type_of}
        scale = self._scales(elastic, refs)
        for job in elastic:
            rng, ref, cur = ranges[job.id], refs[job.id], self._current_type(job, type_of)
            g0 = rng.g_min
            for t in types:
                curves[job.id, t] = self._curve(job, rng, raws[job.id, t], ref, scale[job.id], t, node_size[t],
                                                cur)
                if not hetero:
                    continue
                v0 = raws[job.id, t].values[g0]
                speedup[job.id, t] = (v0 / ref if np.isfinite(v0) else 0.0) * (
                    1 + self.hysteresis if cur == t else 1.0)

        result: dict[str, JobAllocation] = {}
        free = dict(capacity)
        self._place_rigid(rigid, ranges, free, result, report_type=not pooled)
        remaining = [j for j in elastic]
        # Gavel-style: offer jobs to types in order of their relative speed-up, then let leftovers spill.
        for pass_ in range(2 if hetero else 1):
            for t in self._type_order(types, capacity, speedup, elastic) if hetero else types:
                if free[t] <= 0 or not remaining:
                    continue
                if pass_ == 0 and hetero:
                    cands = self._preferred(remaining, t, types, speedup, free[t], ranges)
                else:
                    cands = remaining
                sol = solve([curves[j.id, t] for j in cands], free[t])
                if not np.isfinite(sol.value):      # pinned jobs do not fit (the cluster shrank): let any wait
                    sol = solve([np.concatenate(([0.0], curves[j.id, t][1:])) for j in cands], free[t])
                for job, g in zip(cands, sol.gpus):
                    if g > 0:
                        result[job.id] = self._allocation(job, ranges[job.id], int(g), t, node_size[t],
                                                          raws[job.id, t], None if pooled else t)
                        free[t] -= int(g)
                remaining = [j for j in remaining if j.id not in result]
        return Allocation(result)

    def _scales(self, jobs: list[JobView], refs: dict[str, float]) -> dict[str, float]:
        """Divisor of each job's raw value: its minimum-configuration value times T**urgency, T = its remaining time
        at that configuration. urgency 0 is the paper's normalised throughput; 1 maximises the fraction of
        remaining work done per second (shortest first); 0.5, the default, sits between (best of 0..1.5 on Pollux
        workloads 1 and 3, see bench/elastic_quality.py). Jobs whose remaining work is unknown get the median T of
        the others; when no job knows it, T = its run time + 1 h. Rescaled so the largest weight is 1."""
        if self.urgency == 0:
            return dict(refs)
        times = {j.id: self._progress_left(j) / refs[j.id] for j in jobs
                 if j.remaining_samples is not None and j.remaining_samples > 0}
        if not times:
            # No job knows its remaining work: use how long it has run instead (least attained first, as Tiresias:
            # DL job lengths are heavy-tailed, so a job that ran little is likely to end soon). Wall seconds, not
            # GPU-seconds: those grow faster for a job the policy just grew, so its weight would fall for it and
            # the next decision would shrink it again.
            times = {j.id: j.run_time + RUN_TIME_OFFSET for j in jobs}
        fallback = float(np.median(list(times.values()))) if times else 1.0
        scale = {j.id: refs[j.id] * times.get(j.id, fallback) ** self.urgency for j in jobs}
        shortest = min((scale[j.id] / refs[j.id] for j in jobs), default=1.0)
        return {k: v / shortest for k, v in scale.items()}

    def _progress_left(self, job: JobView) -> float:
        """Remaining work in units that do not depend on the batch the job runs at now: samples left at the
        current batch times that batch's statistical efficiency. Raw samples grow with the batch (a larger
        batch needs more of them), so a weight built on them would drop each time a job grows its batch and
        rise when it shrinks: a feedback loop that rescales large jobs back and forth."""
        b = job.current_batch_size or job.batch_size
        if b is None or job.speed is None:
            return job.remaining_samples
        return job.remaining_samples * job.speed.efficiency(b)

    def _type_order(self, types, capacity, speedup, jobs) -> list[str]:
        mean = {t: np.mean([speedup[j.id, t] for j in jobs]) if jobs else 0.0 for t in types}
        return sorted(types, key=lambda t: (-mean[t], t))

    def _preferred(self, jobs, t, types, speedup, free, ranges) -> list[JobView]:
        """Jobs whose speed-up on t relative to their best other type is largest, up to t's free GPUs."""
        def advantage(j):
            others = [speedup[j.id, o] for o in types if o != t]
            return speedup[j.id, t] / max(max(others), 1e-12)
        ranked = sorted(jobs, key=lambda j: (-advantage(j), j.submit_time, j.id))
        chosen, demand = [], 0
        for j in ranked:
            if advantage(j) < 1.0 and chosen:
                break
            need = ranges[j.id].g_min
            if demand + need > free and chosen:
                break
            chosen.append(j)
            demand += max(need, min(j.requested_gpus, ranges[j.id].g_max))
        return sorted(chosen, key=lambda j: (j.submit_time, j.id))

    def _allocation(self, job: JobView, rng: BatchRange, g: int, gpu_type: str, node_size: int,
                    raw: JobCurve, report_type: str | None) -> JobAllocation:
        if raw.batches[g] > 0:
            value, b = raw.values[g], int(raw.batches[g])
        else:
            value, b = self._best_batch(job, rng, g, node_size, gpu_type)
        cb = job.current_batch_size
        if cb is not None and job.placement and rng.fits(g, cb) and job.num_gpus == g:
            kept = self.value(job.speed, g, math.ceil(g / node_size), cb, gpu_type)
            if value <= kept * (1 + self.hysteresis):
                b = cb
        return JobAllocation(g, batch_size=None if rng.batch_free else b, gpu_type=report_type)

    def _place_rigid(self, rigid: Iterable[JobView], ranges, free, result, report_type: bool) -> None:
        """Jobs without a speed model run at their requested size (FIFO) on the type with most free GPUs."""
        for job in rigid:
            rng = ranges[job.id]
            g = min(max(job.requested_gpus, rng.g_min), rng.g_max)
            t = max(sorted(free), key=lambda t: free[t])
            if free[t] >= g:
                b = job.batch_size if job.batch_size is not None else (None if rng.batch_free else rng.b_max)
                result[job.id] = JobAllocation(g, batch_size=b, gpu_type=t if report_type else None)
                free[t] -= g


@register("elastic")
def make_elastic(hysteresis: float = 0.05, urgency: float = 0.5, restart_cost: float = 30.0) -> ElasticPolicy:
    return ElasticPolicy("elastic", fixed_batch=False, hysteresis=hysteresis, urgency=urgency,
                         restart_cost=restart_cost)


@register("elastic-gpu-only")
def make_elastic_gpu_only(hysteresis: float = 0.05, urgency: float = 0.5,
                          restart_cost: float = 30.0) -> ElasticPolicy:
    return ElasticPolicy("elastic-gpu-only", fixed_batch=True, hysteresis=hysteresis, urgency=urgency,
                         restart_cost=restart_cost)


@register("saxena")
def make_saxena() -> ElasticPolicy:
    """The seed's objective as published (Saxena et al., MASCOTS'20): total normalised throughput over GPUs x
    batch, no urgency, no hysteresis, no restart cost, re-solved only when a job arrives or departs."""
    return ElasticPolicy("saxena", fixed_batch=False, hysteresis=0.0, urgency=0.0, restart_cost=0.0,
                         event_driven=True)


@register("saxena-gpu-only")
def make_saxena_gpu_only() -> ElasticPolicy:
    """The paper's baseline: the same autoscaler with each job's batch fixed at the user's."""
    return ElasticPolicy("saxena-gpu-only", fixed_batch=True, hysteresis=0.0, urgency=0.0, restart_cost=0.0,
                         event_driven=True)
