"""Elastic scaling of GPUs *and* batch size by a dynamic program (Saxena et al., MASCOTS'20; docs/algorithms.md §4).

Every decision (the drivers call it on arrival, completion and periodically) gives each job a GPU count g and a
global batch b so that the sum of per-job weighted *normalised throughput* is maximal:

    u_j(g) = max_b tau_j(g, b) / (tau_j(g0_j, b0_j) * T_j**urgency),
             b in [max(b_min, g * min_local), min(b_max, g * max_local)]

where (g0, b0) is the job's smallest feasible configuration on its slowest GPU type and T_j its remaining time
there. urgency = 0 is the paper's objective (total normalised throughput); the default 0.5 also favours jobs close
to done, which lowers average JCT (measured in bench/elastic_quality.py). The objective is throughput, not goodput:
the goodput variant lives in ``goodput.py`` and reuses this engine with a different value. Jobs may wait at 0 GPUs.
``elastic-gpu-only`` is the paper's baseline: the same DP with the batch fixed at the user's request, run on any GPU
count by gradient accumulation where it exceeds ``max_local_batch`` per GPU (``batch_range.BatchRange.accumulate``).

Choices documented here:
* Hysteresis: a running job's current (g, b) is worth ``(1 + h)`` times its value, so the optimum moves a job only
  when the cluster gains more than h of that job's value; h = 5 %, or R / (T - R) when larger (R = restart_cost, a
  30 s stall per rescale; T = time left); never when T <= R. The batch at an unchanged g is kept unless another
  batch is 5 % faster.
* ``grow_pause`` (``goodput``'s default, off in ``elastic``, where it measured worse; docs/policies.md): a grow also
  repays the pause of a job it may displace, T_g + 2R < T (``charge_grow``).
* ``release_horizon`` (``goodput``'s default, off in ``elastic``; docs/policies.md): taking k GPUs from a running
  job helps the taker only until k GPUs free anyway, W_k, when the other running jobs predicted to end first hold
  k GPUs between them; over W_k the victim pays R / W_k of its value at the smaller size (its pause now) and of
  its current value (its pause when regrown or resumed).
* ``budget_run_clock`` (``goodput``'s default): Pollux's restart budget ages a job by the time it has held GPUs,
  for jobs whose time left is predicted.
* A running job that has not yet trained as long as its last (re)start paused it is held where it is, and a job
  without a speed model does not take its GPUs (``restart_hold``; driver-supplied ``attrs["changed_at"]`` /
  ``["settled_at"]``).
* Heterogeneity (Gavel's idea): jobs are offered first to the GPU type where their speed-up over their slowest type
  is largest, up to that type's capacity; the DP then runs per type, and leftovers spill to the other types.
  When no job's speed model tells the types apart, the cluster is one pool and ``gpu_type`` is left to the driver.
* Throughput at g GPUs assumes a packed placement: ceil(g / GPUs-per-node) nodes.
* For g beyond 16 the curve is evaluated at node multiples and geometric points and linearly interpolated between
  (throughput is smooth in g); the batch for the chosen g is then evaluated exactly.
* A job without a speed model is rigid: it runs at its requested GPUs and batch or waits (placed before the DP, FIFO).
"""
from __future__ import annotations

import math
from typing import Iterable

import numpy as np

from dlsched.errors import UserError
from dlsched.policy.base import Allocation, ClusterView, JobAllocation, JobView, Policy, register
from dlsched.policy.batch_range import BatchRange, batch_range, validate_elastic_job
from dlsched.policy.dp import solve
from dlsched.policy.gittins import FinishedSizes, duration_times
from dlsched.policy.gpu_type_preference import preferred, type_order
from dlsched.policy.placement import best_fit
from dlsched.policy.release_horizon import charge_release, release_horizons
from dlsched.policy.restart_hold import held_gpus, held_here, settling
from dlsched.policy.value_curve import MEMO_SIZE, NEG_INF, JobCurve, ValueCurves, ValueFn, throughput_value

RUN_TIME_OFFSET = 3600.0   # s added to the run time when it stands in for remaining time (Tiresias' 1 h)
TIE_BREAK = 1e-12          # per-GPU penalty: on a flat curve prefer fewer GPUs (keeps concavity)
_TIE_RAMP = TIE_BREAK * np.arange(100_001)


