"""Online refit: speed models from progress records, loss curve, completion prediction."""
import math
import numpy as np
import pytest

from dlsched.perf.speed import AllReduceSpeedModel
from dlsched.service.refit import LinearSpeed, fit_speed, observed_rate, predict


def records(workers, batch, step_time, n=20, t0=0.0, s0=0, loss0=2.0, k0=0):
    out, t, s = [], t0, s0
    for i in range(n):
        t += step_time
        s += batch
        k = k0 + i + 1
        out.append({"time": t, "step": k, "samples": s, "loss": 1.0 / (0.01 * k + 1 / loss0) + 0.1,
                    "samples_per_s": batch / step_time, "workers": workers, "batch_size": batch})
    return out


def true_step(w, b):
    return 0.001 * b / w + 0.01       # compute split over workers + fixed overhead


def test_speed_model_learns_scaling_from_measurements():
    recs = []
    for w in (1, 2, 4):
        recs += records(w, 64, true_step(w, 64))
    arr = lambda key: np.array([r[key] for r in recs], float)
    model = fit_speed(arr("workers"), arr("batch_size"), arr("samples_per_s"), ("slot",))
    for w in (1, 2, 3, 4):
        assert model.throughput(w, 1, 64, "slot") == pytest.approx(64 / true_step(w, 64), rel=0.05)


def test_perf_packages_all_reduce_model_is_used_when_identifiable():
    recs = []
    for b in (16, 32, 64, 128):
        recs += records(1, b, true_step(1, b) * 1.3)     # compute hinge: steeper than the linear model's split
    for w in (2, 4):
        recs += records(w, 64, true_step(w, 64) * 1.3 + 0.004 * w)
    arr = lambda key: np.array([r[key] for r in recs], float)
    model = fit_speed(arr("workers"), arr("batch_size"), arr("samples_per_s"), ("slot", "v100"))
    assert isinstance(model, AllReduceSpeedModel) and model.throughput(2, 1, 64, "v100") > 0


def test_without_a_single_worker_sample_the_linear_fallback_is_used():
    recs = records(2, 64, 0.05) + records(4, 64, 0.03)
    arr = lambda key: np.array([r[key] for r in recs], float)
    model = fit_speed(arr("workers"), arr("batch_size"), arr("samples_per_s"), ("slot",))
    assert isinstance(model, LinearSpeed)
    assert model.throughput(2, 1, 64) == pytest.approx(64 / 0.05, rel=0.02)
    assert model.throughput(4, 1, 64) == pytest.approx(64 / 0.03, rel=0.02)


def test_completion_prediction_uses_the_wall_clock_rate():
    recs = records(1, 32, 0.1, n=30)            # 320 samples/s
    pred, speed = predict(recs, now=3.0, current_workers=1, current_batch=32, total_hint=9600, samples_done=960)
    assert pred.fraction_done == pytest.approx(0.1)
    assert pred.remaining_s == pytest.approx(8640 / 320, rel=0.01)
    assert pred.predicted_finish == pytest.approx(3.0 + pred.remaining_s)
    assert pred.loss_fit["rmse"] < 0.05 and speed is not None
    assert observed_rate(recs) == pytest.approx(320, rel=0.01)


def test_the_rate_ignores_a_restart_stall_at_the_same_configuration():
    """Preempted at step 30, restarted 25 s later with the same workers and batch (demo run, loaded machine):
    the stall is not the rate the job runs at now."""
    before = records(2, 64, 0.03, n=30)
    after = records(2, 64, 0.03, n=10, t0=before[-1]["time"] + 25.0, s0=before[-1]["samples"], k0=30)
    assert observed_rate(before + after) == pytest.approx(64 / 0.03, rel=0.01)
    slow = records(1, 32, 3.0, n=5)             # 3 s steps are not restarts
    assert observed_rate(slow) == pytest.approx(32 / 3.0, rel=0.01)


def test_target_loss_jobs_get_their_total_work_from_the_loss_curve():
    recs = records(1, 32, 0.1, n=40)
    pred, _ = predict(recs, now=4.0, current_workers=1, current_batch=32, total_hint=None,
                      samples_done=recs[-1]["samples"], target_loss=0.8)
    assert pred.total_samples is not None and pred.total_samples > recs[-1]["samples"]
    pred_none, _ = predict(recs, now=4.0, current_workers=1, current_batch=32, total_hint=None,
                           samples_done=recs[-1]["samples"])
    assert pred_none.total_samples is None and pred_none.remaining_s is None


def test_refit_predicts_the_loss_to_the_budget_with_the_job_schedule():
    """A real run (``bench/curves``) reported as progress: the stored fit carries the schedule-aware curve to
    the budget, starting at the measured loss (the demo plot draws it), and a target-loss job gets its
    total work from that curve."""
    from pathlib import Path

    import pandas as pd

    from dlsched.service.refit import binned_curve, fit_loss

    d = pd.read_csv(Path(__file__).resolve().parents[2] / "bench" / "curves" / "charlm-cosine.csv")
    recs = [{"time": 1000 + r.wall_s, "step": int(r.step), "samples": 32 * r.step, "loss": r.train_loss,
             "samples_per_s": 100.0, "workers": 1, "batch_size": 32} for r in d.itertuples() if r.step <= 400]
    pred, _ = predict(recs, 2000.0, 1, 32, 32 * 800, 32 * 400, schedule="cosine:warmup=40")
    fit = pred.loss_fit
    assert fit["model"] == "annealing" and fit["curve"][-1][0] == 800
    assert fit["lr"] == "cosine:warmup=40 (declared)"   # what the prediction assumed, for the dashboard to say
    x0, y0 = fit["curve"][0]   # the curve starts where the fit does (after a slow start), at the loss measured there
    assert abs(y0 / np.interp(x0, d.step, d.train_loss) - 1) < 0.3
    assert fit["final"] < d.train_loss[d.step <= 400].iloc[-3:].mean()
    # the drawn curve's own RMSE on the points it covers: closer than their mean (a flat line) is
    covered = d.train_loss[(d.step >= x0) & (d.step <= 400)]
    assert 0 < fit["curve_rmse"] < 0.5 * covered.std()
    pred, _ = predict(recs[:20], 2000.0, 1, 32, None, 32 * 200, target_loss=1.9)
    assert pred.loss_fit["target_step"] is not None and pred.total_samples >= 32 * 200
    # a resumed job repeats steps: the last record of each step counts, and the points are bounded
    k, l = binned_curve(np.array([1, 2, 3, 2, 3, 4.0]), np.array([5, 4, 3, 9, 8, 7.0]))
    assert k.tolist() == [1, 2, 3, 4] and l.tolist() == [5, 9, 8, 7]
    assert len(binned_curve(np.arange(1, 5001.0), np.ones(5000))[0]) <= 120
    assert fit_loss(np.arange(3.0), np.ones(3)) is None


