"""service/job_models.py: the live loop's per-job models; here, the prior a new job's curve starts from."""
import sys

import pytest

from dlsched.perf.calibration import load_calibration
from dlsched.perf.prior import FinishedFit, fit_record
from dlsched.service.job_models import JobModels, job_meta
from dlsched.service.store import Store
from dlsched.spec import JobSpec


def test_finished_jobs_of_other_tasks_that_agree_do_not_narrow_the_shape_prior_to_their_agreement(tmp_path):
    """Two finished jobs of other scripts that happen to agree on α (0.60, 0.62) say little about how α varies
    across tasks: the shipped development prior's spread counts beside theirs (``perf.prior``). Before, they set
    it alone, at the same-task floor (0.2, a quarter of the shipped one)."""
    store = Store(tmp_path / "s.db")
    for entry, alpha in (("examples/mlp.py:make_job", 0.60), ("examples/demo/convnet.py:make_job", 0.62)):
        done = store.submit(JobSpec(name="done", entry=entry, gpus=1, batch_size=64))
        store.add_finished_fit(done, fit_record(FinishedFit(alpha, 0.05, {"family": entry, "metric": "loss"})))
    job = store.get(store.submit(JobSpec(name="new", entry="examples/resnet20.py:make_job", gpus=1, batch_size=64)))
    shipped = load_calibration().curve_prior("loss", None, "scratch")
    prior = JobModels(("slot",), store).curve_prior(job)
    assert 0.6 <= prior.alpha <= 0.62
    assert prior.alpha_sigma > 0.5 * shipped.alpha_sigma
    store.close()


def test_command_jobs_of_one_script_share_a_family_whatever_their_arguments(tmp_path):
    """A command job names no entry and takes no params: its script is its family, so a finished run of the same
    script leads the new one's prior (before, every command job's family was None, shared with no one)."""
    store = Store(tmp_path / "s.db")
    for command, alpha in ((["python", "train.py", "--epochs", "3"], 2.0), (["python", "-m", "other.train"], 0.5)):
        done = store.submit(JobSpec(name="done", command=command, gpus=1))
        meta = job_meta(store.get(done))
        store.add_finished_fit(done, fit_record(FinishedFit(alpha, 0.05, meta)))
    assert meta["family"] == "other.train"
    job = store.get(store.submit(JobSpec(name="new", command=["python", "train.py", "--epochs", "9"], gpus=1)))
    assert job_meta(job)["family"] == "train.py"
    assert JobModels(("slot",), store).curve_prior(job).alpha > 1.3   # 1.0, the plain geometric mean, before
    store.close()


def test_a_command_job_states_its_schedule_target_and_task_in_its_specs_prediction(tmp_path):
    """A command job takes no params, where an entry job states its schedule, target loss and dataset: without
    ``prediction`` its service fit assumed the logged LR carries on flat (no drop at the milestones still to
    come) and it had no time to a target. Real curve: charlm-step (LR x0.1 at steps 400 and 600 of 800)."""
    import numpy as np
    import pandas as pd

    from dlsched.paths import REPO_ROOT

    d = pd.read_csv(REPO_ROOT / "bench" / "curves" / "charlm-step.csv")
    recs = [{"time": 1000 + r.wall_s, "step": int(r.step), "samples": 32 * r.step, "loss": r.loss, "lr": r.lr,
             "samples_per_s": 100.0, "workers": 1, "batch_size": 32} for r in d.itertuples()]
    seen = [r for r in recs if r["step"] <= 300]
    target = float(d.loss.iloc[-1]) * 1.02          # reached near the end, after the last milestone
    store = Store(tmp_path / "s.db")
    command = ["python", "train.py"]
    stated = JobSpec(name="lm", command=command, gpus=1, batch_size=32, total_samples=32 * 800,
                     prediction={"schedule": "step:400,600:0.1", "target_loss": target, "dataset": "stdlib",
                                 "depth": 2})
    bare = JobSpec(name="lm", command=command, gpus=1, batch_size=32, total_samples=32 * 800)
    job, plain = store.get(store.submit(stated)), store.get(store.submit(bare))
    assert job_meta(job) | {"family": None} == {"family": None, "dataset": "stdlib", "depth": 2, "batch": 32,
                                                  "metric": "loss", "regime": "scratch"}
    fit = JobModels(("slot",)).refit(job, seen, 2000.0).loss_fit
    flat = JobModels(("slot",)).refit(plain, seen, 2000.0).loss_fit
    truth = float(np.median(d.loss.iloc[-3:]))
    assert abs(fit["final"] / truth - 1) < 0.05 < abs(flat["final"] / truth - 1)
    reached = float(d.step[d.loss <= target].min())   # 420, just after the first milestone
    assert abs(fit["target_step"] / reached - 1) < 0.25 and flat["target_step"] is None, (fit, flat)
    store.close()


