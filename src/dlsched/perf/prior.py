"""A prior for a new job's curve from the fits of finished jobs (the seed study regresses the curve on model
depth and GPU type; we do the same on whatever metadata the jobs carry: model family, depth, dataset, batch).

Each finished job contributes its fitted exponent α and its annealing drop c (``AnnealingCurve``: the
fraction of the loss a full decay removes; none from a run whose LR never fell). The prior for a new job is their kernel-weighted mean in
log space, a finished job weighing 4^(number of metadata fields it shares with the new one: ``FIELDS``): same family and
dataset dominate, everything else still counts; a field the new job does not name (no dataset param) is shared
with no one. The prior's weight in points grows with how many finished jobs matched, so it stays a hint the new
job's own points soon outweigh.

Spread: how sure the prior is of α and c is the finished runs' kernel-weighted spread. Runs of the new job's task
(``shares_task``) may narrow it to the same-task floors. Runs of other tasks only measure how the numbers vary
across tasks, and two or three of them can agree by chance: there the ``default``'s spread (the service passes the
shipped development prior's) is pooled in as ``CROSS_TASK_RUNS`` runs more, the conjugate update of a variance.

Kind: the shape prior pools only finished runs of the new job's metric kind (``kind_of``: a loss, or an
error rate / accuracy) once ``KIND_MIN`` of them carry the number, and all runs before that. Cross-entropy has a
large irreducible part an LR decay cannot remove (a full decay takes ~5 % off a language model's loss), whereas
an error rate falls proportionally much more (20–75 % on the Pollux vision apps): pooled, one kind's drop is
the other's bias. How the LR comes down (``Schedule.decay``: cut by factors at milestones, or annealed
gradually toward 0) is one more metadata field of the kernel: a cut lands at once on a run that had settled at
the held LR, an anneal works while the run is still moving, and the law's S2 does not tell the two apart; a
field, not a partition, so runs of the same task under another schedule still count. Metric and schedule are
what a user declares (``--metric``, ``--schedule``), not per-dataset constants.

Regime: within the kind, the shape prior pools only the finished runs of the new job's regime (``REGIMES``: trained
from scratch, or fine-tuned from pretrained weights, as the user declares: ``dlsched predict curve --regime``),
again only once ``KIND_MIN`` of them remain. A fine-tune's curve falls fast from a good start and improves
little in relative terms (the development set's fine-tune runs, ``docs/curve-prediction.md``): its α and drop
are not a from-scratch run's, and pooled with them each regime's prior is biased toward the other's. A
finished run that names no regime was trained from scratch (every curve before regimes existed was).

Over-fitting: a finished run declared ``overfits`` (its held-out value bottoms and then rises: the development
set's ``index.csv`` column) sets no shape number. The law is monotone in the LR's area, so such a run's fit
describes a curve the law cannot have, and its α and drop would bias every run of its kind
(``docs/curve-prediction.md``, "Fine-tune runs and the regime"). It still counts for its task's level, and its
predictions still set the calibrated bands: a running job cannot know it will over-fit. A declared property,
not a threshold on how far the end rises above the minimum: noise would move such a line.

Level: finished jobs of the same task (``LEVEL_FIELDS``: dataset and metric) also say where a run ends. With
two or more of them the prior carries their (weighted, below) geometric mean final value and its predictive log spread
(s·√(1 + 1/n), never below ``LEVEL_SIGMA_MIN``); ``perf.curve_predict`` weighs it against the fit's own
calibrated error. Other tasks say nothing about the level, so no level prior comes from them.

Where a run ends depends on its schedule as much as on its task: on the development set the constant-LR and
WSD runs of a language model end 5–10 % below its cosine and step runs (more LR area), so a plain mean of
the task's finals pulled exactly those runs' predictions up. Given the new run's schedule and a finished
run's full fit (``FinishedFit.curve``), that run's final is carried to the new schedule by its own law
(``transferred_final``): its final times the ratio of its law at the new schedule's budget to its law at
its own. Schedules are relative (peak 1, ``schedule.areas``): the transfer assumes the task's runs share a
peak LR, as a schedule sweep does.
A carry is the less certain the further its law must extrapolate in LR area: the carried finals are weighed
by the inverse of an error that grows with it, learnt from the task's runs carried to each other's schedules
(``carry_weights``).
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field

import numpy as np
from scipy.optimize import nnls

from dlsched.perf.annealing import AnnealingCurve, CurvePrior
from dlsched.perf.schedule import GRID, Schedule, areas

FIELDS = ("family", "depth", "dataset", "batch", "metric", "decay")
LEVEL_FIELDS = ("dataset", "metric")
LEVEL_SIGMA_MIN = 0.05
# a carried final's error never counts below this (log): one rerun of the same schedule would otherwise take every weight
CARRY_SIGMA_MIN = 0.01
CARRY_PAIR_RUNS = 12   # the most runs carried to each other's schedules (132 carries, ~10 ms)
CARRY_MIN_RUNS = 3   # two runs carried to each other's schedules give two errors for two unknowns: equal weights
# the shape beliefs never get tighter than this, however well the finished runs agree: a new run still has its
# own seed, batch and budget (the defaults in ``CurvePrior`` apply before two runs are known)
ALPHA_SIGMA_MIN, DROP_SIGMA_MIN = 0.2, 0.05   # same task, same metric: runs still differ by seed, schedule and budget
# finished runs of the new job's metric kind needed before the shape prior pools only them (module doc); fewer
# would let one odd run set the prior
KIND_MIN = 3
# how many runs' worth ``default``'s spread counts beside a pool of other tasks' runs (module doc): two or three
# cluster jobs cannot halve it; the shipped spreads, from about 20 effective development runs, move little (α's)
# or, where they sat at the floor, a little wider (a loss curve's drop: 0.05 -> 0.07)
CROSS_TASK_RUNS = 2.0
REGIMES = ("scratch", "finetune")


def regime_of(meta: dict) -> str:
    """A finished run's regime (module doc): ``scratch`` unless its metadata names one."""
    return meta.get("regime") or "scratch"


