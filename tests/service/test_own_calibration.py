"""service/own_calibration.py: the bands of a cluster's loss predictions, from how far its own finished jobs ended
from what the service predicted for them. Real curves (bench/curves), refitted as the live loop refits and stores
them (``JobModels.refit``, ``Store.add_prediction``)."""
import math
import sys

import numpy as np
import pandas as pd
import pytest

from dlsched.paths import REPO_ROOT
from dlsched.perf.calibration import OWN_ERRORS_MIN, load_calibration, quantile_band
from dlsched.service.job_models import JobModels
from dlsched.service.store import Store
from dlsched.spec import JobSpec

CURVES = REPO_ROOT / "bench" / "curves"
sys.path.insert(0, str(CURVES))
from replay import progress_records  # noqa: E402
INDEX = pd.read_csv(CURVES / "index.csv").set_index("file")
BATCH = 16


def run_job(models: JobModels, store: Store, name: str, until: float = 1.0, ended: bool = True,
            accuracy_scale: float | None = None, target_share: float | None = None) -> dict:
    """The run as a service job of its schedule and budget, refitted and its prediction stored at 10, 25, 50, 75 %
    and ``until`` of its budget; then ended (finished) when ``ended``. Its last stored loss fit. With
    ``accuracy_scale`` (1, or 100: in %) it states a target of its token accuracy, reported inside each step; with
    ``target_share`` a target loss that share of the way from its first loss to its last 3's median."""
    row = INDEX.loc[f"{name}.csv"]
    d = pd.read_csv(CURVES / f"{name}.csv")
    budget = int(row.budget)
    facts = {"schedule": row.schedule}
    if target_share is not None:
        first, last = float(d.loss.iloc[0]), float(np.median(d.loss.iloc[-3:]))
        facts["target_loss"] = first - target_share * (first - last)
    if accuracy_scale:
        facts["target"] = {"metric": "token_accuracy", "value": 0.5, "kind": "accuracy"}
    jid = store.submit(JobSpec(name=name, command=["python", "train.py"], gpus=1, batch_size=BATCH,
                               total_samples=BATCH * budget, prediction=facts))
    recs = progress_records(d, BATCH, "token_accuracy" if accuracy_scale else None, accuracy_scale or 1.0)
    fit = None
    for share in sorted({0.1, 0.25, 0.5, 0.75, until}):
        if share > until:
            break
        seen = [r for r in recs if r["step"] <= share * budget]
        store.add_progress(jid, [r for r in seen if r["step"] > store.get(jid).samples / BATCH], 1,
                           samples=seen[-1]["samples"])
        values = models.metric_values(jid, "token_accuracy", store) if accuracy_scale else None
        pred = models.refit(store.get(jid), seen, 2000.0 + share, metric_values=values)
        store.add_prediction(jid, 2000.0 + share, pred.fraction_done, pred.total_samples, pred.remaining_s,
                             pred.predicted_finish, pred.loss_fit)
        fit = pred.loss_fit
    if ended:
        models.forget(jid, finished=True)
    return fit


def test_once_enough_jobs_ran_to_their_budget_the_loss_bands_are_their_own_errors(tmp_path):
    """Nine charlm runs finish: each leaves log(true / predicted final) of the predictions made at 10, 25, 50 and
    75 % (true: its last 3 losses' median); the tenth job's band at 25 % is their conformal band, also after a
    restart. A job that stopped short of its budget, or one still running, adds no error."""
    store = Store(tmp_path / "s.db")
    models = JobModels(("slot",), store)
    names = [f.removesuffix(".csv") for f in INDEX.index if f.startswith("charlm-")][:OWN_ERRORS_MIN]
    assert len(names) == OWN_ERRORS_MIN
    shipped = load_calibration()
    for name in names[:-1]:
        run_job(models, store, name)
    assert models.bands.of("loss") == shipped   # 8 errors per fraction: the development set's bands still
    run_job(models, store, "tinylm-step", until=0.5)      # stopped at half its budget: no error
    run_job(models, store, "tinylm-cosine", ended=False)  # still running
    assert models.bands.of("loss") == shipped
    last = run_job(models, store, names[-1])

    records = [d for d in store.finished_fits() if d.get("final_errors")]
    # no dataset declared: no same-task level, every band the fit alone's
    assert len(records) == OWN_ERRORS_MIN and all([(f, t) for f, t, _ in d["final_errors"]] == [
        (0.1, "fit"), (0.25, "fit"), (0.5, "fit"), (0.75, "fit")] for d in records)
    d = pd.read_csv(CURVES / f"{names[-1]}.csv")
    truth = float(np.median(d.loss.iloc[-3:]))
    at_75 = [p for p in store.predictions(store.jobs()[-1].id) if p["fraction_done"] <= 0.75][-1]["loss_fit"]["final"]
    assert records[-1]["final_errors"][3][2] == pytest.approx(math.log(truth / at_75))
    assert last["final"] > 0 and last["bands"] == "fit"

    errors = [d["final_errors"][1][2] for d in records]
    own = quantile_band(errors)
    for cal in (models.bands.of("loss"), JobModels(("slot",), store).bands.of("loss")):   # read back after a restart
        assert cal.final_band(0.25) == pytest.approx(own) and cal.final_band(0.25) != shipped.final_band(0.25)
        assert cal.final_centre(0.25) == pytest.approx(float(np.clip(np.median(errors), *own)))
        assert cal.steps_band(0.25) == shipped.steps_band(0.25)
        assert cal.levelled == shipped.levelled and cal.carried == shipped.carried   # no level: none of theirs

    fit = run_job(JobModels(("slot",), store), store, "tinylm-linear", until=0.25, ended=False)
    lo, hi = fit["final_80"]
    assert (math.log(lo / fit["final"]), math.log(hi / fit["final"])) == pytest.approx(own, abs=1e-9)
    store.close()