def test_the_runtimes_lr_plan_carries_a_command_jobs_schedule_past_its_last_step(tmp_path):
    """A command job that states no schedule: its fit used the logged LR, flat after the last step, so a one-cycle
    run a quarter through was predicted to end without its anneal. With the runtime's plan (``lr_plan.json``: the
    LR its schedulers will set, at the batch it trains at) the anneal is known. Real curve: charlm-onecycle."""
    import numpy as np
    import pandas as pd

    from dlsched.paths import REPO_ROOT

    d = pd.read_csv(REPO_ROOT / "bench" / "curves" / "charlm-onecycle.csv")
    recs = [{"time": 1000 + r.wall_s, "step": int(r.step), "samples": 32 * r.step, "loss": r.loss, "lr": r.lr,
             "samples_per_s": 100.0, "workers": 1, "batch_size": 32} for r in d.itertuples()]
    budget = int(d.step.iloc[-1])
    now = budget // 4
    seen = [r for r in recs if r["step"] <= now]
    ahead = d[d.step > now]
    plan = {"step": now, "batch_size": 32, "steps": ahead.step.tolist(), "lr": ahead.lr.tolist()}
    store = Store(tmp_path / "s.db")
    job = store.get(store.submit(JobSpec(name="lm", command=["python", "train.py"], gpus=1, batch_size=32,
                                         total_samples=32 * budget)))
    planned = JobModels(("slot",)).refit(job, seen, 2000.0, lr_plan=plan).loss_fit
    flat = JobModels(("slot",)).refit(job, seen, 2000.0).loss_fit
    other_batch = JobModels(("slot",)).refit(job, seen, 2000.0, lr_plan=dict(plan, batch_size=64)).loss_fit
    truth = float(np.median(d.loss.iloc[-3:]))
    # -4.3 % (the CLI's --schedule lr-column on the whole column says the same) against -13.6 %: flat at the peak
    assert abs(planned["final"] / truth - 1) < 0.05 < abs(flat["final"] / truth - 1), (planned["final"], flat["final"], truth)
    assert other_batch["final"] == flat["final"]      # a plan made at another batch is not this run's LR
    store.close()


