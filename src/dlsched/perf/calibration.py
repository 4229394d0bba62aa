"""Calibrated 80 % intervals: split-conformal bands of the predictor's log-ratio errors, per observed fraction.

From a development set of finished curves (``bench/curves``, the Pollux apps, the seed log), the predictor
is run after observing several fractions of each curve; each run gives log(true / predicted) for the final
value and for the remaining steps to a target. The band at a fraction is the 10th–90th percentile of those
errors (interpolated over log fraction), so an interval is ``point·exp(band)``: the shape errors the
residual bootstrap cannot see (a decay the fit mis-sizes) are in it. The steps' point estimate is moved to the
median of those errors (``steps_shift``): the law's own crossing is late on the development curves (median
log(true/predicted) −0.1 to −0.3), and the band's centre is the calibrated prediction. The final errors'
median is kept too (``final_median``): the bands are skewed, and the chance of reaching a target reads through
it. A stated target (a fixed value) has steps errors of its own (``stated_steps``). ``bench/prediction_accuracy.py``
checks coverage leave-one-curve-out (``bench/target_bands.py`` for stated targets); ``calibration.json`` holds the
bands from every development curve and the prior their fits give (rewritten by ``bench/prediction_accuracy.py
--write-calibration``).
"""
from __future__ import annotations

import dataclasses
import functools
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Sequence

import numpy as np

from dlsched.perf.annealing import CurvePrior
from dlsched.perf.prior import FinishedFit, metric_kind, prior_from_fits
from dlsched.perf.schedule import Schedule

TABLE = Path(__file__).with_name("calibration.json")
LEVEL = 0.8
Z_80 = 1.2816  # the standard normal's 90 % point: a central 80 % band is ±Z_80 σ
# "Unreachable" is a claim that the run will *not* get there, so it is made at a stricter level than the 80 %
# band: the 2.5 % one-sided quantile, which with fewer than 39 development errors lies beyond the largest one
# seen (``quantile_band`` then adds 1 in log units: a run may go e times further than the worst seen).
UNREACHABLE_LEVEL = 0.95
# a table written before ``one_point``: bands about as wide as the development set's (a tenth to twice the final)
ONE_POINT = (-2.3, 0.7, -1.6, 1.6)
# the fewest errors of a cluster's own finished jobs at a fraction that replace the development set's band there:
# with 9 the conformal 80 % band's ends are the smallest and largest error, both finite (``quantile_band``)
OWN_ERRORS_MIN = 9
TABLES = ("fit", "levelled", "carried")   # a prediction's bands: the fit alone's, or a same-task level's (below)