def test_jobs_that_finished_here_give_new_jobs_their_curve_prior(tmp_path):
    """JobModels: a running job's annealing fit (α, c) is kept; once the job finishes it feeds the prior of
    the next jobs (``perf.prior``); a job that merely ended (failed, gone) does not."""
    from pathlib import Path

    import pandas as pd

    from dlsched.service.job_models import JobModels
    from dlsched.service.store import Store
    from dlsched.spec import JobSpec

    d = pd.read_csv(Path(__file__).resolve().parents[2] / "bench" / "curves" / "charlm-step.csv")
    recs = [{"time": 1000 + r.wall_s, "step": int(r.step), "samples": 32 * r.step, "loss": r.loss,
             "samples_per_s": 100.0, "workers": 1, "batch_size": 32} for r in d.itertuples()]
    store = Store(tmp_path / "s.db")
    spec = JobSpec(name="lm", entry="examples/mlp.py:make_job", gpus=1, batch_size=32, total_samples=32 * 800,
                   params={"schedule": "step:400,600:0.1"})
    a, b = store.submit(spec), store.submit(spec)
    models = JobModels(("slot",))
    pred = models.refit(store.get(a), recs[:70], 2000.0)
    assert pred.loss_fit["model"] == "annealing" and "alpha" in pred.loss_fit
    assert models.curve_prior(store.get(b)) is None
    models.forget(a, finished=False)
    assert models.curve_prior(store.get(b)) is None
    models.refit(store.get(a), recs[:71], 2100.0)
    models.forget(a, finished=True)
    prior = models.curve_prior(store.get(b))
    assert prior is not None and prior.alpha == pytest.approx(pred.loss_fit["alpha"], rel=0.5)
    assert prior.final is None   # no dataset named: finished runs say nothing about this one's level
    # two finished runs on a named dataset give the next one on it a level: where they ended
    named = JobSpec(name="lm", entry="examples/mlp.py:make_job", gpus=1, batch_size=32, total_samples=32 * 800,
                    params={"schedule": "step:400,600:0.1", "dataset": "stdlib"})
    for j in (store.submit(named), store.submit(named)):
        models.refit(store.get(j), recs, 3000.0)
        models.forget(j, finished=True)
    level = models.curve_prior(store.get(store.submit(named))).final
    assert level == pytest.approx(float(np.median(d.loss.to_numpy()[-3:])), rel=1e-6)
    store.close()


def test_the_logged_lr_is_the_schedule_unless_the_batch_moved_it():
    from dlsched.service.refit import logged_schedule

    recs = [{"step": s, "lr": 0.1 if s < 50 else 0.01, "batch_size": 32} for s in range(1, 80)]
    sched = logged_schedule(recs, 200)
    assert sched is not None and sched.lr(60) == 0.01 and sched.lr(150) == 0.01
    assert sched.spec == "reported to step 79, then held at its last value"   # a cut: no family follows it
    assert logged_schedule(recs, 79).spec == "reported"                        # its whole budget
    assert logged_schedule(recs[:40] + [dict(r, batch_size=64) for r in recs[40:]], 200) is None
    assert logged_schedule([dict(r, lr=None) for r in recs], 200) is None


def test_a_logged_decay_without_a_plan_goes_on_as_its_family():
    """A script whose LR no torch scheduler plans (no ``lr_plan``) logs a cosine decay up to step 100 of 200: the
    rest of its schedule is that cosine (perf.lr_continuation), where it was held at the LR of step 100."""
    import torch

    from dlsched.service.refit import logged_schedule

    opt = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=0.1)
    cosine = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=200)
    recs = []
    for step in range(1, 101):
        opt.step()
        cosine.step()
        recs.append({"step": step, "lr": cosine.get_last_lr()[0], "batch_size": 32})
    sched = logged_schedule(recs, 200)
    assert sched.spec.startswith("reported to step 100, then as cosine"), sched.spec
    for step in (150, 190):
        assert sched.lr(step) == pytest.approx(0.05 * (1 + np.cos(np.pi * step / 200)), abs=1e-3)


def test_a_snapshot_follows_the_measured_resize_pause(tmp_path):
    from dlsched.service.job_models import JobModels
    from dlsched.service.store import Store
    from dlsched.spec import JobSpec

    store = Store(tmp_path / "s.db")
    job = store.get(store.submit(JobSpec(name="mlp", entry="examples/mlp.py:make_job", gpus=1, batch_size=32,
                                         total_samples=3200)))
    models = JobModels(("slot",))
    first = models.snapshot(job)
    assert models.snapshot(job) is first                       # unchanged inputs: the cached view
    models.restart_s = first.attrs["restart_s"] + 7.0                   # the loop measured a slower resize
    assert models.snapshot(job).attrs["restart_s"] == first.attrs["restart_s"] + 7.0
    assert first.attrs["restarts"] == 0                          # queued, never started
    store.update(job.id, generation=3)                           # started, then resized twice
    assert models.snapshot(store.get(job.id)).attrs["restarts"] == 2   # the simulator's count: Pollux's budget
    store.close()


