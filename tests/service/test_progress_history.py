"""service/progress_history.py: the loop's in-memory columns of a job's progress, read from the store once."""
from pathlib import Path

import numpy as np
import pandas as pd

from dlsched.service import refit
from dlsched.service.job_models import JobModels
from dlsched.service.progress_history import ProgressHistory
from dlsched.service.store import Store
from dlsched.spec import JobSpec

CURVE = Path(__file__).resolve().parents[2] / "bench" / "curves" / "charlm-cosine.csv"


def records() -> list[dict]:
    d = pd.read_csv(CURVE)
    return [{"time": 1000 + r.wall_s, "step": int(r.step), "epoch": 0, "samples": 32 * r.step, "loss": r.loss,
             "samples_per_s": 100.0, "workers": 1 + (r.step > 300), "batch_size": 32, "lr": None}
            for r in d.itertuples()]


def test_the_columns_give_back_the_stored_records_and_grow_by_the_rows_stored_since(tmp_path):
    store = Store(tmp_path / "s.db")
    job = store.submit(JobSpec(name="lm", entry="examples/mlp.py:make_job", gpus=1, batch_size=32))
    other = store.submit(JobSpec(name="lm", entry="examples/mlp.py:make_job", gpus=1, batch_size=32))
    recs = records()
    models = JobModels(("slot",))
    store.add_progress(job, recs[:50], 50)
    store.add_progress(other, recs[:7], 7)
    first = models.progress(job, store)
    assert len(first) == 50 and first.tail(50) == store.progress(job)
    store.add_progress(job, recs[50:], len(recs))
    grown = models.progress(job, store)
    assert grown is first and len(grown) == len(recs) and grown.tail(len(recs)) == store.progress(job)
    assert grown.last_id == max(r["id"] for r in store.progress(job, after_id=0))
    assert isinstance(grown.tail(1)[0]["step"], int) and grown.tail(1)[0]["lr"] is None
    models.forget(job)
    assert len(models.progress(job, store)) == len(recs)   # read again whole after a forget
    store.close()


def test_a_record_without_samples_is_left_out_of_the_refit_as_before():
    recs = records()[:120]
    args = (2000.0, 2, 32, 32 * 800.0, recs[-1]["samples"])
    kw = {"schedule": "cosine", "gpu_types": ("slot",)}
    plain, _ = refit.predict(ProgressHistory.of(recs), *args, **kw)
    gap = dict(recs[60], samples=None, loss=99.0, step=10**6)   # a record the runtime wrote without a sample count
    holed, _ = refit.predict(ProgressHistory.of(recs[:60] + [gap] + recs[60:]), *args, **kw)
    assert plain.loss_fit["model"] == "annealing" and holed.loss_fit == plain.loss_fit
    assert holed.remaining_s == plain.remaining_s
    assert np.array_equal(ProgressHistory.of(recs).column("step"), np.array([r["step"] for r in recs], float))