def restart_budget_bonus(job: JobView, restart: float, now: float, run_clock: bool = False) -> float:
    """Pollux's restart penalty as a stay bonus (petuum/adaptdl simulator/pollux.py, Problem._evaluate): a changed
    allocation is worth max(age - n R, 0) / (age + R) of its value, n = the job's restarts so far (``attrs
    ["restarts"]``: the simulator's count, the live loop's generations after the first start; a driver that does
    not count them gets no budget), age = time since submission. Restarts are then held to a share of each job's
    life: a young or often-restarted job stays where it is, an old one moves almost freely (a fixed hysteresis
    does neither). Only running jobs pay it here: delaying starts and resumes by it
    measured worse (docs/policies.md). ``run_clock``: age = the time the job has held GPUs, not since submission
    (a long wait in the queue does not make a job's restarts cheaper: each still costs R of its progress)."""
    age = job.run_time if run_clock else max(now - job.submit_time, 0.0)
    kept = max(age - float(job.attrs.get("restarts", 0)) * restart, 0.0) / (age + restart)
    return math.inf if kept <= 0 else 1.0 / kept - 1.0


def time_left(job: JobView, held: int) -> float | None:
    """Predicted seconds to finish at ``held`` GPUs and the current batch; None when unknown."""
    if not (held and job.remaining_samples and job.current_batch_size and job.speed is not None):
        return None
    rate = job.speed.throughput(held, max(1, len(job.placement)), job.current_batch_size)
    return job.remaining_samples / rate if rate > 0 else None


def charge_grow(u: np.ndarray, gc: int, left: float | None, restart: float) -> None:
    """A grow may take its GPUs from a running job, which then pays a pause R too: growing a job with ``left``
    = T seconds at ``gc`` pays off only if it ends sooner by more than both pauses (T_g + 2R < T; the stay bonus
    asks T_g + R < T), so the grown values of ``u`` are scaled by (T - 2R) / (T - R), and cut when T <= 2R. Live, a
    1-GPU job was pre-empted to grow one 2 s from its end, then grown back: two pauses for a second saved."""
    if left is None or left <= restart or gc + 1 >= len(u):
        return                         # unknown, pinned by the stay bonus already, or nothing above gc
    grown = u[gc + 1:]
    if left <= 2 * restart:
        grown[:] = NEG_INF
    else:
        grown[grown > 0] *= (left - 2 * restart) / (left - restart)


def _check_args(urgency: float, fairness: float, request_prior: float, aging_hysteresis: float) -> None:
    if urgency < 0:
        raise ValueError(f"urgency must be >= 0, got {urgency}")
    if not (fairness == 1 or fairness < 0):
        raise ValueError(f"fairness must be 1 (sum of speed-ups) or < 0 (power mean), got {fairness}")
    if request_prior < 0:
        raise ValueError(f"request_prior must be >= 0, got {request_prior}")
    if aging_hysteresis < 0:
        raise ValueError(f"aging_hysteresis must be >= 0, got {aging_hysteresis}")