def test_a_slow_start_is_left_out_of_the_loss_fit():
    """A run that sits at its initial loss before it falls (a plateau, a warm-up) is not what the convex loss
    models describe: the fit starts where the fall has eased and then follows the measured loss; a run that
    falls fastest at once keeps its points."""
    from dlsched.service.refit import convex_onset, fit_loss

    k = np.arange(1, 401.0)
    rng = np.random.default_rng(0)
    tail = 0.2 + 1.0 / (0.05 * np.maximum(k - 60, 0) + 1.0)
    slow = np.where(k < 60, 1.3 - 0.001 * k, tail) * np.exp(rng.normal(0, 0.02, k.size))
    onset = convex_onset(k, slow)
    assert 60 <= k[onset] <= 120, k[onset]
    fit = fit_loss(k, slow, budget_steps=400)
    curve = np.array(fit["curve"])
    assert curve[0][0] >= 60
    on = k >= curve[0][0]
    assert np.max(np.abs(np.interp(k[on], *curve.T) / tail[on] - 1)) < 0.15
    fast = 0.2 + 1.0 / (0.05 * k + 1.0)
    assert k[convex_onset(k, fast)] <= 20


def test_the_service_predicts_what_the_cli_predicts_for_a_run_with_a_warm_up():
    """The refit cut a slow start from the whole curve, warm-up included, and handed the rest to the predictor,
    which windows again from the warm-up's end: on a real run with a warm-up the service's final loss was 61 %
    above the CLI's (``predict_curve`` on the same points)."""
    from pathlib import Path

    import pandas as pd

    from dlsched.perf.curve_predict import predict_curve
    from dlsched.perf.schedule import parse_schedule
    from dlsched.service.refit import binned_curve, fit_loss

    d = pd.read_csv(Path(__file__).resolve().parents[2] / "bench" / "curves" / "digits-linear.csv")
    d = d[d.step <= 200]
    sched = parse_schedule("linear:warmup=40", 800)
    fit = fit_loss(d.step.to_numpy(float), d.loss.to_numpy(float), budget_steps=800, schedule=sched, target_loss=0.2)
    p = predict_curve(*binned_curve(d.step.to_numpy(float), d.loss.to_numpy(float)), sched, target=0.2)
    assert fit["final"] == pytest.approx(p.final_value, rel=1e-9)
    assert fit["target_step"] == pytest.approx(p.target_step, rel=1e-9)
    assert fit["curve"][0][0] == pytest.approx(p.curve_x[0])