@dataclass(frozen=True)
class Calibration:
    """Per observed fraction (increasing): the (low, high) quantiles of log(true/predicted)."""

    fractions: tuple[float, ...]
    final: tuple[tuple[float, float], ...]
    steps: tuple[tuple[float, float], ...]
    # (α, drop[, α's log spread, drop's spread]) from the same finished curves' fits (``perf.prior``)
    prior: tuple[float, ...] | None = None
    # upper end of log(true/predicted remaining improvement) — from the value now to the final one — at
    # UNREACHABLE_LEVEL: how much further than predicted a run may still get (``curve_predict``'s floor);
    # None: the floor is the 80 % band's lower end
    reach: tuple[float, ...] | None = None
    # the bands of predictions that weighed in a same-task level prior (``perf.prior``), the plain mean of the
    # task's finals: their errors are of another size than the fit's alone, which the bands above are (and which
    # that weighing uses); None: these
    levelled: "Calibration | None" = None
    # the same finished curves' fits, (α, drop or None, metric, decay[, regime[, task[, L0 / A_u, s0 / S1(budget)]]])
    # each (the last two: its shape in shares of its budget's LR area, ``perf.one_point``): the prior a declared
    # metric, schedule and regime get (``perf.prior``: pooled by metric kind and regime, weighed by decay); a fit
    # without a regime (a table written before regimes) is a from-scratch run's; the task (the run's dataset) only
    # lets a benchmark leave a run's own task out; None: ``prior`` for every run
    fits: tuple[tuple, ...] | None = None
    # ``levelled``'s counterpart for a level whose finals were carried to the run's schedule (``perf.prior``):
    # several times tighter than a plain mean's, which stays in ``levelled`` (a job that declared no schedule)
    carried: "Calibration | None" = None
    # per fraction, the median of log(true/predicted remaining steps): the steps' point estimate is the raw
    # crossing times exp(this), the centre of its band; None (a table written before it): 0
    steps_median: tuple[float, ...] | None = None
    # per fraction, the median of log(true/predicted final): the bands are skewed (at 25 %: -0.09 .. +0.74 about a
    # median of +0.03 on the development set), so the chance of a target is read through this, not the band's
    # middle; None (a table written before it): 0
    final_median: tuple[float, ...] | None = None
    # ``steps`` and ``steps_median`` of a stated target (``--target``, a job's target loss or metric): a fixed value,
    # not the predictor's own share of its predicted improvement (``--target-fraction``), whose goal moves with the
    # predicted final and misses by more (bench/target_bands.py); None (a table written before them): those
    stated_steps: tuple[tuple[float, float], ...] | None = None
    stated_steps_median: tuple[float, ...] | None = None
    # the 10th and 90th percentiles of log(true/predicted final), then of the remaining steps to --target-fraction
    # 0.95's goal, of predictions from one point after training starts (``perf.one_point``), leave-one-task-out on
    # the development curves thinned to a few evaluations; None (a table written before them): ``ONE_POINT``
    one_point: tuple[float, float, float, float] | None = None
    # the bands of an accuracy or error metric (``perf.prior.metric_kind``), from the development curves of those
    # metrics alone: a prefix of an error rate misses its end by other amounts than a loss's (it falls fast toward a
    # floor few points show: at 10 % a digits MLP's error was predicted at 0.1 % and ended at 2 %); its own
    # ``levelled``/``carried``; the shape fits and one-point bands stay this table's. None (a table written before
    # it): these bands for every metric
    error_kind: "Calibration | None" = None

    def for_metric(self, metric: str | None) -> "Calibration":
        """The table of ``metric``'s kind: ``error_kind`` for an accuracy or error (with this table's fits, prior and
        one-point bands), this one for a loss, an undeclared metric, or where no such table was written."""
        if self.error_kind is None or metric_kind(metric) in (None, "loss"):
            return self
        return dataclasses.replace(self.error_kind, prior=self.prior, fits=self.fits, one_point=self.one_point)

    def with_shifts_of(self, other: "Calibration") -> "Calibration":
        """These bands with ``other``'s steps shifts (``steps_median``, ``stated_steps_median``), table by table: the
        error-metric table's crossings are moved as the loss curves' are (its own shifts rest on the few error curves
        with a crossing still ahead late in the run, and flip sign between its tables)."""
        sub = {k: mine.with_shifts_of(theirs) for k in ("levelled", "carried")
               if (mine := getattr(self, k)) is not None and (theirs := getattr(other, k)) is not None}
        return dataclasses.replace(self, steps_median=other.steps_median, stated_steps_median=other.stated_steps_median,
                                   **sub)

    def _at(self, values, fraction: float) -> float:
        """One value per fraction, interpolated over log fraction (clipped to the calibrated ones)."""
        f = np.log(np.clip(fraction, self.fractions[0], self.fractions[-1]))
        return float(np.interp(f, np.log(self.fractions), values))

    def _band(self, table, fraction: float) -> tuple[float, float]:
        return self._at([b[0] for b in table], fraction), self._at([b[1] for b in table], fraction)

    def one_point_bands(self) -> tuple[tuple[float, float], tuple[float, float]]:
        """(final band, steps band), in log(true/predicted), of a prediction from one point (``one_point``)."""
        lo, hi, steps_lo, steps_hi = self.one_point or ONE_POINT
        return (lo, hi), (steps_lo, steps_hi)

    def final_band(self, fraction: float) -> tuple[float, float]:
        return self._band(self.final, fraction)

    def final_centre(self, fraction: float) -> float:
        """The median of log(true/predicted final) at this fraction (``final_median``), inside the final band."""
        lo, hi = self.final_band(fraction)
        return float(np.clip(0.0 if self.final_median is None else self._at(self.final_median, fraction), lo, hi))

    def steps_band(self, fraction: float, stated: bool = False) -> tuple[float, float]:
        """The steps' band to a share of the predicted improvement, or (``stated``) to a stated value."""
        return self._band(self.stated_steps if stated and self.stated_steps else self.steps, fraction)

    def steps_shift(self, fraction: float, stated: bool = False) -> float:
        """log factor from the law's own crossing to the calibrated point estimate of the steps (``steps_median``;
        ``stated``: ``stated_steps_median``)."""
        median = self.stated_steps_median if stated and self.stated_steps else self.steps_median
        return 0.0 if median is None else self._at(median, fraction)

    def fit_sigma(self, fraction: float) -> float:
        """Log-normal sigma of the fit-alone final value implied by its 80 % band at this fraction."""
        lo, hi = self.final_band(fraction)
        return max((hi - lo) / (2 * Z_80), 1e-3)

    def level_table(self, carried: bool) -> str:
        """The table (``TABLES``) of a prediction that weighed in a same-task level prior, by whether its finals
        were carried to the run's schedule. A table written before ``carried`` existed serves both from
        ``levelled``: those bands were calibrated on plain means, wider than a carried level needs (over-covering,
        not under)."""
        return "carried" if carried and self.carried is not None else "levelled" if self.levelled is not None else "fit"

    def table(self, name: str) -> "Calibration":
        """The bands of table ``name`` (``TABLES``): this one's for "fit" (or a table it does not hold)."""
        return {"levelled": self.levelled, "carried": self.carried}.get(name) or self

    def reach_log(self, fraction: float) -> float | None:
        """log(most the remaining improvement may exceed its prediction) at this fraction (``reach``)."""
        return None if self.reach is None else self._at(self.reach, fraction)

    def curve_prior(self, metric: str | None = None, schedule: Schedule | None = None,
                    regime: str = "scratch") -> CurvePrior:
        """The shape prior the development curves' fits give a run of this metric, schedule and regime (all of
        them without ``fits``; ``CurvePrior()`` before any calibration)."""
        if self.fits and metric is not None:
            p = prior_from_fits(self.finished_fits(), {"metric": metric, "regime": regime,
                                                       "decay": None if schedule is None else schedule.decay})
            return CurvePrior(p.alpha, p.drop, alpha_sigma=p.alpha_sigma, drop_sigma=p.drop_sigma)
        if not self.prior:
            return CurvePrior()
        a, d, *spread = self.prior
        return CurvePrior(a, d, **dict(zip(("alpha_sigma", "drop_sigma"), spread)))

    def with_own_errors(self, errors: Mapping[str, Mapping[float, Sequence[float]]],
                        steps: Mapping[str, Mapping[float, Sequence[float]]] | None = None) -> "Calibration":
        """This table with the final-value band and median of each fraction at which ``errors`` — log(true/predicted
        final) of a cluster's own finished jobs, by the table (``TABLES``) the prediction's band came from and the
        fraction it was made at — hold ``OWN_ERRORS_MIN`` or more: what a service measured of its own predictions
        stands for the development set's. By table, as the development set's are: a prediction from a level of
        the same task's finished jobs misses by several times less than one from the fit alone. ``steps``, the
        same of log(true/the law's predicted steps) to stated targets, makes a stated target's steps band and
        median (``stated_steps``) theirs likewise. The other steps' bands and the unreachable floor stay the
        development set's."""
        def own(table: "Calibration", by_fraction) -> dict[float, list[float]]:
            finite = {f: [v for v in by_fraction.get(f, ()) if math.isfinite(v)] for f in table.fractions}
            return {f: e for f, e in finite.items() if len(e) >= OWN_ERRORS_MIN}

        def pooled(table, own_errors, bands, medians) -> tuple[tuple, tuple]:
            medians = medians or (0.0,) * len(table.fractions)
            return (tuple(quantile_band(own_errors[f]) if f in own_errors else b
                          for f, b in zip(table.fractions, bands)),
                    tuple(float(np.median(own_errors[f])) if f in own_errors else m
                          for f, m in zip(table.fractions, medians)))

        def replaced(table: "Calibration | None", name: str) -> "Calibration | None":
            if table is None:
                return None
            final, stated = own(table, errors.get(name, {})), own(table, (steps or {}).get(name, {}))
            out = table
            if final:
                bands, centres = pooled(table, final, table.final, table.final_median)
                out = dataclasses.replace(out, final=bands, final_median=centres)
            if stated:
                bands, centres = pooled(table, stated, table.stated_steps or table.steps,
                                        table.stated_steps_median or table.steps_median)
                out = dataclasses.replace(out, stated_steps=bands, stated_steps_median=centres)
            return out

        return dataclasses.replace(replaced(self, "fit"), levelled=replaced(self.levelled, "levelled"),
                                   carried=replaced(self.carried, "carried"))

    def finished_fits(self) -> list[FinishedFit]:
        """``fits`` as ``perf.prior`` pools them, with their relative shapes (``perf.one_point``)."""
        return [FinishedFit(a, math.nan if d is None else d,
                            {"metric": m, "decay": k, "regime": rest[0] if rest else None},
                            relative_shape=tuple(math.inf if v is None else v for v in rest[2:4])
                            if len(rest) >= 4 else None)
                for a, d, m, k, *rest in self.fits or ()]

    def without_task(self, task: str) -> "Calibration":
        """This table with the fits of ``task``'s runs left out: the shipped prior a run of that task would get had
        the development set never held it (a benchmark's leave-one-task-out)."""
        if not self.fits:
            return self
        return dataclasses.replace(self, fits=tuple(f for f in self.fits if len(f) < 6 or f[5] != task))

    def as_dict(self) -> dict:
        return {"fractions": self.fractions, "final": self.final, "steps": self.steps, "prior": self.prior,
                "reach": self.reach, "levelled": None if self.levelled is None else self.levelled.as_dict(),
                "fits": self.fits, "carried": None if self.carried is None else self.carried.as_dict(),
                "steps_median": self.steps_median, "final_median": self.final_median,
                "stated_steps": self.stated_steps, "stated_steps_median": self.stated_steps_median,
                "one_point": self.one_point,
                "error_kind": None if self.error_kind is None else self.error_kind.as_dict()}

    def to_json(self) -> str:
        return json.dumps(self.as_dict(), indent=1)