def test_a_stated_accuracy_target_is_predicted_from_the_metric_the_script_reports(tmp_path):
    """``prediction.target``: the time to a value of a metric the script reports between steps (``job_metrics``
    events: an evaluation's accuracy), from the schedule-aware fit of those points over the loss fit's schedule and
    budget. Real curve: digits-step (LR x0.1 at steps 400 and 600 of 800), evaluated every 10 steps, seen to 300."""
    import pandas as pd

    from dlsched.paths import REPO_ROOT

    d = pd.read_csv(REPO_ROOT / "bench" / "curves" / "digits-step.csv")
    recs = [{"time": 1000 + r.wall_s, "step": int(r.step), "samples": 32 * r.step, "loss": r.loss, "lr": r.lr,
             "samples_per_s": 100.0, "workers": 1, "batch_size": 32} for r in d.itertuples() if r.step <= 300]
    evals = [{"step": int(r.step), "epoch": 0, "metrics": {"val_accuracy": r.accuracy}}
             for r in d.itertuples() if r.step <= 300]
    store = Store(tmp_path / "s.db")

    def fit(value: float, schedule: str | None = "step:400,600:0.1") -> dict:
        facts = {"target": {"metric": "val_accuracy", "value": value, "kind": "accuracy"}}
        jid = store.submit(JobSpec(name="mlp", command=["python", "train.py"], gpus=1, batch_size=32,
                                   total_samples=32 * 800, prediction=facts | ({"schedule": schedule} if schedule else {})))
        store.add_progress(jid, recs, 1, samples=recs[-1]["samples"])     # 300 of its 800 steps trained
        for e in evals:
            store.event("job_metrics", jid, **e)
        return JobModels(("slot",)).refit(store.get(jid), recs, 2000.0, metric_values=store.metric_values(
            jid, "val_accuracy", "job_metrics").values).loss_fit["metric_target"]

    truth = float(d.accuracy.iloc[-3:].mean())                 # 0.981
    smooth = d.accuracy.rolling(3, center=True, min_periods=1).median()
    reached = float(d.step[smooth >= 0.97].min())              # 310
    got = fit(0.97)
    assert (got["metric"], got["kind"], got["target"], got["points"]) == ("val_accuracy", "accuracy", 0.97, 30)
    assert abs(got["final"] / truth - 1) < 0.005 and got["final_80"][0] <= truth <= got["final_80"][1], got
    assert abs(got["target_step"] / reached - 1) < 0.25 and got["target_chance"] > 0.5, got
    never = fit(0.999)                   # above the 80 % band's top: at best at the budget, and unlikely
    assert never["target_step"] in (None, 800.0) and never["target_chance"] < 0.1, never
    evals = evals[:1]                    # its first evaluation only: the finished runs' shapes through it
    first = fit(0.97)
    assert first["points"] == 1 and first["bands"] == "one_point", first
    assert first["final_80"][0] < first["final"] < first["final_80"][1] and 0 < first["target_chance"] < 1, first
    assert evals[0]["metrics"]["val_accuracy"] < first["final"] and first["target_step"] > 10, first
    # without the job's metric events (none reported yet) there is nothing to predict the target from
    job = store.get(store.submit(JobSpec(name="mlp", command=["python", "train.py"], gpus=1, batch_size=32,
                                         total_samples=32 * 800, prediction={"target": {
                                             "metric": "val_accuracy", "value": 0.97, "kind": "accuracy"}})))
    assert "metric_target" not in JobModels(("slot",)).refit(job, recs, 2000.0).loss_fit
    store.close()


def test_a_metric_target_of_a_job_whose_batch_doubled_is_fitted_over_its_samples_and_told_in_its_steps(tmp_path):
    """After a batch change the loss fit's x is the samples over the first batch (``service.progress_axis``): the
    metric's evaluations, logged at steps, are placed there by the samples trained at each, and the target's step
    goes back to the job's steps. Real curve: digits-step's evaluations, the batch doubled at step 150 (a step after
    it trains 64 samples), seen to 300 reference steps: the same prediction as at one batch, told in the job's steps."""
    import pandas as pd

    from dlsched.paths import REPO_ROOT

    d = pd.read_csv(REPO_ROOT / "bench" / "curves" / "digits-step.csv")
    seen = d[d.step <= 300]

    def job_step(ref: float) -> float:     # the job's step at a reference (batch-32) step
        return ref if ref <= 150 else 150 + (ref - 150) / 2

    def fit(doubled: bool) -> dict:
        step = job_step if doubled else (lambda ref: ref)
        recs = [{"time": 1000 + r.wall_s, "step": step(r.step), "samples": 32 * r.step, "loss": r.loss, "lr": r.lr,
                 "lr_factor": 1.0, "samples_per_s": 100.0, "workers": 1,
                 "batch_size": 64 if doubled and r.step > 150 else 32} for r in seen.itertuples()]
        evals = [(step(r.step), r.accuracy) for r in seen.itertuples()]
        store = Store(tmp_path / f"{doubled}.db")
        jid = store.submit(JobSpec(name="mlp", command=["python", "train.py"], gpus=1, batch_size=32,
                                   total_samples=32 * 800, prediction={
                                       "schedule": "step:400,600:0.1",
                                       "target": {"metric": "val_accuracy", "value": 0.97, "kind": "accuracy"}}))
        store.add_progress(jid, recs, 1, samples=recs[-1]["samples"])
        got = JobModels(("slot",)).refit(store.get(jid), recs, 2000.0, metric_values=evals).loss_fit["metric_target"]
        store.close()
        return got

    one, doubled = fit(False), fit(True)
    assert doubled["points"] == one["points"] == 30
    assert doubled["final"] == pytest.approx(one["final"], rel=1e-6)
    assert doubled["target_step"] == pytest.approx(job_step(one["target_step"]), rel=1e-6), (one, doubled)
    assert doubled["target_step_80"] == pytest.approx([job_step(x) for x in one["target_step_80"]], rel=1e-6)
    # the drawn curve too, to the budget: in the job's steps (batch 64 after step 150 -> 150 + 650 / 2 = 475)
    assert [p[1] for p in doubled["curve"]] == pytest.approx([p[1] for p in one["curve"]], rel=1e-6)
    assert [p[0] for p in doubled["curve"]] == pytest.approx([job_step(p[0]) for p in one["curve"]], rel=1e-6)
    assert one["curve"][-1][0] == 800.0 and doubled["curve"][-1][0] == pytest.approx(475.0)