def metric_kind(metric: str | None) -> str | None:
    """``loss`` or ``error`` (accuracy is modelled as its error); None when not declared."""
    return None if metric is None else "loss" if metric == "loss" else "error"


def kind_of(meta: dict) -> str | None:
    """A run's metric kind (``metric_kind``): of its declared ``kind`` where the ``metric`` is a name a script
    reports (a service job's stated target: ``val_accuracy`` of kind accuracy), else of its ``metric``."""
    return metric_kind(meta.get("kind") or meta.get("metric"))


@dataclass(frozen=True)
class FinishedFit:
    """One finished job: its metadata and the two shape numbers its full-curve fit gives."""

    alpha: float
    drop: float
    meta: dict = field(default_factory=dict)
    # the value it ended at, lower-is-better, on the scale of the runs it is a prior for (the service keeps an
    # accuracy's error as a fraction, ``service.metric_target.reported_scale``); nan: not known
    final: float = math.nan
    curve: AnnealingCurve | None = None   # its full fit: carries ``final`` to another schedule (module doc)
    # its fit's shape in shares of its budget's LR area where the fit itself is not kept (``perf.one_point``)
    relative_shape: tuple[float, float] | None = None


def finished_fit(curve: AnnealingCurve, meta: dict | None = None, final: float = math.nan) -> FinishedFit:
    _, s2_end = areas(curve.schedule, [curve.schedule.budget])
    # a run whose LR never fell says nothing about the drop a decay brings
    return FinishedFit(curve.alpha, curve.c if s2_end[0] > 0.05 else math.nan,
                       {"decay": curve.schedule.decay, **(meta or {})}, final, curve)


def fit_record(f: FinishedFit) -> dict:
    """``f`` as plain JSON (a NaN as null), to be stored; ``fit_from_record`` reads it back."""
    num = lambda v: v if math.isfinite(v) else None   # noqa: E731
    c = f.curve
    curve = None if c is None else {"l0": c.l0, "a": c.a, "alpha": c.alpha, "c": c.c, "s0": c.s0,
                                    "schedule": dataclasses.asdict(_thinned(c.schedule))}
    return {"alpha": f.alpha, "drop": num(f.drop), "meta": f.meta, "final": num(f.final), "curve": curve}


def _thinned(s: Schedule) -> Schedule:
    """A logged LR has a knot per progress record: at most ``schedule.GRID`` knots are kept, the resolution its
    areas are computed at anyway."""
    if s.stepwise or len(s.xs) <= GRID:
        return s
    xs = np.linspace(s.xs[0], s.xs[-1], GRID)
    return dataclasses.replace(s, xs=tuple(xs.tolist()), lrs=tuple(np.interp(xs, s.xs, s.lrs).tolist()))


def fit_from_record(d: dict) -> FinishedFit:
    nan = lambda v: math.nan if v is None else float(v)   # noqa: E731
    c = d.get("curve")
    curve = None if c is None else AnnealingCurve(
        c["l0"], c["a"], c["alpha"], c["c"], Schedule(**{**c["schedule"], "xs": tuple(c["schedule"]["xs"]),
                                                         "lrs": tuple(c["schedule"]["lrs"])}), c["s0"])
    return FinishedFit(float(d["alpha"]), nan(d.get("drop")), dict(d.get("meta") or {}), nan(d.get("final")), curve)