def test_once_enough_jobs_reached_their_stated_target_its_steps_band_is_their_own(tmp_path):
    """Nine charlm runs each state a target loss 90 % of the way from their first loss to their last and finish:
    each leaves log(true / the law's predicted steps) of the predictions that saw the crossing ahead at 10, 25, 50
    and 75 % (true: where its binned losses' 3-point median got there). Where nine have one, a stated target's
    steps band and median shift are theirs, also after a restart; elsewhere, and for --target-fraction's band, the
    development set's stay."""
    store = Store(tmp_path / "s.db")
    models = JobModels(("slot",), store)
    names = [f.removesuffix(".csv") for f in INDEX.index if f.startswith("charlm-")][:OWN_ERRORS_MIN]
    for name in names:
        run_job(models, store, name, target_share=0.9)
    shipped = load_calibration()
    errors: dict[float, list[float]] = {}
    for d in store.finished_fits():
        for f, table, e in d.get("steps_errors", []):
            assert table == "fit"   # no dataset declared: no level
            errors.setdefault(f, []).append(e)
    assert sorted(f for f, e in errors.items() if len(e) >= OWN_ERRORS_MIN) == [0.25, 0.5], \
        {f: len(e) for f, e in errors.items()}
    # one of them by hand: the 25 % prediction of the last run against where its log got to the target
    job = store.jobs()[-1]
    d = pd.read_csv(CURVES / f"{names[-1]}.csv")
    made = [p["loss_fit"] for p in store.predictions(job.id) if p["fraction_done"] <= 0.25][-1]
    goal = job.spec.prediction.target_loss
    from dlsched.perf.first_passage import logged_crossing
    from dlsched.service.refit import binned_curve
    true = logged_crossing(*binned_curve(d.step.to_numpy(float), d.loss.to_numpy(float)), goal)
    mine = next(e for f, _, e in store.finished_fits()[-1]["steps_errors"] if f == 0.25)   # the last job's record
    seen = made["observed_until"]
    assert mine == pytest.approx(math.log((true - seen) / (made["target_step_law"] - seen)))
    for cal in (models.bands.of("loss"), JobModels(("slot",), store).bands.of("loss")):   # and after a restart
        for f in (0.25, 0.5):
            assert cal.steps_band(f, stated=True) == pytest.approx(quantile_band(errors[f]))
            assert cal.steps_shift(f, stated=True) == pytest.approx(float(np.median(errors[f])))
        assert cal.steps_band(0.1, stated=True) == shipped.steps_band(0.1, stated=True)
        assert cal.steps_band(0.25) == shipped.steps_band(0.25)   # --target-fraction's
    store.close()


def test_a_stated_accuracy_targets_bands_are_the_finished_jobs_own_in_percent_or_as_a_fraction(tmp_path):
    """The same for a stated target's metric: nine tinylm runs state a token-accuracy target and finish, some
    reporting it in %; their errors (in the fit's space: the error as a fraction) are those of the same runs all
    reported as fractions, and the tenth job's band is theirs. The loss bands of those jobs are the loss's own."""
    names = [f.removesuffix(".csv") for f in INDEX.index if f.startswith("tinylm-")]
    assert len(names) > OWN_ERRORS_MIN

    def finish(folder: str, scales) -> tuple[JobModels, Store, list[dict]]:
        store = Store(tmp_path / folder / "s.db")
        models = JobModels(("slot",), store)
        for name, scale in zip(names[:OWN_ERRORS_MIN], scales):
            run_job(models, store, name, accuracy_scale=scale)
        return models, store, [d for d in store.finished_fits() if d["meta"].get("kind") == "accuracy"]

    (tmp_path / "a").mkdir(), (tmp_path / "b").mkdir()
    _, plain, fractions = finish("a", [1.0] * OWN_ERRORS_MIN)
    models, store, mixed = finish("b", [100.0, 1.0, 100.0] * 3)
    assert [[f for f, *_ in d["final_errors"]] for d in mixed] == [[0.1, 0.25, 0.5, 0.75]] * OWN_ERRORS_MIN
    for a, b in zip(fractions, mixed):   # to the fit's own tolerance
        assert [e for *_, e in a["final_errors"]] == pytest.approx([e for *_, e in b["final_errors"]], abs=1e-4)
    errors = [d["final_errors"][1][2] for d in mixed]
    own, shipped = quantile_band(errors), load_calibration()
    assert models.bands.of("error").final_band(0.25) == pytest.approx(own) != shipped.final_band(0.25)
    assert models.bands.of("loss").final_band(0.25) == pytest.approx(
        quantile_band([d["final_errors"][1][2] for d in store.finished_fits() if d["meta"].get("metric") == "loss"
                       and "kind" not in d["meta"]]))
    job = run_job(models, store, names[-1], until=0.25, ended=False, accuracy_scale=100.0)["metric_target"]
    error, least = 1 - job["final"] / 100, 1 - job["final_80"][1] / 100
    assert math.log(least / error) == pytest.approx(own[0], abs=1e-9)
    plain.close()
    store.close()