class ElasticPolicy(Policy):
    """The DP autoscaler. ``fixed_batch`` gives the GPU-only baseline; ``value`` switches throughput/goodput."""

    def __init__(self, name: str = "elastic", fixed_batch: bool = False, value: ValueFn = throughput_value,
                 hysteresis: float = 0.05, urgency: float = 0.5, restart_cost: float = 30.0, fairness: float = 1.0,
                 event_driven: bool = False, whole_nodes: bool = False, restart_budget: bool = False,
                 packing: bool = False, fair_share_base: bool = False, request_prior: float = 0.0,
                 aging_hysteresis: float = 0.0, release_horizon: bool = False, budget_run_clock: bool = False,
                 grow_pause: bool = False, size_prior: str = "aging"):
        _check_args(urgency, fairness, request_prior, aging_hysteresis)
        if size_prior not in ("aging", "gittins"):
            raise ValueError(f"size_prior must be 'aging' or 'gittins', got {size_prior!r}")
        self.size_prior = size_prior
        self.grow_pause = grow_pause
        self.request_prior = request_prior
        self.release_horizon = release_horizon
        self.aging_hysteresis = aging_hysteresis
        self.restart_budget = restart_budget
        self.budget_run_clock = budget_run_clock
        self.fair_share_base = fair_share_base
        # the DP values g GPUs on ceil(g / node size) nodes: best fit keeps whole nodes free so placements match it
        self.placement = best_fit if packing else None
        self.fairness = fairness
        self.whole_nodes = whole_nodes
        self.event_driven = event_driven     # decide only on arrival and departure (the seed's autoscaler)
        self.name = name
        self.urgency = urgency
        self.fixed_batch = fixed_batch
        self.value = value
        self.hysteresis = hysteresis
        self.restart_cost = restart_cost
        self.curves = ValueCurves(value)
        self._ranges: dict = {}
        self._finished_sizes = FinishedSizes(self._age)

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

    @staticmethod
    def _current_type(job: JobView, type_of: dict[str, str]) -> str | None:
        for node in job.placement:
            return type_of.get(node)
        return None

    def _curve(self, job: JobView, rng: BatchRange, raw: JobCurve, ref: float, scale: float, gpu_type: str,
               node_size: int, cur_type: str | None, now: float, aging: bool = False,
               release: np.ndarray | None = None) -> np.ndarray:
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
        bonus = self._stay_bonus(job, gc, now, aging) if running_here else 0.0
        if running and (not job.preemptible or math.isinf(bonus) or held_here(job, rng.g_min, rng.g_max, now)):
            keep = np.full_like(u, NEG_INF)
            if running_here and gc < len(u):
                keep[gc] = u[gc]
            else:
                keep[0] = 0.0          # held elsewhere (or its size is no longer allowed): not on this type
            return keep
        if running_here and rng.g_min <= gc <= rng.g_max:
            now_u = self._utility(self._kept_value(job, rng, gc, gpu_type, node_size, raw, ref)) * weight
            # or a new batch at the GPUs it holds (a restart, as any other move pays; ``_allocation`` picks it): with
            # only the kept batch here, a better batch was reachable at another count alone, and a lone job whose
            # fixed cost showed once it had grown went 1 -> 4 (batch kept) -> 3 (a larger batch) -> 4 GPUs
            u[gc] = max(now_u * (1 + bonus) - TIE_BREAK * gc, u[gc])
            restart = self._restart_s(job)
            if self.grow_pause and restart > 0:
                charge_grow(u, gc, time_left(job, gc), restart)
            if release is not None and now_u > 0 and restart > 0:
                charge_release(u, gc, now_u, restart, release)
        return u

    def _utility(self, speedup):
        """A job's utility of a speed-up s over its base (its smallest configuration, s = 1 there, or a fair share).
        ``fairness`` p = 1 is the sum of speed-ups (the paper's objective); p = -1 is Pollux's power mean (OSDI'21
        §4.2, sum s**-1 minimised), shifted to 2 - 1/s so that waiting is worth what s = 1/2 is: with the
        smallest-configuration base a job's first configuration is worth 1 either way, growing a running job
        ever less. Pollux's own floor (waiting = s of 1e-3) measured far worse here (docs/policies.md)."""
        if self.fairness == 1:
            return speedup
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.where(speedup > 0, 2.0 - np.power(np.maximum(speedup, 1e-300), self.fairness), NEG_INF)

    def _stay_bonus(self, job: JobView, held: int, now: float, aging: bool = False) -> float:
        """Relative speed-up a running job's rescale must bring: the hysteresis, or more when the job is close to
        done. A rescale stalls it R seconds (checkpoint-restart), so with T seconds left it pays only if the new
        rate is T / (T - R) times the current one; never when T <= R (returns inf: keep it). R is the pause the
        driver measured (``attrs["restart_s"]``: the live loop's median resize delay, the simulator's penalty),
        else ``restart_cost``: a 30 s guess kept a short live job, whose resizes take 1-2 s, at 1 GPU. ``aging``:
        weights come from run time (no job knows its remaining work), so every running job's weight falls each
        round against the waiting ones' and, without a margin, near-equal jobs swap places round after round
        (processor sharing paid in restarts: 83 restarts a job on a Philly slice, docs/policies.md);
        ``aging_hysteresis`` is that margin."""
        bonus = max(self.hysteresis, self.aging_hysteresis) if aging else self.hysteresis
        restart = self._restart_s(job)
        left = time_left(job, held) if restart > 0 else None
        if self.restart_budget and restart > 0 and "restarts" in job.attrs:
            # the run clock only for a job whose time left is predicted: without it measured no gain (docs/policies.md)
            run_clock = self.budget_run_clock and left is not None
            bonus = max(bonus, restart_budget_bonus(job, restart, now, run_clock))
        if left is not None:
            if left <= restart:
                return math.inf
            bonus = max(bonus, restart / (left - restart))
        return bonus

    def _restart_s(self, job: JobView) -> float:
        return float(job.attrs.get("restart_s", self.restart_cost)) if self.restart_cost > 0 else 0.0

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
        # Speed-ups are relative to the smallest configuration, or with ``fair_share_base`` to an even share of
        # the cluster (Pollux's base, petuum/adaptdl simulator/pollux.py: its fair-share goodput)
        fair = math.ceil(total / max(len(elastic), 1)) if self.fair_share_base else 0
        for job in elastic:
            rng = ranges[job.id]
            base = math.inf                     # the smallest finite value at the base size over the types
            g_base = min(max(fair, rng.g_min), rng.g_max)
            for t in types:
                raw = raws[job.id, t] = self.curves.curve(job, rng, t, node_size[t])
                v = raw.values[g_base]
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
        scale = self._scales(elastic, refs, cluster.finished)
        aging = self.urgency != 0 and not any(j.remaining_samples for j in elastic)
        releases = release_horizons(elastic, time_left) if self.release_horizon else {}
        for job in elastic:
            rng, ref, cur = ranges[job.id], refs[job.id], self._current_type(job, type_of)
            g0 = rng.g_min
            for t in types:
                curves[job.id, t] = self._curve(job, rng, raws[job.id, t], ref, scale[job.id], t, node_size[t],
                                                cur, cluster.now, aging, releases.get(job.id))
                if not hetero:
                    continue
                v0 = raws[job.id, t].values[g0]
                speedup[job.id, t] = (v0 / ref if np.isfinite(v0) else 0.0) * (
                    1 + self.hysteresis if cur == t else 1.0)

        result: dict[str, JobAllocation] = {}
        free = dict(capacity)
        place_rigid(rigid, ranges, free, result, not pooled, type_of, cluster.now,
                    held_gpus(elastic, ranges, type_of, cluster.now))
        remaining = [j for j in elastic]
        # Gavel-style: offer jobs to types in order of their relative speed-up, then let leftovers spill.
        for pass_ in range(2 if hetero else 1):
            for t in type_order(types, speedup, elastic) if hetero else types:
                if free[t] <= 0 or not remaining:
                    continue
                if pass_ == 0 and hetero:
                    cands = preferred(remaining, t, types, speedup, free[t], ranges)
                else:
                    cands = remaining
                sol = solve([curves[j.id, t] for j in cands], free[t])
                if not np.isfinite(sol.value):      # pinned jobs do not fit (the cluster shrank): let any wait
                    sol = solve([np.concatenate(([0.0], curves[j.id, t][1:])) for j in cands], free[t])
                for job, g in zip(cands, sol.gpus):
                    if g > 0:
                        result[job.id] = self._allocation(job, ranges[job.id], int(g), t, node_size[t],
                                                          raws[job.id, t], None if pooled else t, cluster.now)
                        free[t] -= int(g)
                remaining = [j for j in remaining if j.id not in result]
        return Allocation(result)

    def _scales(self, jobs: list[JobView], refs: dict[str, float],
                finished: tuple[JobView, ...] = ()) -> dict[str, float]:
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
            # the next decision would shrink it again. The GPUs the user requested are a prior on the job's
            # size (Tiresias' 2D attained service counts GPUs x time): a request of k GPUs ages its run time
            # k**q times as fast, q = ``request_prior``. The request, not the GPUs held, so growing a job never
            # ages it; and only its run time, so a waiting large job starts level with a new small one (scaling
            # the whole estimate starved large requests under load: docs/policies.md).
            ages = {j.id: self._age(j) for j in jobs}
            times = {i: a + RUN_TIME_OFFSET for i, a in ages.items()}
            if self.size_prior == "gittins":
                # jobs whose run time is their work: the Gittins index on the finished ones' sizes in the same units
                # (``gittins.py``), else aging, both at the start of the job's band; plain aging for the others
                times.update(duration_times(jobs, ages, self._finished_sizes(finished), RUN_TIME_OFFSET))
        fallback = 1.0 if all(j.id in times for j in jobs) else (
            float(np.median(list(times.values()))) if times else 1.0)
        scale = {j.id: refs[j.id] * times.get(j.id, fallback) ** self.urgency for j in jobs}
        shortest = min((scale[j.id] / refs[j.id] for j in jobs), default=1.0)
        return {k: v / shortest for k, v in scale.items()}

    def _age(self, job: JobView) -> float:
        """Attained service in the units of the aging estimate: run time x requested GPUs ** ``request_prior``."""
        return job.run_time * max(job.requested_gpus, 1) ** self.request_prior

    def _progress_left(self, job: JobView) -> float:
        """Remaining work in units that do not depend on the batch the job runs at now: samples left at the
        current batch times that batch's statistical efficiency. Raw samples grow with the batch (a larger
        batch needs more of them), so a weight built on them would drop each time a job grows its batch and
        rise when it shrinks: a feedback loop that rescales large jobs back and forth."""
        b = job.current_batch_size or job.batch_size
        if b is None or job.speed is None:
            return job.remaining_samples
        return job.remaining_samples * job.speed.efficiency(b)

    def _allocation(self, job: JobView, rng: BatchRange, g: int, gpu_type: str, node_size: int,
                    raw: JobCurve, report_type: str | None, now: float) -> JobAllocation:
        if raw.batches[g] > 0:
            value, b = raw.values[g], int(raw.batches[g])
        else:
            value, b = self.curves.best_batch(job, rng, g, node_size, gpu_type)
        cb = job.current_batch_size
        if cb is not None and job.placement and rng.fits(g, cb) and job.num_gpus == g:
            kept = self.value(job.speed, g, math.ceil(g / node_size), cb, gpu_type)
            if value <= kept * (1 + self.hysteresis) or settling(job, now):   # held: its batch too (restart_hold)
                b = cb
        return JobAllocation(g, batch_size=None if rng.batch_free else b, gpu_type=report_type)


