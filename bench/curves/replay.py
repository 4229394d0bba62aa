"""A development curve (``bench/curves/*.csv``) as the progress records a service job's runtime would have written
for it, so that the live loop's refit (``JobModels.refit``) can be driven by a real run in a test or a bench."""
from __future__ import annotations

import pandas as pd


def progress_records(d: pd.DataFrame, batch: int, metric: str | None = None, scale: float = 1.0) -> list[dict]:
    """One step record per logged row (its wall clock from 1000 s); with ``metric``, the run's accuracy reported
    inside each step under that name, times ``scale`` (100: in %)."""
    return [{"time": 1000 + r.wall_s, "step": int(r.step), "samples": batch * int(r.step), "loss": r.loss, "lr": r.lr,
             "samples_per_s": 100.0, "workers": 1, "batch_size": batch}
            | ({"metrics": {metric: scale * r.accuracy}} if metric else {})
            for r in d.itertuples()]
