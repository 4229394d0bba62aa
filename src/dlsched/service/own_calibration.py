"""The final-value bands of a cluster's own predictions: how far each job that ran to its budget ended from the
final loss the service predicted for it at each calibrated fraction (``perf.calibration``), kept beside its
finished fit (``Store.add_finished_fit``, the record's ``final_errors``). Once ``OWN_ERRORS_MIN`` jobs have an
error at a fraction, the bands there are theirs (``Calibration.with_own_errors``): a cluster whose workloads the
development set's curves do not resemble gets bands as wide as its own misses, and one they do, bands as narrow.
Only the loss's: a stated target's metric keeps the development set's bands.
"""
from __future__ import annotations

import math
from typing import Iterable

from dlsched.service.store import JobRecord, Store, predicted_final_by

RAN_TO_BUDGET = 0.99   # a job that stopped well before its total (the script's own early stop) ended elsewhere


def final_errors(store: Store, job: JobRecord | None, ended_at: float, fractions: Iterable[float]) -> dict[str, float]:
    """{fraction: log(ended_at / predicted final)} of the newest prediction made at each fraction of the job's
    samples, and past half of it (a job first predicted at 30 % says nothing of 10 %); {} for a job that did not
    run to its budget. Keys are strings: the record is JSON."""
    if (job is None or not job.total_samples or job.samples < RAN_TO_BUDGET * job.total_samples
            or not (math.isfinite(ended_at) and ended_at > 0)):
        return {}
    out = {}
    for f in fractions:
        predicted = predicted_final_by(store, job.id, f / 2, f)
        if predicted is not None and predicted > 0:
            out[repr(float(f))] = math.log(ended_at / predicted)
    return out


def own_errors(records: Iterable[dict]) -> dict[float, list[float]]:
    """{fraction: [log error, ...]} of the finished fits' records (``final_errors``), as ``with_own_errors`` reads."""
    out: dict[float, list[float]] = {}
    for d in records:
        for f, e in (d.get("final_errors") or {}).items():
            out.setdefault(float(f), []).append(float(e))
    return out
