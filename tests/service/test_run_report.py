"""The run report's prediction at 25 %: a real store, hand-written rows."""
import math

import pytest

from dlsched.service.run_report import prediction_table
from dlsched.service.store import FINISHED, RUNNING, Store
from dlsched.spec import load_job_spec


def _finished_job(store: Store, preds: list[tuple[float, float]]) -> None:
    """Submitted at 0, ran on 2 GPUs from 1 to 11; refits at (time, fraction done) predicting a finish at 12."""
    job = store.submit(load_job_spec("name: j\nentry: m:make_job\ngpus: 2"), now=0.0)
    store.transition(job, RUNNING, now=1.0)
    store.record_allocation(job, 1.0, 2, 32, {"n0": 2})
    for t, frac in preds:
        store.add_prediction(job, t, frac, 1000.0, 12.0 - t, 12.0, None)
    store.record_allocation(job, 11.0, 0, None, {})
    store.transition(job, FINISHED, now=11.0)


def test_the_prediction_is_the_first_refit_past_a_quarter(tmp_path):
    store = Store(tmp_path / "s.db")
    _finished_job(store, [(2.0, 0.1), (4.0, 0.3), (6.0, 0.5), (11.0, 1.0)])
    row = prediction_table(store).iloc[0]
    assert (row["predicted_at"], row["fraction_at_prediction"]) == (4.0, 0.3)
    assert row["jct_error"] == pytest.approx(1 / 11)                # predicted 12, ended 11, JCT 11
    assert row["run_remaining_error"] == pytest.approx((8 - 7) / 7)  # 8 s predicted, GPUs held 7 s after it


def test_a_refit_stored_as_the_job_ended_is_not_its_prediction(tmp_path):
    """A job that trained from 10 % to the end between two refits (a stalled round on a busy machine) has no
    prediction past a quarter: the refit at its end (done 1.0, remaining 0) scored a perfect jct_error, and its
    run_remaining_error was 0/0."""
    store = Store(tmp_path / "s.db")
    _finished_job(store, [(2.0, 0.1), (11.0, 1.0)])
    row = prediction_table(store).iloc[0]
    assert row["predicted_at"] is None or math.isnan(row["predicted_at"])
    assert "jct_error" not in row or math.isnan(row["jct_error"])
