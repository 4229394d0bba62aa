"""The bands of a cluster's own predictions: how far each job that ran to its budget ended from the
final value the service predicted for it at each calibrated fraction (``perf.calibration``), of its loss and of the
metric it stated a target of, kept beside its finished fits (``Store.add_finished_fit``, the records'
``final_errors``). Once ``OWN_ERRORS_MIN`` jobs have an error of a metric kind at a fraction, the bands of that kind
there are theirs (``Calibration.with_own_errors``): a cluster whose workloads the development set's curves do not
resemble gets bands as wide as its own misses, and one they do, bands as narrow. By calibration table, as the shipped
bands are: a prediction from a same-task level misses by several times less than one from the fit alone, and one
pool of both over-covered with bands several times as wide as the shipped ones (docs/curve-prediction.md). A stated
target's steps band likewise: how far from the law's predicted crossing a job's log got to its target
(``steps_errors``).
"""
from __future__ import annotations

import math
import threading
from typing import Callable, Iterable

from dlsched.perf.calibration import Calibration, load_calibration
from dlsched.perf.prior import kind_of
from dlsched.service.store import JobRecord, Store, newest_fit_numbers

RAN_TO_BUDGET = 0.99   # a job that stopped well before its total (the script's own early stop) ended elsewhere
LOSS_FIT = "$"                  # where a stored prediction keeps its loss fit (``final``, ``bands``)
TARGET_FIT = "$.metric_target"  # ... and its stated target's, in the job's units


def final_errors(store: Store, job: JobRecord | None, ended_at: float, fit: str = LOSS_FIT,
                 down: Callable[[float], float] = float) -> list[list]:
    """[fraction, table, log(ended_at / predicted final)] of the newest prediction made at each calibrated fraction
    of the job's samples, and past half of it (a job first predicted at 30 % says nothing of 10 %); table: the
    calibration table its band came from (``perf.calibration.TABLES``). [] for a job that did not run to its budget.
    ``down``: a stored prediction's value in the space ``ended_at`` is in."""
    if not (math.isfinite(ended_at) and ended_at > 0):
        return []

    def error(final: float) -> float | None:
        value = down(final)
        return math.log(ended_at / value) if value > 0 else None
    return _by_fraction(store, job, fit, ("final",), error)


def steps_errors(store: Store, job: JobRecord | None, reached_at: float | None, fit: str = LOSS_FIT) -> list[list]:
    """[fraction, table, log(true / the law's predicted steps to the stated target)] of the newest prediction made at
    each calibrated fraction of the job's samples (and past half of it) whose law crossed the target ahead of it,
    before the budget (``refit.fit_loss``'s ``target_step_law``): the predictions whose band the service showed.
    ``reached_at``: the step the job's log got there (``perf.first_passage.logged_crossing``); [] for a job that
    never did, or did not run to its budget."""
    if reached_at is None:
        return []

    def error(seen: float, law: float) -> float | None:
        return math.log((reached_at - seen) / (law - seen)) if law > seen and reached_at > seen else None
    return _by_fraction(store, job, fit, ("observed_until", "target_step_law"), error)


def _by_fraction(store: Store, job: JobRecord | None, fit: str, names: tuple[str, ...],
                 error: Callable[..., float | None]) -> list[list]:
    """[fraction, table, error(*the numbers ``names``)] of the newest prediction holding them made at each calibrated
    fraction of a job that ran to its budget (``store.newest_fit_numbers``); none where ``error`` says None."""
    if job is None or not job.total_samples or job.samples < RAN_TO_BUDGET * job.total_samples:
        return []
    out = []
    for f in load_calibration().fractions:
        made = newest_fit_numbers(store, job.id, f / 2, f, fit, names)
        if made is not None and (e := error(*made[0])) is not None:
            out.append([float(f), made[1], e])
    return out


class OwnBands:
    """The errors of the finished jobs' records by metric kind (``perf.prior.kind_of``), and the bands they give."""

    def __init__(self, records: Iterable[dict] = ()):
        self._errors: dict[str | None, dict[str, dict[float, list[float]]]] = {}
        self._steps: dict[str | None, dict[str, dict[float, list[float]]]] = {}   # of stated targets' steps
        self._tables: dict[str | None, Calibration] = {}
        self._lock = threading.Lock()   # the loop adds while a /metrics scrape counts
        for d in records:
            self.add(kind_of(d.get("meta") or {}), d.get("final_errors") or [], d.get("steps_errors") or [])

    def add(self, kind: str | None, errors: list[list], steps: list[list] = ()) -> None:
        with self._lock:
            for pool, new in ((self._errors, errors), (self._steps, steps)):
                for f, table, e in new:
                    pool.setdefault(kind, {}).setdefault(table, {}).setdefault(float(f), []).append(float(e))
            self._tables.pop(kind, None)

    def counts(self, steps: bool = False) -> dict[tuple[str | None, str, float], int]:
        """{(kind, table, fraction): errors kept} of the final value (``steps``: of a stated target's steps): a pool
        with ``OWN_ERRORS_MIN`` sets its band."""
        with self._lock:
            return {(kind, table, f): len(e) for kind, tables in (self._steps if steps else self._errors).items()
                    for table, by_fraction in tables.items() for f, e in by_fraction.items()}

    def of(self, kind: str | None) -> Calibration:
        """The shipped table of ``kind`` (``Calibration.for_metric``), with this cluster's own bands where enough jobs
        finished."""
        if kind not in self._tables:
            self._tables[kind] = load_calibration().for_metric(kind).with_own_errors(self._errors.get(kind, {}),
                                                                    self._steps.get(kind, {}))
        return self._tables[kind]