def test_the_level_prior_carries_finished_finals_to_the_new_jobs_schedule(tmp_path):
    """Two runs of a task finished under decayed schedules; a new run of it at a constant LR ends lower (more
    LR area: the real charlm runs end at 1.60 and 1.58, the constant one at 1.45). The service's level prior
    carries each finished run's final to the new run's schedule by that run's stored fit, so the new job's
    predicted final lies below the plain mean of the finals, toward the real one; a job that declares no
    schedule (and logs no LR) still gets the plain mean."""
    from pathlib import Path

    import pandas as pd

    from dlsched.perf.schedule import parse_schedule
    from dlsched.service.job_models import JobModels
    from dlsched.service.store import Store
    from dlsched.spec import JobSpec

    curves = Path(__file__).resolve().parents[2] / "bench" / "curves"

    def run(name: str) -> tuple[list[dict], float]:
        d = pd.read_csv(curves / f"charlm-{name}.csv")
        recs = [{"time": 1000 + r.wall_s, "step": int(r.step), "samples": 32 * r.step, "loss": r.loss,
                 "samples_per_s": 100.0, "workers": 1, "batch_size": 32} for r in d.itertuples()]
        return recs, float(np.median(d.loss.to_numpy()[-3:]))

    def spec(**params) -> JobSpec:
        return JobSpec(name="lm", entry="examples/mlp.py:make_job", gpus=1, batch_size=32, total_samples=32 * 800,
                       params={"dataset": "charlm", **params})

    store = Store(tmp_path / "s.db")
    models = JobModels(("slot",), store)
    finals = []
    for name, sched in (("cosine", "cosine:warmup=40"), ("step", "step:400,600:0.1")):
        recs, final = run(name)
        j = store.submit(spec(schedule=sched))
        store.update(j, samples=recs[-1]["samples"])
        assert models.refit(store.get(j), recs, 3000.0).fitted is not None
        models.forget(j, finished=True)
        finals.append(final)
    plain = math.exp(float(np.mean(np.log(finals))))
    recs, true_final = run("constant")
    seen = recs[: len(recs) // 4]

    new = store.submit(spec(schedule="constant"))
    store.update(new, samples=seen[-1]["samples"])
    job = store.get(new)
    carried = models.curve_prior(job, parse_schedule("constant", 800)).final
    assert carried < plain and abs(carried - true_final) < abs(plain - true_final)
    # the live refit hands the job's schedule to the prior: its final lies below the plain-mean prior's
    aware = models.refit(job, seen, 3000.0).loss_fit["final"]
    plain_pred, _ = predict(seen, 3000.0, 1, 32, 32 * 800, seen[-1]["samples"], schedule="constant",
                            prior=models.curve_prior(job))
    assert aware < plain_pred.loss_fit["final"]
    # the finished fits are in the store: a restarted service carries the finals just the same
    store.close()
    store = Store(tmp_path / "s.db")
    assert JobModels(("slot",), store).curve_prior(job, parse_schedule("constant", 800)).final == \
        pytest.approx(carried, rel=1e-9)

    bare = store.submit(spec())   # no schedule declared, no LR logged: the plain mean, as before
    store.update(bare, samples=seen[-1]["samples"])
    job = store.get(bare)
    assert models.curve_prior(job).final == pytest.approx(plain, rel=1e-9)
    unaware, _ = predict(seen, 3000.0, 1, 32, 32 * 800, seen[-1]["samples"], prior=models.curve_prior(job))
    assert models.refit(job, seen, 3000.0).loss_fit["final"] == pytest.approx(unaware.loss_fit["final"], rel=1e-12)
    store.close()


def test_a_job_is_predicted_from_its_first_loss_report_by_its_task_s_finished_runs(tmp_path):
    """A job showed no curve until its fourth loss step. Two charlm runs finished here (cosine, step); a new one at a
    constant LR is predicted from its first report by those runs carried to its schedule (``bands`` task_runs:
    7.5 % under where the real run ended, inside the band, which two runs make wide), from its second by the law through its points, with
    the Optimus terms from its fourth. A job that reports only its stated target's metric, no loss, is predicted
    too."""
    from pathlib import Path

    import pandas as pd

    from dlsched.service.job_models import JobModels
    from dlsched.service.store import Store
    from dlsched.spec import JobSpec, MetricTarget

    curves = Path(__file__).resolve().parents[2] / "bench" / "curves"

    def run(name: str) -> tuple[list[dict], pd.DataFrame]:
        d = pd.read_csv(curves / f"charlm-{name}.csv")
        return [{"time": 1000 + r.wall_s, "step": int(r.step), "samples": 32 * r.step, "loss": r.loss,
                 "samples_per_s": 100.0, "workers": 1, "batch_size": 32} for r in d.itertuples()], d

    def spec(**params) -> JobSpec:
        return JobSpec(name="lm", entry="examples/mlp.py:make_job", gpus=1, batch_size=32, total_samples=32 * 800,
                       params={"dataset": "charlm", **params})

    store = Store(tmp_path / "s.db")
    models = JobModels(("slot",), store)
    for name, sched in (("cosine", "cosine:warmup=40"), ("step", "step:400,600:0.1")):
        recs, _ = run(name)
        j = store.submit(spec(schedule=sched))
        store.update(j, samples=recs[-1]["samples"])
        models.refit(store.get(j), recs, 3000.0)
        models.forget(j, finished=True)
    recs, d = run("constant")
    truth = float(d.loss.iloc[-3:].mean())
    new = store.submit(spec(schedule="constant"))

    def refit(n: int) -> dict:
        store.update(new, samples=recs[n - 1]["samples"])
        return models.refit(store.get(new), recs[:n], 3000.0).loss_fit
    fits = {n: refit(n) for n in (1, 2, 4)}
    first = fits[1]
    assert (first["model"], first["bands"]) == ("prior", "task_runs") and "beta0" not in first
    assert abs(first["final"] / truth - 1) < 0.1 and first["final_80"][0] <= truth <= first["final_80"][1]
    assert first["curve"][-1][0] == 800
    assert fits[2]["model"] == "annealing" and "beta0" not in fits[2]
    assert "beta0" in fits[4] and fits[4]["curve"][-1][0] == 800
    # only the target's metric reported: no loss fit, the target still predicted
    bare = [{k: v for k, v in r.items() if k != "loss"} for r in recs[:40]]
    pred, _ = predict(bare, 3000.0, 1, 32, 32 * 800, bare[-1]["samples"], schedule="constant",
                      target=MetricTarget(metric="val_accuracy", value=0.5, kind="accuracy"),
                      metric_points=(d.step.to_numpy(float)[:40:10], d.accuracy.to_numpy(float)[:40:10]))
    assert set(pred.loss_fit) == {"metric_target"} and pred.loss_fit["metric_target"]["final"] > 0.4
    store.close()


def test_the_service_passes_a_job_s_regime_to_the_curve_predictor(tmp_path, monkeypatch):
    """A job's ``regime`` param reaches ``predict_curve`` (the shipped prior's pool, ``perf.prior``): scratch by
    default; the finished fits it leaves carry it; a bad value is refused at submit, one line naming it."""
    from pathlib import Path

    import pandas as pd

    from dlsched.service import refit
    from dlsched.service.job_models import JobModels, job_meta
    from dlsched.service.store import Store
    from dlsched.spec import JobSpec, SpecError, load_job_spec_file

    seen = []
    real = refit.predict_curve
    monkeypatch.setattr(refit, "predict_curve", lambda *a, **k: seen.append(k["regime"]) or real(*a, **k))
    d = pd.read_csv(Path(__file__).resolve().parents[2] / "bench" / "curves" / "charft-cosine.csv")
    recs = [{"time": 1000 + r.wall_s, "step": int(r.step), "samples": 32 * r.step, "loss": r.loss,
             "samples_per_s": 100.0, "workers": 1, "batch_size": 32} for r in d.itertuples() if r.step <= 200]
    store = Store(tmp_path / "s.db")
    spec = lambda **p: JobSpec(name="ft", entry="examples/mlp.py:make_job", gpus=1, batch_size=32,  # noqa: E731
                               total_samples=32 * 400, params={"schedule": "cosine:warmup=20", **p})
    ft, plain = store.submit(spec(regime="finetune")), store.submit(spec())
    models = JobModels(("slot",))
    assert models.refit(store.get(ft), recs, 2000.0).loss_fit["model"] == "annealing"
    models.refit(store.get(plain), recs, 2000.0)
    assert seen == ["finetune", "scratch"]
    assert job_meta(store.get(ft))["regime"] == "finetune" and job_meta(store.get(plain))["regime"] == "scratch"
    store.close()
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: ft\nentry: examples/mlp.py:make_job\ngpus: 1\nbatch_size: 32\nparams: {regime: pretrained}\n")
    with pytest.raises(SpecError) as e:
        load_job_spec_file(bad)
    assert "regime" in str(e.value) and "pretrained" in str(e.value) and "\n" not in str(e.value)


def test_a_target_loss_gets_the_step_and_the_time_the_run_reaches_it():
    """The time to a target (``dlsched show``, the dashboard's fit row): the schedule-aware fit's step, at the rate
    the job trains now; a target below where the budget ends is no step and no time. Real curve: charlm-step."""
    import pandas as pd

    from dlsched.paths import REPO_ROOT

    d = pd.read_csv(REPO_ROOT / "bench" / "curves" / "charlm-step.csv")
    recs = [{"time": 1000 + r.wall_s, "step": int(r.step), "samples": 32 * r.step, "loss": r.loss,
             "samples_per_s": 100.0, "workers": 1, "batch_size": 32} for r in d.itertuples() if r.step <= 300]
    target = float(d.loss.iloc[-1]) * 1.02
    pred, _ = predict(recs, 2000.0, 1, 32, 32 * 800, 32 * 300, target_loss=target, schedule="step:400,600:0.1")
    fit = pred.loss_fit
    assert fit["target_loss"] == target and 300 < fit["target_step"] < 800 and 0.5 < fit["target_chance"] <= 1
    assert fit["target_time"] == pytest.approx(2000.0 + (fit["target_step"] - 300) * 32 / pred.rate)
    # its 80 % band, as `predict curve`'s interval_80 of the steps from now, and the times of its ends
    early, late = fit["target_step_80"]
    assert 300 < early < fit["target_step"] < late <= 800
    assert fit["target_time_80"] == pytest.approx([2000.0 + (x - 300) * 32 / pred.rate for x in (early, late)])
    low, _ = predict(recs, 2000.0, 1, 32, 32 * 800, 32 * 300, target_loss=0.5, schedule="step:400,600:0.1")
    assert low.loss_fit["target_step"] is None and low.loss_fit["target_time"] is None
    assert low.loss_fit["target_step_80"] is None and low.loss_fit["target_time_80"] is None
    queued, _ = predict(recs, 2000.0, 0, 32, 32 * 800, 32 * 300, target_loss=target, schedule="step:400,600:0.1")
    assert queued.loss_fit["target_step"] == fit["target_step"] and queued.loss_fit["target_time"] is None
    assert queued.loss_fit["target_step_80"] == fit["target_step_80"] and queued.loss_fit["target_time_80"] is None
    # a target the run already got to: a fact, no band
    passed, _ = predict(recs, 2000.0, 1, 32, 32 * 800, 32 * 300, target_loss=float(d.loss.iloc[0]),
                        schedule="step:400,600:0.1")
    assert passed.loss_fit["target_step"] <= 300 and passed.loss_fit["target_step_80"] is None
    assert passed.loss_fit["target_reached"] and not fit["target_reached"] and not low.loss_fit["target_reached"]
    assert passed.loss_fit["target_time_80"] is None
    # and its time is when the log got there, not when this prediction was made (2000)
    assert passed.loss_fit["target_time"] == pytest.approx(
        np.interp(passed.loss_fit["target_step"], [r["step"] for r in recs], [r["time"] for r in recs]))
    assert passed.loss_fit["target_time"] < 1000 + float(d.wall_s[d.step <= 300].iloc[-1])
    # one past the predicted final value but not out of reach: at the budget (a bound), no band either
    bound, _ = predict(recs, 2000.0, 1, 32, 32 * 800, 32 * 300, target_loss=fit["final"] * 0.97,
                       schedule="step:400,600:0.1")
    assert bound.loss_fit["target_step"] == 800 and bound.loss_fit["target_step_80"] is None


def test_a_batch_change_keeps_the_prediction_of_the_samples_trained():
    """Real curve (charlm-cosine, batch 32, cosine): the same run reported as if its batch doubled at step 200 (each
    later step trains two of its steps' samples at twice the LR, the linear rule's factor 2, and the runtime's plan
    was made at the new batch). The prediction over samples is the fixed-batch run's, its curve and target in the
    job's own steps; over steps it bent at the change and the LR was flat (final 14 % low, target 20 % early)."""
    from pathlib import Path

    import pandas as pd

    d = pd.read_csv(Path(__file__).resolve().parents[2] / "bench" / "curves" / "charlm-cosine.csv")

    def rec(r, step, batch, factor):
        return {"time": 1000 + r.wall_s, "step": step, "samples": 32 * int(r.step), "loss": r.train_loss,
                "lr": r.lr * factor, "lr_factor": factor, "samples_per_s": 100.0, "workers": 1, "batch_size": batch}

    seen, ahead = d[d.step <= 400], d[d.step > 400]
    fixed = [rec(r, int(r.step), 32, 1.0) for r in seen.itertuples()]
    doubled = [rec(r, int(r.step), 32, 1.0) if r.step <= 200 else rec(r, 200 + (int(r.step) - 200) // 2, 64, 2.0)
               for r in seen.itertuples()]
    plan_fixed = {"step": 400, "batch_size": 32, "steps": ahead.step.tolist(), "lr": ahead.lr.tolist()}
    plan_doubled = {"step": 300, "batch_size": 64, "samples": 32 * 400, "lr_factor": 2.0,
                    "steps": (300 + (ahead.step - 400) / 2).tolist(), "lr": (2 * ahead.lr).tolist()}
    a, _ = predict(fixed, 2000.0, 1, 32, 32 * 800, 32 * 400, lr_plan=plan_fixed, target_loss=1.6)
    b, _ = predict(doubled, 2000.0, 1, 64, 32 * 800, 32 * 400, lr_plan=plan_doubled, target_loss=1.6)
    assert b.loss_fit["final"] == pytest.approx(a.loss_fit["final"], rel=1e-9)
    assert abs(a.loss_fit["final"] / d.train_loss.iloc[-3:].mean() - 1) < 0.05
    assert b.loss_fit["curve"][-1][0] == pytest.approx(500)                # 300 steps, then 400·32/64 to the budget
    assert b.loss_fit["target_step"] == pytest.approx(300 + (a.loss_fit["target_step"] - 400) / 2)
    assert b.loss_fit["target_step_80"] == pytest.approx([300 + (x - 400) / 2 for x in a.loss_fit["target_step_80"]])
    assert b.total_samples == a.total_samples == 32 * 800
    # a runtime that does not say its LR rule's factor: no schedule from the LR it logged (constant), still over samples
    plain = [{k: v for k, v in r.items() if k != "lr_factor"} for r in doubled]
    c, _ = predict(plain, 2000.0, 1, 64, 32 * 800, 32 * 400, lr_plan=plan_doubled)
    flat, _ = predict(plain, 2000.0, 1, 64, 32 * 800, 32 * 400, schedule="constant")
    assert c.loss_fit["curve"][-1][0] == pytest.approx(500) and c.loss_fit["final"] == flat.loss_fit["final"]
    assert (a.loss_fit["lr"], b.loss_fit["lr"]) == ("reported, then its schedulers' plan",) * 2
    assert c.loss_fit["lr"] == "constant (none declared, none reported)"
    held, _ = predict(fixed, 2000.0, 1, 32, 32 * 800, 32 * 400)   # no plan: the family its reported decay follows
    assert held.loss_fit["lr"].startswith("reported to step 400, then as cosine:"), held.loss_fit["lr"]


def test_an_optimus_fit_without_a_budget_is_drawn_at_the_steps_of_a_job_whose_batch_changed():
    """No budget: only the Optimus terms, fitted per reference step (samples over the first batch). The dashboard and
    the report drew them over the job's steps, so after the batch doubled the drawn curve ran at half the pace of
    the points; ``optimus_steps`` is the fit at the job's own steps."""
    from dlsched.service.refit import loss_curve

    recs = records(1, 32, 0.1, n=40) + records(1, 64, 0.1, n=40, t0=4.0, s0=32 * 40, k0=40)
    for r in recs:   # the loss of the samples trained, as a batch change leaves it
        x = r["samples"] / 32
        r["loss"] = 1.0 / (0.01 * x + 0.5) + 0.1
    pred, _ = predict(recs, now=9.0, current_workers=1, current_batch=64, total_hint=None, samples_done=recs[-1]["samples"])
    fit = pred.loss_fit
    assert "curve" not in fit and fit["optimus_steps"][0][0] == 1
    k, drawn = np.array(fit["optimus_steps"]).T
    assert k[-1] == pytest.approx(80 + (1.6 * 120 + 1 - 120) / 2)     # to 1.6 times its x, a step per 2 x from now
    at = np.interp([20, 60, 80], k, drawn)
    truth = [1.0 / (0.01 * x + 0.5) + 0.1 for x in (20, 80, 120)]      # x at steps 20, 60, 80
    assert at == pytest.approx(truth, rel=0.01)
    assert abs(loss_curve(fit).raw_loss(80) - truth[2]) > 0.05         # the terms over steps: far off at step 80


def test_a_queued_job_s_stated_target_is_predicted_from_its_task_s_finished_targets(tmp_path):
    """``prediction_before_start`` of a job stating ``val_accuracy >= 0.55`` (in %: 55) on charlm under a cosine: the
    finished targets of two charlm jobs (step, WSD; fits in fractions, as the service keeps them) carried to it give
    its accuracy at the budget, on the job's own scale, and the step it gets there; no loss prior, no loss fit."""
    from pathlib import Path

    import pandas as pd

    from dlsched.perf.annealing import fit_annealing
    from dlsched.perf.calibration import load_calibration
    from dlsched.perf.prior import finished_fit, prior_from_fits
    from dlsched.perf.schedule import parse_schedule
    from dlsched.service.job_models import prediction_before_start
    from dlsched.service.store import Store
    from dlsched.spec import JobSpec

    curves = Path(__file__).resolve().parents[2] / "bench" / "curves"
    meta = {"dataset": "charlm", "metric": "val_accuracy", "kind": "accuracy"}
    fits = []
    for name, sched in (("step", "step:400,600:0.1"), ("wsd", "wsd:warmdown=160")):
        d = pd.read_csv(curves / f"charlm-{name}.csv")
        error = 1 - d.accuracy.to_numpy(float)
        fits.append(finished_fit(fit_annealing(d.step.to_numpy(float), error, parse_schedule(sched, 800), None), meta,
                                 float(np.median(error[-3:]))))
    truth = 100 * pd.read_csv(curves / "charlm-cosine.csv").accuracy.iloc[-3:].mean()
    store = Store(tmp_path / "s.db")
    job = store.get(store.submit(JobSpec(name="lm", entry="x.py:make_job", gpus=1, batch_size=32,
                                         total_samples=32 * 800, prediction={
        "schedule": "cosine:warmup=30", "dataset": "charlm",
        "target": {"metric": "val_accuracy", "value": 55, "kind": "accuracy"}})))
    pred = prediction_before_start(job, lambda s: None,
                                   lambda s: prior_from_fits(fits, meta, schedule=s), lambda kind: load_calibration())
    m = pred.loss_fit["metric_target"]
    assert set(pred.loss_fit) == {"metric_target"} and m["bands"] == "task_runs" and pred.fraction_done == 0.0
    assert abs(m["final"] / truth - 1) < 0.03 and m["final_80"][0] <= truth <= m["final_80"][1]
    assert 0 < m["target_step"] < 800 and m["curve"][-1] == [800.0, pytest.approx(m["final"])]
    store.close()


def test_a_job_reporting_its_lr_goes_on_as_its_tasks_finished_jobs_ran_where_its_log_so_far_follows_theirs():
    """Real curves: charlm-step reported to step 300 (its cuts at 400 and 600 still to come), no plan, none declared.
    Its task's finished jobs ran the recipe (bench/curves/reruns: 0.8x the budget, another seed): past its log, the
    job's LR goes on as theirs, cuts included, and the prediction is the one its whole reported LR gives; without
    them the LR is held and the final loss misses the cuts' drop. A recipe its log departs from is not taken."""
    from pathlib import Path

    import pandas as pd

    from dlsched.perf.schedule import Schedule

    curves = Path(__file__).resolve().parents[2] / "bench" / "curves"
    d = pd.read_csv(curves / "charlm-step.csv")
    recs = [{"time": 1000 + r.wall_s, "step": int(r.step), "samples": 32 * int(r.step), "loss": r.loss, "lr": r.lr,
             "samples_per_s": 100.0, "workers": 1, "batch_size": 32} for r in d.itertuples() if r.step <= 300]
    ahead = d[d.step > 300]
    whole = {"step": 300, "batch_size": 32, "steps": ahead.step.tolist(), "lr": ahead.lr.tolist()}

    def recipe(name):
        r = pd.read_csv(curves / "reruns" / f"charlm-{name}.csv")
        return Schedule.from_points(r.step, r.lr, 640.0)

    args = (recs, 2000.0, 1, 32, 32 * 800, 32 * 300)
    known = predict(*args, lr_plan=whole)[0].loss_fit
    ran = predict(*args, task_schedule=recipe("step"))[0].loss_fit
    held = predict(*args)[0].loss_fit
    other = predict(*args, task_schedule=recipe("cosine"))[0].loss_fit
    assert ran["lr"] == "reported to step 300, then as its task's finished jobs ran"
    assert held["lr"] == other["lr"] == "reported to step 300, then held at its last value"
    truth = d.loss.iloc[-3:].mean()
    assert abs(ran["final"] / known["final"] - 1) < 0.005
    assert abs(ran["final"] / truth - 1) < abs(held["final"] / truth - 1) / 2


def test_the_speed_fit_remembers_a_configuration_the_job_left():
    # an elastic job measured slow at 4 workers (its steps contend), shrank back to 1 and trained 200 more steps
    # there: the fit saw only those, extrapolated 4 workers as ideal again, and the policy grew the job into the same
    # slow 4 and shrank it again, every ~10 s for its whole run (a live elastic service, two jobs on 6 slots)
    slow4 = 64 / (true_step(4, 64) * 6)
    recs = records(1, 64, true_step(1, 64), n=50)
    recs += records(4, 64, 64 / slow4, n=60, t0=recs[-1]["time"], s0=recs[-1]["samples"], k0=50)
    recs += records(1, 64, true_step(1, 64), n=300, t0=recs[-1]["time"], s0=recs[-1]["samples"], k0=110)
    _, speed = predict(recs, now=recs[-1]["time"], current_workers=1, current_batch=64, total_hint=10**7,
                       samples_done=recs[-1]["samples"])
    assert speed.throughput(4, 1, 64) == pytest.approx(slow4, rel=0.25)
    assert speed.throughput(4, 1, 64) < speed.throughput(1, 1, 64)


def _resized(transient=(150.0, 400.0, 800.0), settled=0, at=4):
    """1 worker at batch 64 for 50 steps (1 000 samples/s), then a resize to ``at`` workers whose first steps time
    the warm-up (``transient`` samples/s), then ``settled`` steps at the rate it settles at (2 500 samples/s: not the 4 000 of ideal scaling)."""
    recs = records(1, 64, 0.064, n=50)
    for rate in list(transient) + [2500.0] * settled:
        last = recs[-1]
        recs.append({**last, "time": last["time"] + 64 / rate, "step": last["step"] + 1,
                     "samples": last["samples"] + 64, "samples_per_s": rate, "workers": at})
    return recs


def test_the_speed_fit_leaves_out_the_warm_up_steps_after_every_resize(tmp_path):
    """Live, a lone elastic job went 1/64 -> 4/64 -> 1/256 -> 4/256 GPUs/batch: 1.4 s after a resize the fit took
    the first steps at 4 workers (communicator set-up, warm-up: several times slower than it settles at) as its
    speed there, and the policy moved it away from 4 again. The first ``SETTLE_STEPS`` of each stretch at a
    configuration are left out; a running stretch enters once it has settled as long again, and the speed model is
    refitted then, not ``SPEED_REFIT_S`` later; a stretch that ended before it settled keeps its last step (its
    configuration is never left with no point), and a restart at the same configuration is a stretch of its own.
    Before any step settled, the newest stands in."""
    from dlsched.service.job_models import JobModels
    from dlsched.service.progress_history import ProgressHistory
    from dlsched.service.refit import SETTLE_STEPS, speed_configs, speed_sample
    from dlsched.service.store import Store
    from dlsched.spec import JobSpec

    def speed(recs):
        return predict(recs, now=recs[-1]["time"], current_workers=recs[-1]["workers"], current_batch=64,
                       total_hint=10**7, samples_done=recs[-1]["samples"])[1]

    # a job's first steps, before any settled: its newest stands in (a short job is never left without a model)
    first = records(1, 64, 0.064, n=2)
    assert speed(first) is not None and speed_configs(ProgressHistory.of(first)) == {(1, 64, "warming up")}
    warm = _resized()
    assert SETTLE_STEPS == 3 and speed_configs(ProgressHistory.of(warm)) == {(1, 64)}
    # not the warm-up's ~300 samples/s at 4 workers: what the 1-worker steps extrapolate
    assert speed(warm).throughput(4, 1, 64) >= speed(warm).throughput(1, 1, 64)
    assert speed_configs(ProgressHistory.of(_resized(settled=2))) == {(1, 64)}
    settled = _resized(settled=3)
    assert speed_configs(ProgressHistory.of(settled)) == {(1, 64), (4, 64)}
    assert speed(settled).throughput(4, 1, 64) == pytest.approx(2500, rel=0.2)
    # a stretch left before it settled: its last step stands for its configuration
    left = _resized(transient=(150.0, 400.0))
    left += records(1, 64, 0.064, n=20, t0=left[-1]["time"], s0=left[-1]["samples"], k0=left[-1]["step"])
    assert [r["samples_per_s"] for r in speed_sample(ProgressHistory.of(left)) if r["workers"] == 4] == [400.0]
    # a restart at one configuration: its first steps after the gap are warm-up too
    again = records(1, 64, 0.064, n=50)
    again += [{**r, "samples_per_s": 100.0} for r in records(1, 64, 0.064, n=3, t0=again[-1]["time"] + 60)]
    again += records(1, 64, 0.064, n=10, t0=again[-1]["time"], k0=53)
    assert 100.0 not in [r["samples_per_s"] for r in speed_sample(ProgressHistory.of(again))]
    # the live service refits the job's speed model as its new configuration settles
    store = Store(tmp_path / "s.db")
    job = store.get(store.submit(JobSpec(name="e", entry="examples/mlp.py:make_job", gpus=4, batch_size=64,
                                         total_samples=10**7)))
    models = JobModels(("slot",))
    for n in range(len(warm), len(settled) + 1):
        models.refit(job, settled[:n], settled[n - 1]["time"])
    assert models._speeds[job.id].throughput(4, 1, 64) == pytest.approx(2500, rel=0.2)
    store.close()


def test_the_speed_sample_keeps_the_newest_records_of_each_of_the_newest_configurations():
    """``SPEED_PER_CONFIG`` newest records per (workers, batch), of the ``SPEED_CONFIGS`` newest configurations,
    in log order; a record without workers is a configuration of its own."""
    from dlsched.service.progress_history import ProgressHistory
    from dlsched.service.refit import SPEED_CONFIGS, SPEED_PER_CONFIG, speed_sample

    configs = [(w, 32) for w in range(1, SPEED_CONFIGS + 2)] + [(None, 32)]   # the first is the oldest: dropped
    recs = [{"step": i, **({"workers": w} if w else {}), "batch_size": b}
            for i, (w, b) in enumerate(c for c in configs for _ in range(SPEED_PER_CONFIG + 5))]
    kept = speed_sample(ProgressHistory.of(recs))
    steps = [r["step"] for r in kept]
    assert steps == sorted(steps) and len(kept) == SPEED_CONFIGS * SPEED_PER_CONFIG
    by = {}
    for r in kept:
        by.setdefault(r.get("workers"), []).append(r["step"])
    assert 1 not in by and 2 not in by and None in by    # the newest SPEED_CONFIGS: 3 .. SPEED_CONFIGS+1 and None
    per = SPEED_PER_CONFIG + 5
    assert by[3] == list(range(3 * per - SPEED_PER_CONFIG, 3 * per))   # each one's newest


def test_a_stated_target_is_predicted_from_its_second_report_and_a_refit_that_cannot_says_why():
    """The newest prediction row is what the dashboard and ``dlsched show`` read. From exactly two reports of the
    target's metric (a second evaluation) ``first_passage.logged_crossing`` raised numpy's 'window shape cannot be
    larger than input array shape', and the refit stored a row without the target's prediction and without a word
    on it: the target the row before had predicted was gone until the third report. An accuracy of 100 % (a small
    held-out set) is predicted too (``perf.perfect_points``). A log the predictor cannot model (at 100 % from its
    first report: no error to scale a stand-in by) is refused, and the row says so: the metric, the target and the
    predictor's reason."""
    from dlsched.spec import MetricTarget

    recs = records(1, 8, 0.1, n=12)
    for steps, values in (([6.0], [0.5]), ([6.0, 12.0], [0.5, 0.6]), ([6.0, 12.0], [0.5, 1.0])):
        pred, _ = predict(recs, 10.0, 1, 8, 8 * 36, recs[-1]["samples"], schedule="cosine",
                          target=MetricTarget(metric="val_acc", value=0.3, kind="accuracy"),
                          metric_points=(np.array(steps), np.array(values)))
        got = pred.loss_fit["metric_target"]
        assert got["points"] == len(steps) and got["target_reached"] and "metric_target_missing" not in pred.loss_fit
    pred, _ = predict(recs, 10.0, 1, 8, 8 * 36, recs[-1]["samples"], schedule="cosine",
                      target=MetricTarget(metric="val_acc", value=0.3, kind="accuracy"),
                      metric_points=(np.array([6.0, 12.0]), np.array([1.0, 1.0])))
    assert "metric_target" not in pred.loss_fit
    assert pred.loss_fit["metric_target_missing"] == {
        "metric": "val_acc", "target": 0.3, "why": "accuracy values must leave a positive error: 1 at x = 6"}
    # a report above 100 %: 101 read as %, then 1.01 read as % again, predicted a final accuracy of 427
    pred, _ = predict(recs, 10.0, 1, 8, 8 * 36, recs[-1]["samples"], schedule="cosine",
                      target=MetricTarget(metric="val_acc", value=93.0, kind="accuracy"),
                      metric_points=(np.array([6.0, 12.0, 18.0]), np.array([50.0, 70.0, 101.0])))
    assert "metric_target" not in pred.loss_fit
    assert pred.loss_fit["metric_target_missing"]["why"] == "accuracy reports must be in 0–1 or 0–100 %, got 101"


def test_a_script_job_just_resized_is_predicted_at_the_batch_it_trains():
    """A script's job has no batch of the scheduler's (``current_batch`` None: the loader's own). Right after a resize
    (under 3 records at the new size, no wall-clock rate yet) the speed model was asked for batch 0: 0/0, the
    refit failed (`prediction_failed: ZeroDivisionError`, twice in a live run) or gave no finish."""
    recs = []
    for b in (16, 32, 64, 128):    # enough configurations for the all-reduce model (the linear one read 0 as its batch)
        recs += records(1, b, true_step(1, b) * 1.3, t0=recs[-1]["time"] if recs else 0.0, k0=len(recs),
                        s0=recs[-1]["samples"] if recs else 0)
    for w in (2, 4):
        recs += records(w, 64, true_step(w, 64) * 1.3 + 0.004 * w, t0=recs[-1]["time"], s0=recs[-1]["samples"],
                        k0=len(recs))
    recs += records(3, 64, 0.03, n=2, t0=recs[-1]["time"], s0=recs[-1]["samples"], k0=len(recs))   # resized to 3
    done = recs[-1]["samples"]
    pred, speed = predict(recs, now=recs[-1]["time"], current_workers=3, current_batch=None, total_hint=done + 6400,
                          samples_done=done)
    assert isinstance(speed, AllReduceSpeedModel)
    assert pred.remaining_s == pytest.approx(6400 / speed.throughput(3, 1, 64), rel=1e-6)


def test_a_loss_reported_as_0_is_a_point_the_target_loss_is_reached_at():
    """A job whose loss underflows to 0 on easy batches (its log: `loss 0.0`): the refit dropped those points, so a
    target loss of 0.05 read "not reached" (chance ~0) from a log that got to 0, where `predict curve` on the same
    log fits a 0 at a stand-in (half the smallest positive loss) and says reached."""
    recs = records(1, 32, 0.1, n=30)
    for r in recs[-6::2]:
        r["loss"] = 0.0
    pred, _ = predict(recs, 10.0, 1, 32, 32 * 60, 32 * 30, target_loss=0.05)
    fit = pred.loss_fit
    assert fit["target_reached"] and fit["target_step"] <= 30, fit
    assert "beta0" in fit   # the Optimus terms too, from the stand-in