def place_rigid(rigid: Iterable[JobView], ranges, free: dict[str, int], result: dict, report_type: bool,
                type_of: dict[str, str], now: float, held: dict[str, int]) -> None:
    """Jobs without a speed model run at their requested size (FIFO) on the type with most free GPUs, before the DP:
    first those still paying their last (re)start, where they run (``restart_hold``); the others only on GPUs that
    ``held`` (per type: the DP's jobs held where they run) leaves. A newcomer with no speed model yet took the
    GPUs of jobs that had just started: they restarted with no step made, and the newcomer, judged by the DP once its
    first steps gave it a speed model, was pre-empted in turn (docs/policies.md)."""
    rigid = list(rigid)
    keep = {j.id for j in rigid if held_here(j, ranges[j.id].g_min, ranges[j.id].g_max, now)}
    for job in sorted(rigid, key=lambda j: j.id not in keep):   # stable: FIFO within each
        rng = ranges[job.id]
        g = min(max(job.requested_gpus, rng.g_min), rng.g_max)
        here = type_of.get(next(iter(job.placement))) if job.id in keep else None
        t = here if here in free else max(sorted(free), key=lambda t: free[t] - held.get(t, 0))
        if free[t] - (0 if job.id in keep else held.get(t, 0)) >= g:
            b = job.batch_size if job.batch_size is not None else (None if rng.batch_free else rng.b_max)
            result[job.id] = JobAllocation(g, batch_size=b, gpu_type=t if report_type else None)
            free[t] -= g


@register("elastic")
def make_elastic(hysteresis: float = 0.05, urgency: float = 0.5, restart_cost: float = 30.0,
                 size_prior: str = "gittins", request_prior: float = 0.5) -> ElasticPolicy:
    """``request_prior``: without remaining work the requested GPUs are a prior on a job's size, as in ``goodput``
    (q = 0 ages by run time alone; measured in docs/policies.md)."""
    return ElasticPolicy("elastic", fixed_batch=False, hysteresis=hysteresis, urgency=urgency,
                         restart_cost=restart_cost, size_prior=size_prior, request_prior=request_prior)


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