def carried_curve(f: FinishedFit, schedule: Schedule, drop: float) -> AnnealingCurve | None:
    """Finished run ``f``'s law on ``schedule``, scaled by its final over its law's own end (module doc): the curve
    it would have followed there; None without a fit, a final, or a positive end. ``drop`` stands in for its c where
    its own LR never fell (its fit could not see c)."""
    if f.curve is None or not (math.isfinite(f.final) and f.final > 0):
        return None
    own = float(f.curve.value([f.curve.schedule.budget])[0])
    moved = dataclasses.replace(f.curve, schedule=schedule, c=f.drop if math.isfinite(f.drop) else drop)
    end = float(moved.value([schedule.budget])[0])
    if not (own > 0 and math.isfinite(end) and end > 0):
        return None
    k = f.final / own
    return dataclasses.replace(moved, l0=moved.l0 * k, a=moved.a * k)


def transferred_final(f: FinishedFit, schedule: Schedule | None, drop: float) -> float:
    """Where finished run ``f`` would have ended under ``schedule`` (``carried_curve``'s end): its final as it is
    without a schedule or a fit."""
    carried = None if schedule is None else carried_curve(f, schedule, drop)
    return f.final if carried is None else float(carried.value([schedule.budget])[0])


def level_prior(fits: list[FinishedFit], meta: dict, schedule: Schedule | None = None,
                drop: float = 0.0) -> tuple[float, float, tuple[AnnealingCurve, ...], tuple[float, ...]] | None:
    """(final value, log sigma, the runs' ``carried_curve``s: empty unless every final was carried, their weights)
    from the finished runs of the same task, each carried to ``schedule`` when given and its fit is known (module
    doc), or None. The final is the weighted geometric mean (``carry_weights``)."""
    task = [f for f in fits if math.isfinite(f.final) and f.final > 0 and shares_task(f, meta)]
    if len(task) < 2:
        return None
    curves = [None if schedule is None else carried_curve(f, schedule, drop) for f in task]
    logs = np.log([f.final if c is None else float(c.value([schedule.budget])[0]) for f, c in zip(task, curves)])
    spread = float(np.std(logs, ddof=1)) * math.sqrt(1 + 1 / len(logs))
    # a mix (some runs stored without their fit) is scored as a plain mean: the wider bands
    carried = () if None in curves else tuple(curves)
    w = carry_weights(task, schedule, drop) if carried else np.ones(len(task))
    return math.exp(float(np.average(logs, weights=w))), max(spread, LEVEL_SIGMA_MIN), carried, tuple(float(v) for v in w / w.sum())


def _log_area(schedule: Schedule) -> float:
    return math.log(max(float(areas(schedule, [schedule.budget])[0][0]), 1e-12))


def carry_weights(task: list[FinishedFit], schedule: Schedule, drop: float) -> np.ndarray:
    """Inverse-variance weights of the task's finished runs' finals carried to ``schedule``: a carry's error grows
    with how far its law must extrapolate in LR area, err² ≈ s² + κ²·d², d = log(S1 there / S1 of the run's own
    schedule), s and κ fitted (non-negative least squares) to the runs carried to *each other's* schedules, whose
    finals are known; equal weights from fewer than ``CARRY_MIN_RUNS`` runs (docs/curve-prediction.md, "Carried
    finals weighed by their carry's length")."""
    if len(task) < CARRY_MIN_RUNS:
        return np.ones(len(task))
    area = [_log_area(f.curve.schedule) for f in task]
    d2, e2 = [], []
    pairs = list(enumerate(task))[-CARRY_PAIR_RUNS:]   # n² carries: a long-lived task's newest runs say enough
    for i, fi in pairs:
        for k, fk in pairs:
            moved = None if i == k else carried_curve(fi, fk.curve.schedule, drop)
            if moved is not None:
                end = float(moved.value([fk.curve.schedule.budget])[0])
                d2.append((area[k] - area[i]) ** 2)
                e2.append(math.log(end / fk.final) ** 2)
    if len(e2) < 3:
        return np.ones(len(task))
    (s2, k2), _ = nnls(np.column_stack([np.ones(len(d2)), d2]), np.array(e2))
    target = _log_area(schedule)
    return 1.0 / (max(s2, CARRY_SIGMA_MIN ** 2) + k2 * (target - np.array(area)) ** 2)