def token_accuracy_job(models: JobModels, store: Store, name: str, until: int | None = None,
                       scale: float = 1.0) -> dict:
    """A tinylm run (``bench/curves``) as a service job stating a token-accuracy target, reported times ``scale``
    (100: in %), refitted by ``models`` on its progress to step ``until`` (None: all of it, then finished)."""
    import pandas as pd

    from dlsched.paths import REPO_ROOT

    index = pd.read_csv(REPO_ROOT / "bench" / "curves" / "index.csv").set_index("file")
    d = pd.read_csv(REPO_ROOT / "bench" / "curves" / f"{name}.csv")
    d = d[d.step <= until] if until else d
    spec = JobSpec(name=name, command=["python", "tinylm.py"], gpus=1, batch_size=16, total_samples=16 * 600,
                   prediction={"schedule": index.loc[f"{name}.csv", "schedule"], "dataset": "tinyshakespeare",
                               "target": {"metric": "token_accuracy", "value": 0.5, "kind": "accuracy"}})
    jid = store.submit(spec)
    sys.path.insert(0, str(REPO_ROOT / "bench" / "curves"))
    from replay import progress_records

    recs = progress_records(d, 16, "token_accuracy", scale)
    store.add_progress(jid, recs, 1, samples=recs[-1]["samples"])
    got = models.refit(store.get(jid), recs, 2000.0, metric_values=models.metric_values(
        jid, "token_accuracy", store)).loss_fit["metric_target"]
    if until is None:
        models.forget(jid, finished=True)
    return got


def test_a_targets_prior_is_learnt_from_the_finished_jobs_that_stated_one(tmp_path):
    """A finished job leaves its stated target's fit beside its loss fit (``finished_target_fits``); a new job's
    target of that kind is predicted with a prior from them (``JobModels.curve_prior``), kept across a restart. Real
    curves: tinylm's next-token accuracy under a cosine and a step schedule finished; the one-cycle run, seen to 25 %,
    is predicted from them within 5 %, closer than from the shipped prior (which holds the development runs'
    accuracies, tinylm's among them; 20 % or more off before, from the Pollux vision runs' error drops)."""
    import pandas as pd

    from dlsched.paths import REPO_ROOT

    store = Store(tmp_path / "s.db")
    cluster = JobModels(("slot",), store)
    for name in ("tinylm-cosine", "tinylm-step"):
        token_accuracy_job(cluster, store, name)
    kept = [f for f in store.finished_fits() if f["meta"].get("kind") == "accuracy"]
    assert [f["meta"]["metric"] for f in kept] == ["token_accuracy"] * 2 and len(store.finished_fits()) == 4
    truth = float(pd.read_csv(REPO_ROOT / "bench" / "curves" / "tinylm-onecycle.csv").accuracy.iloc[-3:].mean())
    learnt = token_accuracy_job(JobModels(("slot",), store), store, "tinylm-onecycle", until=150)   # after a restart
    shipped = token_accuracy_job(JobModels(("slot",)), store, "tinylm-onecycle", until=150)   # the shipped prior
    assert abs(learnt["final"] / truth - 1) < min(0.05, abs(shipped["final"] / truth - 1)), (learnt, shipped, truth)
    assert learnt["final_80"][0] <= truth <= learnt["final_80"][1]
    store.close()