# Before any calibration exists: ±30 % on the value, ×/÷ 2 on the steps (wide on purpose).
UNCALIBRATED = Calibration((0.1, 1.0), ((-0.3, 0.3), (-0.3, 0.3)), ((-0.7, 0.7), (-0.7, 0.7)))


def quantile_band(errors, level: float = LEVEL) -> tuple[float, float]:
    """Conformal (finite-sample) quantiles of the errors: with n errors the ⌈(n+1)(1 ± level)/2⌉-th order
    statistics, so a new exchangeable error falls inside with probability ≥ level."""
    e = np.sort(np.asarray([v for v in errors if math.isfinite(v)], float))
    n = len(e)
    if n == 0:
        return (-math.inf, math.inf)
    q = (1 - level) / 2
    lo_i = int(math.floor((n + 1) * q + 1e-9)) - 1   # 1e-9: (n+1)·0.1 must not floor below a whole number
    hi_i = int(math.ceil((n + 1) * (1 - q) - 1e-9)) - 1
    return (float(e[lo_i]) if lo_i >= 0 else float(e[0]) - 1.0, float(e[hi_i]) if hi_i < n else float(e[-1]) + 1.0)


def calibrate(records, level: float = LEVEL) -> Calibration:
    """``records``: (fraction, log final error, log steps error[, log remaining-improvement error[, log steps error
    of a crossing predicted ahead, before the budget: the ones the median shift moves[, the same two of a stated
    target]]]); nan where a run had none."""
    r = np.asarray(records, float)
    fr = tuple(sorted(set(r[:, 0].tolist())))
    final = _filled([quantile_band(r[r[:, 0] == f, 1], level) for f in fr])
    steps = _filled([quantile_band(r[r[:, 0] == f, 2], level) for f in fr])
    moved = 4 if r.shape[1] > 4 else 2
    # pooled with the earlier fractions' errors: more points do not make every curve's prediction better, and a
    # floor that rose faster than the worst late error would call a reached target unreachable
    reach = tuple(quantile_band(r[r[:, 0] <= f, 3], UNREACHABLE_LEVEL)[1] for f in fr) if r.shape[1] > 3 else None
    stated = {}
    if r.shape[1] > 6:
        stated = {"stated_steps": _filled([quantile_band(r[r[:, 0] == f, 5], level) for f in fr]),
                  "stated_steps_median": _medians(r, fr, 6)}
    return Calibration(fr, final, steps, reach=reach, steps_median=_medians(r, fr, moved),
                       final_median=_medians(r, fr, 1), **stated)