def prior_from_fits(fits: list[FinishedFit], meta: dict | None = None, default: CurvePrior = CurvePrior(),
                    schedule: Schedule | None = None) -> CurvePrior:
    """Kernel-weighted mean of the finished fits (see the module docstring); ``default`` when there are none.
    ``schedule``: the new run's, to which the same task's finals are carried for the level prior."""
    if not fits:
        return default
    meta = meta or {}
    alpha_fits = shape_pool(fits, meta, lambda f: True)
    drop_fits = shape_pool(fits, meta, lambda f: math.isfinite(f.drop))   # a run whose LR never fell has no drop
    alpha, alpha_sigma = _alpha_prior(alpha_fits, meta, default)
    drop, drop_sigma = _drop_prior(drop_fits, meta, default)
    w = kernel_weights(fits, meta)
    matched = float(w.sum() / w.max())  # effective number of equally relevant finished jobs
    level = level_prior(fits, meta, schedule, drop)
    return CurvePrior(alpha, drop, weight=default.weight * min(2.0, 1.0 + 0.1 * matched),
                      final=None if level is None else level[0], final_sigma=math.inf if level is None else level[1],
                      final_carried=level is not None and bool(level[2]),
                      level_curves=() if level is None else level[2],
                      level_weights=() if level is None or not level[2] else level[3],
                      alpha_sigma=alpha_sigma, drop_sigma=drop_sigma)


def shape_pool(fits: list[FinishedFit], meta: dict, counts) -> list[FinishedFit]:
    """The finished fits a shape number is pooled from (module doc): narrowed to the new run's metric kind, then
    to its regime, each narrowing kept only where at least ``KIND_MIN`` fits that ``counts`` remain; a narrowing
    the new run's metadata does not name (no metric, no regime) is not made. Runs that over-fit never enter."""
    kind, regime = kind_of(meta), meta.get("regime")
    pool = [f for f in fits if has_law_shape(f)]
    for same in (lambda f: kind is not None and kind_of(f.meta) == kind,
                 lambda f: regime is not None and regime_of(f.meta) == regime):
        narrower = [f for f in pool if same(f)]
        if sum(1 for f in narrower if counts(f)) >= KIND_MIN:
            pool = narrower
    return pool


def has_law_shape(f: FinishedFit) -> bool:
    """Whether a finished run may set a shape number: not one declared to over-fit (module doc)."""
    return not f.meta.get("overfits")


def _shared(f: FinishedFit, meta: dict, field: str) -> bool:
    """Whether ``f`` and the new run name the same ``field``: one neither names is unknown, not shared (two jobs
    without a dataset param are not of one dataset)."""
    return meta.get(field) is not None and f.meta.get(field) == meta[field]


def kernel_weights(fits: list[FinishedFit], meta: dict) -> np.ndarray:
    return np.array([4.0 ** sum(_shared(f, meta, k) for k in FIELDS) for f in fits])


def shares_task(f: FinishedFit, meta: dict) -> bool:
    """Whether finished run ``f`` is of the new run's task: the same dataset and metric, both named."""
    return all(_shared(f, meta, k) for k in LEVEL_FIELDS)


def _alpha_prior(fits: list[FinishedFit], meta: dict, default: CurvePrior) -> tuple[float, float]:
    if not fits:   # every finished run over-fitted
        return default.alpha, default.alpha_sigma
    w = kernel_weights(fits, meta)
    logs = np.log([max(f.alpha, 1e-3) for f in fits])
    return math.exp(float(np.average(logs, weights=w))), _spread(logs, w, default.alpha_sigma, ALPHA_SIGMA_MIN,
                                                                  _cross_task_runs(fits, meta))


def _drop_prior(fits: list[FinishedFit], meta: dict, default: CurvePrior) -> tuple[float, float]:
    seen = [f for f in fits if math.isfinite(f.drop)]
    if not seen:
        return default.drop, default.drop_sigma
    w = kernel_weights(seen, meta)
    # drop ratios can be 0: average them plainly, a log would make one zero dominate
    drops = np.array([f.drop for f in seen])
    return float(np.average(drops, weights=w)), _spread(drops, w, default.drop_sigma, DROP_SIGMA_MIN,
                                                      _cross_task_runs(seen, meta))


def _cross_task_runs(pool: list[FinishedFit], meta: dict) -> float:
    """How many runs' worth ``default``'s spread counts beside the fits a shape number is pooled from (module doc):
    none beside a run of the new one's task; ``CROSS_TASK_RUNS`` beside runs of other tasks only, whose spread is
    how the number varies across tasks, which a few of them that happen to agree say little about."""
    return 0.0 if any(shares_task(f, meta) for f in pool) else CROSS_TASK_RUNS


def _spread(values, weights, default: float, floor: float, prior_runs: float = 0.0) -> float:
    """Kernel-weighted standard deviation of the finished fits' values (their effective count corrected, as
    ddof=1 does), pooled with ``default`` as ``prior_runs`` runs more (the conjugate update of a variance), never
    below ``floor``; ``default`` from fewer than two effective runs."""
    w = np.asarray(weights, float)
    n_eff = w.sum() ** 2 / (w ** 2).sum()
    if len(values) < 2 or n_eff < 2:
        return default
    var = float(np.average((values - np.average(values, weights=w)) ** 2, weights=w)) * n_eff / (n_eff - 1)
    var = (n_eff * var + prior_runs * default ** 2) / (n_eff + prior_runs)
    return max(math.sqrt(var), floor)
