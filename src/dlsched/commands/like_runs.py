"""``dlsched predict curve FILE --like DONE ...``: finished runs of the run's task, read as FILE is read, give its prior
(``perf.prior``): their fits' shape, and with two or more their finals carried to its schedule as its level; what a
service job gets from the jobs that finished on the cluster (``service.job_models.curve_prior``)."""
from __future__ import annotations

from pathlib import Path
from typing import Callable

import numpy as np

from dlsched.errors import UserError
from dlsched.perf.annealing import CurvePrior, fit_annealing
from dlsched.perf.calibration import load_calibration
from dlsched.perf.curve_predict import MetricSpace
from dlsched.perf.curve_readers import CurveData, read_curve
from dlsched.perf.perfect_points import with_stand_in
from dlsched.perf.prior import FinishedFit, finished_fit, prior_from_fits
from dlsched.perf.schedule import Schedule

# the finished runs and the new one are of one task by the user's word: one dataset and metric for ``perf.prior``
TASK = "like"


def read_like_run(file: Path, x: str, y: str, lr_col: str | None, time_col: str | None = None) -> CurveData:
    """One ``--like`` run's log, read as FILE is read (``time_col``: its wall-clock times too, the speed of a run that
    has none of its own yet)."""
    try:
        return read_curve(file, x=x, y=y, lr_col=lr_col, time_col=time_col)
    except UserError as e:   # its line names the file: say it is a --like run's
        raise UserError(f"--like {e}") from None


def finished_run(file: Path, log: CurveData, y: str, metric: str, regime: str,
                 schedule_of: Callable[[CurveData, float], Schedule],
                 shift: Callable[[CurveData], CurveData], top: float = 1.0) -> FinishedFit:
    """One ``--like`` run's fit on all the points of its ``log`` (``read_like_run``; ``shift``: as FILE's x is read)
    and where it ended (the median of its last 3 values, lower-is-better), on FILE's accuracy scale ``top``
    (``MetricSpace.top``: a run logged in % beside one logged as a fraction). Its schedule: ``schedule_of`` its curve
    and budget (its log's, else its last x)."""
    curve = shift(log)
    budget = curve.budget if curve.budget is not None else float(curve.x[-1])
    try:
        schedule = schedule_of(curve, budget)
    except UserError as e:   # its line names the option: say which --like run
        raise UserError(f"--like {file}: {e}") from None
    ok = np.isfinite(curve.x) & np.isfinite(curve.y)
    xs, values = curve.x[ok], curve.y[ok]
    space = MetricSpace.of(metric, values)
    down = with_stand_in(space.down(values))   # an accuracy of 100 %, a loss of 0: as the run's own (``predict_curve``)
    try:
        if np.any(down <= 0):
            raise ValueError(f"a value leaves no positive {'error' if metric == 'accuracy' else metric}")
        fit = fit_annealing(xs, down, schedule, None)
    except ValueError as e:
        raise UserError(f"--like {file}: field {y!r}: {e}") from None
    return finished_fit(fit, {"dataset": TASK, "metric": metric, "regime": regime},
                        float(np.median(down[-3:])) * top / space.top)


def like_prior(fits: list[FinishedFit], metric: str, regime: str, schedule: Schedule) -> CurvePrior:
    """The new run's prior from the finished runs, the shipped prior of its metric and regime their default."""
    shipped = load_calibration().curve_prior(metric, schedule, regime)
    return prior_from_fits(fits, {"dataset": TASK, "metric": metric, "regime": regime, "decay": schedule.decay},
                           default=shipped, schedule=schedule)