# the fewest errors whose median moves a point estimate: late fractions have few targets still ahead (one levelled
# run's stated-target error at 75 % observed, e^1.6, would have tripled every such prediction)
MEDIAN_MIN = 5


def _medians(r: np.ndarray, fractions, column: int) -> tuple[float, ...]:
    """Per fraction, the median of a column's finite errors (a fraction with fewer than ``MEDIAN_MIN`` takes the one
    before, 0 first)."""
    filled = _filled([(_median(r[r[:, 0] == f, column]),) for f in fractions], start=(0.0,))
    return tuple(m for (m,) in filled)


def _median(errors) -> float:
    e = errors[np.isfinite(errors)]
    return float(np.median(e)) if len(e) >= MEDIAN_MIN else math.nan


def _filled(bands: list[tuple[float, ...]],
            start: tuple[float, ...] = UNCALIBRATED.steps[0]) -> tuple[tuple[float, ...], ...]:
    """A fraction without errors (every target already reached there) takes the nearest earlier band (or value)."""
    out, last = [], start
    for b in bands:
        last = b if all(map(math.isfinite, b)) else last
        out.append(last)
    return tuple(out)


@functools.lru_cache(maxsize=4)   # read once per process: the live loop's refit asks on every fit
def load_calibration(path: Path = TABLE) -> Calibration:
    """The shipped bands, or ``UNCALIBRATED`` when the table is missing."""
    try:
        return from_dict(json.loads(Path(path).read_text()))
    except FileNotFoundError:
        return UNCALIBRATED


def from_dict(d: dict) -> Calibration:
    prior, reach, levelled, fits, carried, median, final_median, stated, stated_median, one_point, error_kind = (
        d.get(k) for k in ("prior", "reach", "levelled", "fits", "carried", "steps_median", "final_median",
                           "stated_steps", "stated_steps_median", "one_point", "error_kind"))
    return Calibration(tuple(d["fractions"]), tuple(map(tuple, d["final"])), tuple(map(tuple, d["steps"])),
                       tuple(prior) if prior else None, tuple(reach) if reach else None,
                       from_dict(levelled) if levelled else None, tuple(map(tuple, fits)) if fits else None,
                       from_dict(carried) if carried else None, tuple(median) if median else None,
                       tuple(final_median) if final_median else None, tuple(map(tuple, stated)) if stated else None,
                       tuple(stated_median) if stated_median else None, tuple(one_point) if one_point else None,
                       from_dict(error_kind) if error_kind else None)
