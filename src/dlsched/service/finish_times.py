"""When does a job start and finish: the one answer the API and the dashboard show, read from stored rows (the
loop's latest prediction and the current policy forecast); nothing is computed on the read path."""
from __future__ import annotations

from dlsched.service.store import RESCALING, RUNNING, JobRecord


def expected_times(prediction: dict | None, forecast: dict | None, running: bool) -> tuple[float | None, float | None]:
    """(start, finish) from a job's latest prediction row and its row of the current forecast.

    The policy forecast (``service/forecast.py``) when one covers the job: it knows the policy may rescale,
    preempt or delay it. Otherwise, for a running job, the finish at its current allocation; a waiting job's
    start and finish are then unknown."""
    at_allocation = (prediction or {}).get("predicted_finish") if running else None
    if forecast:
        finish = forecast.get("finish")
        return forecast.get("start"), at_allocation if finish is None else finish
    return None, at_allocation


def shown_times(job: JobRecord, prediction: dict | None, forecast: dict | None) -> tuple[float | None, float | None]:
    """(start, finish) to show: a running job's start is when it started."""
    running = job.state in (RUNNING, RESCALING)
    start, finish = expected_times(prediction, forecast, running)
    return (job.start_time if running else start), finish