def test_finished_jobs_reporting_accuracy_in_percent_and_as_a_fraction_are_one_level(tmp_path):
    """One finished job reports its token accuracy in %, the other as a fraction: their finals are kept in fractions,
    so a new job's level is theirs whichever way it reports (in their own units the two were averaged 100x apart).
    A store whose % final was kept before (migration 11) reads it in fractions too."""
    def predicted(scales: tuple[float, float], scale: float, folder: str) -> dict:
        store = Store(tmp_path / folder / "s.db")
        cluster = JobModels(("slot",), store)
        for name, s in zip(("tinylm-cosine", "tinylm-step"), scales):
            token_accuracy_job(cluster, store, name, scale=s)
        got = token_accuracy_job(JobModels(("slot",), store), store, "tinylm-onecycle", until=150, scale=scale)
        store.close()
        return got

    (tmp_path / "a").mkdir(), (tmp_path / "b").mkdir(), (tmp_path / "c").mkdir()
    fraction = predicted((1.0, 1.0), 1.0, "a")
    mixed = predicted((100.0, 1.0), 1.0, "b")
    in_percent = predicted((100.0, 1.0), 100.0, "c")
    assert mixed["final"] == pytest.approx(fraction["final"], rel=1e-6)
    assert in_percent["final"] == pytest.approx(100 * fraction["final"], rel=1e-6)
    assert [v / 100 for v in in_percent["final_80"]] == pytest.approx(fraction["final_80"], rel=1e-6)
    assert in_percent["curve"][-1][1] == pytest.approx(100 * fraction["curve"][-1][1], rel=1e-6)


def test_the_view_says_when_a_start_was_decided_and_when_its_first_step_came(tmp_path):
    """What ``policy.restart_hold`` reads: the decision's time from the round that started or resized the job, its
    first step at that size from the job's own records (a leftover line of the group before, or a step tagged for
    an older request, is not it); nothing once another generation runs (a resize given up: ``return_to_held``)."""
    from dataclasses import replace

    from dlsched.service.store import RUNNING

    store = Store(tmp_path / "s.db")
    queued = store.get(store.submit(JobSpec(name="a", entry="x.py:make_job", gpus=2, batch_size=32)))
    job = replace(queued, state=RUNNING, num_gpus=2, placement={"n0": 2}, generation=1)
    models = JobModels(("slot",), store)
    assert "changed_at" not in models.snapshot(job).attrs
    models.note_change(job.id, "start", 100.0, 1)
    assert {k: models.snapshot(job).attrs[k] for k in ("changed_at", "settled_at")} == {"changed_at": 100.0,
                                                                                         "settled_at": None}
    assert "changed_at" not in models.snapshot(queued).attrs                  # not running: nothing to hold
    assert models.change_delay(job, [{"time": 99.0, "step": 7, "workers": 2},                 # before the decision
                                     {"time": 101.0, "step": 8, "workers": 2, "control_generation": 0}],
                               102.0) is None   # measured a 0 s pause before
    assert models.snapshot(job).attrs["settled_at"] is None
    assert models.change_delay(job, [{"time": 103.5, "step": 9, "workers": 2}], 104.0) == ("start", 3.5)
    assert models.change_delay(job, [{"time": 105.0, "step": 10, "workers": 2}], 106.0) is None   # measured once
    assert models.snapshot(job).attrs["settled_at"] == 103.5
    assert "changed_at" not in models.snapshot(replace(job, generation=2)).attrs
    models.forget(job.id)
    assert "changed_at" not in models.snapshot(job).attrs
    store.close()
