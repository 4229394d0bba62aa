"""``dlsched predict curve``: the JSON contract, exit codes and every reader, on a real dev-set run
(``bench/curves``) rewritten into each log format. Subprocess runs only where the exit code is the point."""
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from dlsched.commands.predict_curve import _render, run_curve
from dlsched.errors import UserError
from dlsched.perf.curve_readers import read_curve

REPO = Path(__file__).resolve().parents[2]
RUN = REPO / "bench" / "curves" / "charlm-step.csv"
KEYS = {"model", "final_value", "target", "steps_to_target", "interval_80", "final_value_interval_80"}


def cli(*args):
    env = dict(os.environ, PYTHONPATH=str(REPO / "src"), COLUMNS="160")
    return subprocess.run([sys.executable, "-m", "dlsched.cli", "predict", "curve", *map(str, args)],
                          capture_output=True, text=True, env=env, timeout=120)


@pytest.mark.slow
def test_json_contract_and_unreachable_exit_code():
    r = cli(RUN, "--x", "step", "--y", "loss", "--budget", "800", "--schedule", "step:400,600:0.1",
            "--observed-until", "300", "--target-fraction", "0.95", "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert KEYS <= set(out) and out["observed_until"] == 300
    lo, hi = out["interval_80"]
    assert lo <= out["steps_to_target"] <= hi <= 500
    r = cli(RUN, "--budget", "800", "--schedule", "step:400,600:0.1", "--observed-until", "300", "--target", "0.001", "--json")
    assert r.returncode == 3
    assert json.loads(r.stdout)["steps_to_target"] is None
    assert len(r.stderr.strip().splitlines()) == 1 and "unreachable" in r.stderr and "floor" in r.stderr


def test_accuracy_target_with_lr_column_and_time(capsys):
    code = run_curve(RUN, "step", "accuracy", 800, "lr-column", 300, 0.5, None, "accuracy", "lr", "wall_s", True, None)
    out = json.loads(capsys.readouterr().out)
    assert code == 0 and out["schedule"] == "lr-column" and out["target"] == pytest.approx(0.5)
    assert out["seconds_to_target"] is not None and out["seconds_to_budget"] > 0
    lo, hi = out["seconds_to_target_interval_80"]   # the steps' band at the same speed
    rate = out["seconds_to_budget"] / (out["budget"] - out["observed_until"])
    assert lo <= out["seconds_to_target"] <= hi and [lo, hi] == pytest.approx([rate * v for v in out["interval_80"]])


def test_the_chance_of_reaching_a_target_falls_as_the_target_passes_the_prediction(capsys):
    """A target the predicted curve never reaches is not reported as 'at the budget' without saying so: the
    chance by the budget comes from the calibrated final band, and falls as the target moves past it."""
    chances, beyond = [], []
    for target in (3.0, 1.6, 1.2, 0.5):
        assert run_curve(RUN, "step", "loss", 800, "step:400,600:0.1", 300, target, None, "loss", None, None, True,
                         None) in (0, 3)
        out = json.loads(capsys.readouterr().out)
        chances.append(out["p_reach"])
        beyond.append(out["beyond_final"])
    assert chances[0] == 1.0 and chances == sorted(chances, reverse=True) and chances[-1] < 0.05, chances
    # reached, crossed ahead, past the predicted final (at the budget, only if the run does better), unreachable
    assert beyond == [False, False, True, False]
    run_curve(RUN, "step", "loss", 800, "step:400,600:0.1", 300, 0.5, None, "loss", None, None, False, None)
    said = capsys.readouterr()   # an unreachable target is its one line on stderr (exit 3)
    text = " ".join((said.out + said.err).split())   # rich wraps at the terminal's width
    assert "only if the run does better than predicted" in text or "unreachable" in text, text


@pytest.mark.parametrize("metric,target,final,said", [
    ("loss", 0.3476, 0.3357, "at step 1,244"), ("loss", 0.30, 0.3357, "beyond the predicted final value"),
    ("accuracy", 0.90, 0.9128, "at step 1,244"), ("accuracy", 0.93, 0.9128, "beyond the predicted final value"),
])
def test_the_text_says_beyond_the_final_value_only_for_a_target_past_it(capsys, metric, target, final, said):
    """The calibrated median of the final errors may lie above the prediction (runs that ended a little worse
    than predicted), so the chance by the budget can fall under one half for a target the predicted curve crosses
    at step 1244: the
    text gives that crossing and its chance, and says "beyond" only of a target past the predicted final value."""
    out = {"model": "annealing", "schedule": "lr-column", "regime": "finetune", "observed_until": 500.0,
           "budget": 2000.0, "final_value": final, "final_value_interval_80": [0.3, 0.68], "floor": 0.16,
           "target": target, "target_step": 1244.3, "steps_to_target": 744.3, "interval_80": [461.4, 1500.0],
           "p_reach": 0.21, "beyond_final": said.startswith("beyond")}   # run_curve: CurvePrediction.beyond_final
    _render(out, "step", metric)
    text = " ".join(capsys.readouterr().out.split())
    assert said in text and "chance by the budget 21 %" in text, text
    assert ("beyond" in text) == (said.startswith("beyond")), text


def test_the_text_gives_the_crossing_as_a_person_reads_it_and_its_band_in_time(capsys):
    out = {"model": "annealing", "schedule": "cosine", "regime": "scratch", "observed_until": 500.0,
           "budget": 20000.0, "final_value": 0.3, "final_value_interval_80": [0.28, 0.33], "floor": 0.16,
           "target": 0.32, "target_step": 12344.31, "steps_to_target": 11844.31, "interval_80": [61.42, 15000.0],
           "p_reach": 0.9, "seconds_to_target": 5400.0, "seconds_to_target_interval_80": [28.0, 6840.0],
           "beyond_final": False}
    _render(out, "step", "loss")
    text = " ".join(capsys.readouterr().out.split())
    # the band as steps first, then from now: "at step 12,344, ... (80 % interval 61.4 – 15,000" read as steps
    assert ("target 0.32: at step 12,344, 11,844 from now (80 % interval: step 561 – 15,500, 61.4 – 15,000 from now; "
            "in ~1h 30m, 28s – 1h 54m; chance by the budget 90 %)") in text, text


def test_the_text_gives_where_the_log_reached_a_target_as_a_person_reads_it(capsys):
    # a digits run's 93 % reached at an interpolated step: "at step 374.667 of the log", the crossing ahead "at step 530"
    out = {"model": "annealing", "schedule": "lr-column", "regime": "scratch", "observed_until": 600.0,
           "budget": 1200.0, "final_value": 97.17, "final_value_interval_80": [95.68, 97.53], "floor": 100.0,
           "target": 93.0, "target_step": 374.6666838, "steps_to_target": 0.0, "interval_80": [0.0, 46.3],
           "p_reach": 1.0}
    _render(out, "step", "accuracy")
    text = " ".join(capsys.readouterr().out.split())
    assert "target 93: already reached, at step 375 of the log" in text, text


def test_a_crossing_at_the_newest_point_the_logs_median_has_not_made_is_not_said_reached(capsys):
    """A hold-out run (bench/curves/holdout) whose newest loss is under the target, its 3-point median not: the crossing
    is at the newest point only if the next evaluation stays there; 'already reached' was printed beside a 53 %
    chance."""
    holdout = Path(__file__).parents[2] / "bench" / "curves" / "holdout" / "charlstm-poly.csv"
    args = (holdout, "step", "loss", 600, "poly:power=1.5:warmup=30", 300, 2.341406633333333, None, "loss", None, None)
    assert run_curve(*args, True, None) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["steps_to_target"] == 0 and out["p_reach"] < 1
    run_curve(*args, False, None)
    text = " ".join(capsys.readouterr().out.split())
    assert "already reached" not in text and "at the newest point, step 300, if the next evaluation stays there" in text


@pytest.mark.parametrize("args,field", [
    (dict(schedule="cosine:warmup=x"), "--schedule"), (dict(metric="auc"), "--metric"),
    (dict(schedule="cosine:min=1.5"), "min"), (dict(schedule="exp:gamma=2"), "gamma"),
    (dict(budget=-1.0), "--budget"), (dict(target=0.5, target_fraction=0.9), "--target"),
    (dict(y="nope"), "'nope'"), (dict(observed_until=5), "no point to predict from"),
    (dict(budget=100.0, observed_until=None), "--budget"),
    (dict(target=float("nan")), "--target"), (dict(target=float("inf")), "--target"),   # were NaN/Infinity in JSON
    (dict(regime="pretrained"), "--regime"),
])
def test_bad_input_is_one_line_naming_the_field(args, field):
    kw = dict(file=RUN, x="step", y="loss", budget=800.0, schedule="constant", observed_until=300.0, target=None,
              target_fraction=None, metric="loss", lr_col=None, time_col=None, as_json=True, plot_path=None)
    kw.update(args)
    with pytest.raises(UserError) as e:
        run_curve(**kw)
    assert field in str(e.value) and "\n" not in str(e.value)


def test_the_regime_picks_the_shipped_prior_s_pool_and_is_in_the_json(capsys, monkeypatch):
    """--regime reaches the predictor (the shipped prior's pool, ``perf.prior``) and the JSON names it; scratch
    by default."""
    import dlsched.perf.curve_predict as cp

    seen = []
    real = cp.predict_curve
    monkeypatch.setattr(cp, "predict_curve", lambda *a, **k: seen.append(k["regime"]) or real(*a, **k))
    args = (RUN, "step", "loss", 800, "step:400,600:0.1", 300, None, 0.95, "loss", None, None, True, None)
    assert run_curve(*args) == 0
    assert json.loads(capsys.readouterr().out)["regime"] == "scratch"
    assert run_curve(*args, regime="finetune") == 0
    assert json.loads(capsys.readouterr().out)["regime"] == "finetune"
    assert seen == ["scratch", "finetune"]


def test_one_observed_point_is_answered_from_the_finished_runs_shapes_and_says_so(capsys):
    """The first evaluation of a run that evaluates every few epochs: the CLI answered "too few points"."""
    args = (RUN, "step", "loss", 800, "step:400,600:0.1", 15, None, 0.95, "loss", None, None)
    assert run_curve(*args, True, None) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["model"] == "prior" and out["observed_until"] == 10 and out["floor"] == 0
    assert out["final_value_interval_80"][0] < out["final_value"] < out["final_value_interval_80"][1]
    assert run_curve(*args, False, None) == 0
    assert "one point after training starts: the finished runs' curves carried through it" in \
        " ".join(capsys.readouterr().out.split())


def test_a_bad_regime_is_one_line_and_exit_2():
    r = cli(RUN, "--budget", "800", "--regime", "pretrained", "--json")
    assert r.returncode == 2 and r.stdout == ""
    assert len(r.stderr.strip().splitlines()) == 1 and "--regime" in r.stderr and "pretrained" in r.stderr, r.stderr


def test_predict_and_predict_curve_name_a_bad_csv_row_by_the_same_line(tmp_path):
    # predict said "line 3" and predict curve "row 2" for one cell: both now give the editor's line (header = 1)
    from dlsched.commands.predict import load_observations

    p = tmp_path / "obs.csv"   # a blank line and a line of empty cells before it: pandas skipped the first unseen
    p.write_text("step,loss\n100,2.0\n\n,\n200,abc\n300,1.5\n400,1.2\n500,1.1\n")
    said = []
    for read in (load_observations, lambda f: run_curve(f, "step", "loss", 800.0, "constant", None, None, None,
                                                         "loss", None, None, True, None)):
        with pytest.raises(UserError) as e:
            read(p)
        said.append(str(e.value))
    assert said == [f"{p}: line 5, field 'loss': expected a number, got 'abc'"] * 2


def test_a_logged_lr_that_ends_before_the_budget_goes_on_as_its_family_or_is_said_to_be_held(tmp_path, capsys):
    """A run still training logs its LR only so far. A decay it has logged goes on as the family it follows
    (a cosine run cut at step 300 of 600); an LR flat so far is held at its last value (a step decay still to come
    unseen), and the output says which; a SPEC or the whole log says nothing."""
    cosine = pd.read_csv(REPO / "bench" / "curves" / "tinylm-cosine.csv")[["step", "loss", "lr"]]
    cosine[cosine.step <= 300].to_csv(tmp_path / "cosine.csv", index=False)
    assert run_curve(tmp_path / "cosine.csv", "step", "loss", 600.0, None, None, None, None, "loss", None, None, True,
                     None) == 0
    went_on = json.loads(capsys.readouterr().out)
    assert went_on["lr_logged_until"] == 300 and went_on["lr_continued_as"].startswith("cosine:warmup=")
    run_curve(tmp_path / "cosine.csv", "step", "loss", 600.0, None, None, None, None, "loss", None, None, False, None)
    assert "LR: logged to step 300 of 600, then as cosine:warmup=" in " ".join(capsys.readouterr().out.split())

    d = pd.read_csv(RUN)[["step", "loss", "lr"]]
    d[d.step <= 300].to_csv(tmp_path / "live.csv", index=False)
    assert run_curve(tmp_path / "live.csv", "step", "loss", 800.0, None, None, None, None, "loss", None, None, True,
                     None) == 0
    held = json.loads(capsys.readouterr().out)
    assert (held["schedule"], held["lr_logged_until"], held["lr_continued_as"]) == ("lr-column", 300.0, None)
    run_curve(tmp_path / "live.csv", "step", "loss", 800.0, None, None, None, None, "loss", None, None, False, None)
    assert "LR: logged to step 300 of 800, then held at its last value" in " ".join(capsys.readouterr().out.split())
    run_curve(tmp_path / "live.csv", "step", "loss", 800.0, "step:400,600:0.1", None, None, None, "loss", None, None,
              True, None)
    told = json.loads(capsys.readouterr().out)
    ended = d.loss.iloc[-1]   # the decays the log had not seen: the SPEC that has them lands nearer where it ended
    assert "lr_logged_until" not in told and abs(told["final_value"] - ended) < abs(held["final_value"] - ended)
    run_curve(RUN, "step", "loss", 800.0, None, 300.0, None, None, "loss", None, None, True, None)
    assert "lr_logged_until" not in json.loads(capsys.readouterr().out)   # the whole log: its LR is the plan


def test_a_logged_lr_that_follows_its_like_runs_goes_on_as_theirs_cuts_to_come_included(tmp_path, capsys):
    """charlm-step logged to step 300 of 800 (cuts at 400 and 600 to come, none yet): held without more. With a
    finished run of its recipe (--like: bench/curves/reruns, 0.8x the budget, another seed) the LR goes on as that run
    logged its own, stretched: the prediction its whole logged LR gives. A --like run it departs from is said so."""
    d = pd.read_csv(RUN)[["step", "loss", "lr"]]
    d[d.step <= 300].to_csv(tmp_path / "live.csv", index=False)
    reruns = REPO / "bench" / "curves" / "reruns"

    def predict(file, observed_until=None, like=(), as_json=True):
        assert run_curve(file, "step", "loss", 800.0, None, observed_until, None, None, "loss", None, None, as_json,
                         None, like=list(like)) == 0
        out = capsys.readouterr()
        return (json.loads(out.out) if as_json else " ".join(out.out.split())), out.err

    ran, _ = predict(tmp_path / "live.csv", like=[reruns / "charlm-step.csv"])
    known, _ = predict(RUN, 300.0, like=[reruns / "charlm-step.csv"])   # the whole log's LR: its future known
    assert (ran["lr_logged_until"], ran["lr_continued_as"]) == (300.0, "the --like runs' logged LR")
    assert ran["final_value"] == pytest.approx(known["final_value"], rel=0.005)
    text, _ = predict(tmp_path / "live.csv", like=[reruns / "charlm-step.csv"], as_json=False)
    assert "then as the --like runs' logged LR (its log so far follows theirs)" in text
    other, note = predict(tmp_path / "live.csv", like=[reruns / "charlm-cosine.csv"])
    assert other["lr_continued_as"] is None
    assert "note: the run's logged LR does not follow the --like runs' so far: past its log it goes on as its " \
           "last value" in note
    _, differ = predict(tmp_path / "live.csv", like=[reruns / "charlm-cosine.csv", reruns / "charlm-step.csv"])
    assert "note: the --like runs' logged LRs differ in shape: past its log, the run's LR goes on as its own" in differ


@pytest.mark.slow
def test_a_hugging_face_run_half_way_gets_the_rest_of_its_cosine_from_its_logged_lr(tmp_path):
    """"When will my run hit 93 %?" asked of a Trainer's trainer_state.json half-way: the budget is its max_steps,
    the schedule its logged learning_rate, which goes on as the cosine it follows; the command as a user types it."""
    d = pd.read_csv(REPO / "bench" / "curves" / "tinylm-cosine.csv")
    history = [r for s, row in d[d.step <= 300].iterrows() for r in (
        {"step": int(row.step), "loss": row.train_loss, "learning_rate": row.lr},
        {"step": int(row.step), "eval_loss": row.loss, "eval_accuracy": row.accuracy})]
    (tmp_path / "trainer_state.json").write_text(json.dumps({"global_step": 300, "max_steps": 600,
                                                             "log_history": history}))
    r = cli(tmp_path / "trainer_state.json", "--y", "eval_accuracy", "--metric", "accuracy", "--target", "0.42",
            "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert (out["budget"], out["lr_column"], out["lr_logged_until"]) == (600, "learning_rate", 300)
    assert out["lr_continued_as"].startswith("cosine:") and out["steps_to_target"] > 0


def test_a_like_run_whose_log_ends_before_its_own_budget_is_said_to(tmp_path, capsys):
    """--like asks for finished runs; a trainer_state.json names its max_steps, so one that stops half-way (a run
    still training, or an early stop) is said to, in one line, and taken as ended there; a CSV names no budget."""
    d = pd.read_csv(REPO / "bench" / "curves" / "tinylm-cosine.csv")

    def state(until):
        history = [{"step": int(r.step), "loss": r.loss, "learning_rate": r.lr} for r in d.itertuples()
                   if r.step <= until]
        path = tmp_path / f"state-{until}" / "trainer_state.json"
        path.parent.mkdir()
        path.write_text(json.dumps({"global_step": until, "max_steps": 600, "log_history": history}))
        return path

    done, half = state(600), state(300)
    for like, said in ((done, False), (half, True)):
        assert run_curve(RUN, "step", "loss", 800.0, None, 300.0, None, 0.95, "loss", None, None, True, None,
                         like=[like]) == 0
        err = capsys.readouterr().err
        assert (f"note: --like {half} ends at step 300 of its budget 600 (still training, or stopped early)" in err) \
            is said, err


def test_the_lr_column_a_logger_writes_is_the_default_schedule(tmp_path, capsys):
    d = pd.read_csv(RUN)[["step", "loss", "lr"]]
    for name in ("lr", "learning_rate", "lr-AdamW"):   # timm, Hugging Face, Lightning's LearningRateMonitor
        d.rename(columns={"lr": name}).to_csv(tmp_path / "run.csv", index=False)
        assert run_curve(tmp_path / "run.csv", "step", "loss", 800.0, None, 300.0, None, 0.95, "loss", None, None,
                         True, None) == 0
        out = json.loads(capsys.readouterr().out)
        assert (out["schedule"], out["lr_column"]) == ("lr-column", name)
    d.assign(**{"lr-SGD": d.lr}).to_csv(tmp_path / "two.csv", index=False)   # two optimizers: not guessed
    assert read_curve(tmp_path / "two.csv").lr is None
    # one optimizer's parameter groups: the shape most groups share. Ultralytics' pg0 (biases) is warmed up down
    # from warmup_bias_lr while its weights' pg1/pg2 rise from 0; LearningRateMonitor's groups differ in scale only
    bias = np.where(d.step <= 40, 0.1 - (0.1 - d.lr.max()) * d.step / 40, d.lr)
    groups = {"ultralytics": ({"lr/pg0": bias, "lr/pg1": d.lr, "lr/pg2": d.lr}, "lr/pg1"),
              "alike": ({"lr/pg0": d.lr, "lr/pg1": d.lr, "lr/pg2": d.lr}, "lr/pg0"),
              "lightning": ({"lr-Adam/pg1": d.lr, "lr-Adam/pg2": 0.1 * d.lr}, "lr-Adam/pg1"),
              "two optimizers": ({"lr-Adam/pg1": d.lr, "lr-SGD/pg1": d.lr}, None)}
    for name, (cols, want) in groups.items():
        d[["step", "loss"]].assign(**cols).to_csv(tmp_path / "groups.csv", index=False)
        assert read_curve(tmp_path / "groups.csv").lr_name == want, name
    d[["step", "loss"]].to_csv(tmp_path / "none.csv", index=False)
    with pytest.raises(UserError, match="lr-column: .* has no LR values") as e:
        run_curve(tmp_path / "none.csv", "step", "loss", 800.0, "lr-column", 300.0, None, None, "loss", None, None,
                  True, None)
    assert "\n" not in str(e.value)


def test_a_log_that_numbers_the_first_finished_epoch_0_is_read_as_finished_epochs(tmp_path, capsys):
    """Keras' CSVLogger (like timm's summary.csv and Lightning's epoch) writes the evaluation after the first epoch as
    epoch 0. Read as is, that point is "before any training" (no LR applied: not fitted) and the run one epoch
    short; with --x-from-zero the log predicts exactly as the same log numbered from 1, --observed-until included."""
    d = pd.read_csv(RUN).iloc[1::2]   # every other evaluation: 40 "epochs"
    for name, first in (("keras.csv", 0), ("counted.csv", 1)):
        d.assign(epoch=np.arange(first, first + len(d)))[["epoch", "loss"]].to_csv(tmp_path / name, index=False)
    answers = []
    for name, observed, flag in (("keras.csv", 11, True), ("counted.csv", 12, False), ("keras.csv", 11, False)):
        assert run_curve(tmp_path / name, "epoch", "loss", 40.0, "cosine", observed, None, 0.95, "loss", None, None,
                         True, None, x_from_zero=flag) == 0
        answers.append(json.loads(capsys.readouterr().out))
    shifted, counted, as_is = answers
    assert shifted.pop("x_from_zero") is True and shifted == counted and shifted["observed_until"] == 12
    assert as_is["final_value"] != counted["final_value"]   # the case: read as is, the first point is "before training"


def test_readers_give_the_same_curve_from_every_format(tmp_path):
    d = pd.read_csv(RUN)
    want = read_curve(RUN, lr_col="lr")
    # Lightning metrics.csv: sparse rows (train and validation logged on separate rows of the same step)
    rows = []
    for r in d.itertuples():
        rows.append({"epoch": 0, "step": r.step, "lr-Adam": r.lr, "val_loss": ""})
        rows.append({"epoch": 0, "step": r.step, "lr-Adam": "", "val_loss": r.loss})
    pd.DataFrame(rows).to_csv(tmp_path / "metrics.csv", index=False)
    got = read_curve(tmp_path, y="val_loss", lr_col="lr-Adam")
    assert (got.x == want.x).all() and (got.y == want.y).all() and (got.lr == want.lr).all()
    # Hugging Face trainer_state.json
    hist = [{"step": int(r.step), "learning_rate": r.lr, "loss": r.train_loss} for r in d.itertuples()]
    hist += [{"step": int(r.step), "eval_loss": r.loss} for r in d.itertuples()]
    (tmp_path / "trainer_state.json").write_text(json.dumps({"max_steps": 800, "log_history": hist}))
    hf = read_curve(tmp_path / "trainer_state.json", y="eval_loss")
    assert (hf.y == want.y).all() and hf.budget == 800 and hf.lr is not None
    # the job folder's progress.jsonl (events skipped, metrics nested, a half-written last line ignored)
    job = tmp_path / "job"
    job.mkdir()
    lines = [json.dumps({"event": "checkpoint", "step": 0})]
    for r in d.itertuples():   # train.protocol: StepRecord per step, evaluations as "metrics" events
        lines.append(json.dumps({"time": 1000 + r.wall_s, "step": int(r.step), "samples": 32 * int(r.step),
                                 "batch_size": 32, "total_samples": 32 * 800, "loss": r.train_loss, "lr": r.lr,
                                 "metrics": {"acc": r.accuracy}}))
        lines.append(json.dumps({"event": "metrics", "step": int(r.step), "epoch": 0, "metrics": {"val_loss": r.loss}}))
    (job / "progress.jsonl").write_text("\n".join(lines) + '\n{"step": 81')
    pj = read_curve(job, y="val_loss")
    assert (pj.y == want.y).all() and pj.budget == 800 and pj.time is not None and pj.lr is not None
    assert (read_curve(job, y="acc").y == d.accuracy).all()
    with pytest.raises(UserError, match="no column 'acc'"):
        read_curve(RUN, y="acc")


def test_tensorboard_events_are_read_when_a_reader_is_installed(tmp_path):
    pytest.importorskip("tensorboard")
    from torch.utils.tensorboard import SummaryWriter

    d = pd.read_csv(RUN)
    with SummaryWriter(str(tmp_path)) as w:
        for r in d.itertuples():
            w.add_scalar("val/loss", r.loss, int(r.step))
            w.add_scalar("lr", r.lr, int(r.step))
    got = read_curve(tmp_path, y="val/loss", lr_col="lr")
    assert read_curve(tmp_path, y="val/loss").lr_name == "lr"   # found without --lr-col
    assert len(got.x) == len(d) and got.y[-1] == pytest.approx(d.loss.iloc[-1], rel=1e-6)


def test_an_unreachable_accuracy_names_the_highest_it_can_reach(tmp_path, capsys):
    step = np.arange(10, 1001, 10)   # a saturating accuracy: its floor (a ceiling, for accuracy) is below 0.999
    pd.DataFrame({"step": step, "acc": 0.95 - 0.7 * (1 + step / 50) ** -0.8}).to_csv(tmp_path / "acc.csv", index=False)
    code = run_curve(tmp_path / "acc.csv", "step", "acc", 2000, "constant", None, 0.999, None, "accuracy", None, None,
                     True, None)
    out, err = capsys.readouterr()
    assert code == 3 and "highest" in err and "lowest" not in err and json.loads(out)["steps_to_target"] is None
    assert "the fitted ceiling is" in err and "floor" not in err, err   # its one line said "floor" of a ceiling
    run_curve(tmp_path / "acc.csv", "step", "acc", 2000, "constant", None, 0.999, None, "accuracy", None, None,
              False, None)
    assert "ceiling" in capsys.readouterr().out   # the text said "floor" of a bound above the prediction


def test_json_with_a_plot_prints_only_the_json_object(tmp_path, capsys):
    code = run_curve(RUN, "step", "loss", 800, "step:400,600:0.1", 300, None, 0.95, "loss", None, None, True,
                     tmp_path / "p.png")
    out = capsys.readouterr().out   # the "plot written" note was a second stdout line after the object
    assert code == 0 and KEYS <= set(json.loads(out)) and (tmp_path / "p.png").stat().st_size > 0


def test_the_plot_draws_the_lr_the_prediction_assumed_past_the_logs_end(tmp_path):
    """A cosine run logged to step 300 of 800: the plot's second axis is its LR as the prediction took it, the log
    and then the cosine its logged decay follows, as a share of the peak."""
    import dataclasses

    import matplotlib.pyplot as plt

    from dlsched.commands.predict_curve import _figure, _schedule
    from dlsched.perf.curve_predict import predict_curve
    from dlsched.perf.curve_readers import read_curve

    curve = read_curve(REPO / "bench" / "curves" / "charlm-cosine.csv", x="step", y="loss")
    keep = curve.x <= 300
    cut = dataclasses.replace(curve, lr_x=curve.lr_x[curve.lr_x <= 300], lr=curve.lr[curve.lr_x <= 300])
    schedule, continued = _schedule(None, 800.0, cut)
    assert continued is not None and continued.spec.startswith("cosine")
    fig = _figure(curve, keep, predict_curve(curve.x[keep], curve.y[keep], schedule), "step", "loss", schedule,
                  "logged to step 300, then cosine")
    (line,) = fig.axes[1].get_lines()
    xs, share = line.get_data()
    assert line.get_label() == "LR: logged to step 300, then cosine" and xs[-1] == 800
    assert np.allclose(share, schedule.lr(xs) / schedule.lr(xs).max()) and share[-1] < 0.01   # decayed, not held
    assert line.get_label() in [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    plt.close(fig)


def test_the_plot_tells_the_warm_up_points_left_out_of_the_fit_from_the_fitted_ones():
    """charlm-cosine warms up over its first 40 steps: the law is fitted from the peak on, and the points before it
    were labelled "observed (fitted)" with the rest."""
    import matplotlib.pyplot as plt

    from dlsched.commands.predict_curve import _figure
    from dlsched.perf.curve_predict import predict_curve
    from dlsched.perf.curve_readers import read_curve
    from dlsched.perf.schedule import parse_schedule

    curve = read_curve(REPO / "bench" / "curves" / "charlm-cosine.csv", x="step", y="loss")
    schedule = parse_schedule("cosine:warmup=40", 800.0)
    keep = curve.x <= 300
    pred = predict_curve(curve.x[keep], curve.y[keep], schedule)
    fig = _figure(curve, keep, pred, "step", "loss", schedule, "cosine:warmup=40")
    lines = {line.get_label(): line.get_xdata() for line in fig.axes[0].get_lines()}
    fitted, early = lines["observed (fitted)"], lines["observed, not fitted (warm-up, slow start)"]
    assert fitted.min() == pred.curve_x[0] >= 40 and fitted.max() == 300 and early.max() < 40
    assert len(fitted) + len(early) == keep.sum()
    plt.close(fig)


def test_an_unwritable_plot_path_is_refused_before_the_fit(tmp_path, capsys):
    with pytest.raises(UserError, match="--plot .*missing' does not exist"):
        run_curve(RUN, "step", "loss", 800, "step:400,600:0.1", 300, None, 0.95, "loss", None, None, True,
                  tmp_path / "missing" / "p.png")
    assert capsys.readouterr().out == ""   # the prediction printed, then a FileNotFoundError traceback, exit 1


def test_text_logs_and_tsv_give_the_csv_s_curve_and_an_initial_evaluation_changes_no_prediction(tmp_path, capsys):
    """Printed ``name:value`` lines (with an evaluation at step 0, before any LR, and a ``step:N/TOTAL``
    budget), MLPerf ``:::MLLOG`` lines and a DAWNBench-style TSV in hours read as the CSV does. The step-0 point
    once scaled the whole predicted curve by y / f(0) = 0 (final loss 4e-7)."""
    d = pd.read_csv(RUN)
    want = read_curve(RUN, time_col="wall_s")
    lines = ["model: 4 layers, vocab=96", "step:0/800 val_loss:4.5900 train_time:0ms"]
    for r in d.itertuples():
        lines.append(f"step:{r.step}/800 train_loss:{r.train_loss:.6f} train_time:{r.wall_s * 1000:.0f}ms lr={r.lr:g}")
        lines.append(f"step:{r.step}/800 val_loss:{r.loss:.6f} train_time:{r.wall_s * 1000:.0f}ms")
    (tmp_path / "train.log").write_text("\n".join(lines))
    text = read_curve(tmp_path / "train.log", y="val_loss", time_col="train_time")
    assert text.budget == 800 and list(text.x) == [0, *want.x] and np.allclose(text.y[1:], want.y, rtol=1e-6)
    assert np.allclose(text.time[1:], want.time, atol=1e-3) and text.lr_name == "lr"
    mllog = [':::MLLOG {"key": "run_start", "value": null, "time_ms": 0, "metadata": {}}', "a line of the program's own"]
    mllog += [':::MLLOG ' + json.dumps({"key": "eval_loss", "value": r.loss, "time_ms": 1e6 + r.wall_s * 1000,
                                        "metadata": {"epoch_num": r.step, "file": "t.py"}}) for r in d.itertuples()]
    (tmp_path / "result_0.txt").write_text("\n".join(mllog))
    ml = read_curve(tmp_path / "result_0.txt", x="epoch_num", y="eval_loss")
    assert (ml.x == want.x).all() and (ml.y == want.y).all() and np.allclose(np.diff(ml.time), np.diff(want.time))
    d.assign(hours=d.wall_s / 3600).to_csv(tmp_path / "dawn.tsv", sep="\t", index=False)
    tsv = read_curve(tmp_path / "dawn.tsv", time_col="hours")
    assert (tsv.y == want.y).all() and np.allclose(tsv.time, want.time)

    finals = []
    for path, time_col in ((RUN, "wall_s"), (tmp_path / "train.log", "train_time")):
        assert run_curve(path, "step", "val_loss" if path.suffix == ".log" else "loss", None if path.suffix == ".log"
                         else 800, "step:400,600:0.1", 40, None, None, "loss", None, time_col, True, None) == 0
        out = json.loads(capsys.readouterr().out)
        finals.append(out["final_value"])
        assert out["budget"] == 800 and out["seconds_to_budget"] > 0
    # 5 points with step 0, 4 without: the newest fifth (at least 5) the curve is anchored on reached step 0
    assert finals[1] == pytest.approx(finals[0], rel=1e-9) and finals[0] > 1.0, finals


def test_a_text_log_without_pairs_and_a_broken_mllog_record_are_one_line(tmp_path):
    (tmp_path / "notes.txt").write_text("nothing numeric here\n")
    with pytest.raises(UserError, match="notes.txt: no :::MLLOG records or name:value pairs"):
        read_curve(tmp_path / "notes.txt")
    (tmp_path / "result.txt").write_text(':::MLLOG {"key": "eval_accuracy", "value": 0.1}\n:::MLLOG {"key": \n')
    with pytest.raises(UserError, match="result.txt: line 2: not a valid :::MLLOG record"):
        read_curve(tmp_path / "result.txt", y="eval_accuracy")
    (tmp_path / "bin.log").write_bytes(b"\xff\xfe\x00binary")
    with pytest.raises(UserError, match="bin.log: not a text log"):
        read_curve(tmp_path / "bin.log")


def test_the_loggers_that_number_the_first_finished_epoch_0_are_read_as_finished_epochs_without_the_flag(tmp_path, capsys):
    """Keras' CSVLogger, timm's summary.csv and Lightning's metrics.csv each write their row after an epoch, the first
    as epoch 0: with --x epoch the log predicts as the same log numbered from 1 without --x-from-zero (the JSON says
    why); --x-as-logged reads it as is. A CSV of no known logger is read as logged, with a note on how to choose."""
    d = pd.read_csv(RUN).iloc[1::2]   # every other evaluation: 40 "epochs"
    epochs = np.arange(len(d))
    d.assign(epoch=epochs + 1)[["epoch", "loss"]].to_csv(tmp_path / "counted.csv", index=False)
    logs = {"keras": pd.DataFrame({"epoch": epochs, "loss": d.train_loss, "val_loss": d.loss}),
            "timm": pd.DataFrame({"epoch": epochs, "train_loss": d.train_loss, "eval_loss": d.loss}),
            "lightning": pd.DataFrame({"epoch": epochs, "step": 10 * epochs + 9, "val_loss": d.loss})}
    y = {"keras": "val_loss", "timm": "eval_loss", "lightning": "val_loss"}

    def predict(name, y, flag=None, observed=11):   # the log's own numbering: epoch 11 from 0 is epoch 12 from 1
        assert run_curve(tmp_path / name, "epoch", y, 40.0, "cosine", observed, None, 0.95, "loss", None, None, True,
                         None, x_from_zero=flag) == 0
        out = capsys.readouterr()
        return json.loads(out.out), out.err

    counted, _ = predict("counted.csv", "loss", observed=12)
    for name, frame in logs.items():
        frame.to_csv(tmp_path / f"{name}.csv", index=False)
        got, err = predict(f"{name}.csv", y[name])
        assert got.pop("x_from_zero") is True and "numbers the first finished epoch 0" in got.pop("x_from_zero_because")
        assert got == counted and err == "", name
        as_logged, _ = predict(f"{name}.csv", y[name], flag=False)
        assert "x_from_zero" not in as_logged and as_logged["final_value"] != counted["final_value"], name
    # the same columns numbered from 1 are never moved
    logs["keras"].assign(epoch=epochs + 1).to_csv(tmp_path / "keras1.csv", index=False)
    assert predict("keras1.csv", "val_loss", observed=12)[0] == counted
    # a CSV of no known logger: as logged, and one line on stderr says how to choose
    pd.DataFrame({"epoch": epochs, "loss": d.loss}).to_csv(tmp_path / "own.csv", index=False)
    got, err = predict("own.csv", "loss")
    assert "x_from_zero" not in got and err.count("\n") == 1 and "--x-from-zero" in err
    assert predict("own.csv", "loss", flag=False) == (got, "")   # the user chose: no note


def test_a_job_whose_batch_changed_is_predicted_over_its_samples_as_the_same_run_at_one_batch(tmp_path, capsys):
    """Real curve (charlm-step, 200 of 800 steps at batch 32) written as a job's progress.jsonl whose batch
    doubled at step 100 (the linear rule's lr_factor 2; the runtime's plan made at the new batch, with its samples).
    Over samples with its logged LR and plan, the prediction is the one-batch run's; over steps it would bend at the
    change, and the CLI says so."""
    from dlsched.train.files import atomic_write_json

    d = pd.read_csv(RUN)
    seen, ahead = d[d.step <= 200], d[d.step > 200]
    one, two = tmp_path / "one", tmp_path / "two"
    for folder, doubled in ((one, False), (two, True)):
        folder.mkdir()
        with open(folder / "progress.jsonl", "w") as f:
            for r in seen.itertuples():
                later = doubled and r.step > 100
                f.write(json.dumps({"time": 1000 + r.wall_s, "samples": 32 * int(r.step), "total_samples": 32 * 800,
                                    "step": 100 + (int(r.step) - 100) // 2 if later else int(r.step),
                                    "batch_size": 64 if later else 32, "loss": r.loss,
                                    "lr": r.lr * (2 if later else 1), "lr_factor": 2 if later else 1}) + "\n")
        step, batch, factor = (150, 64, 2) if doubled else (200, 32, 1)
        atomic_write_json(folder / "lr_plan.json", {
            "step": step, "batch_size": batch, "samples": 32 * 200, "lr_factor": factor,
            "steps": (step + (ahead.step - 200) * 32 / batch).tolist(), "lr": (factor * ahead.lr).tolist()})
    answers = []
    for folder in (one, two):
        assert run_curve(folder / "progress.jsonl", "samples", "loss", None, "lr-column", None, None, 0.95, "loss",
                         None, None, True, None) == 0
        answers.append(json.loads(capsys.readouterr().out))
    assert answers[1]["final_value"] == pytest.approx(answers[0]["final_value"], rel=1e-9)
    assert answers[1]["target_step"] == pytest.approx(answers[0]["target_step"], rel=1e-9)
    assert answers[0]["budget"] == 32 * 800
    whole = read_curve(RUN, lr_col="lr")
    over_samples = read_curve(two / "progress.jsonl", x="samples")
    assert over_samples.lr.tolist() == pytest.approx(whole.lr.tolist()) and over_samples.lr_x.tolist() == pytest.approx(
        (32 * whole.lr_x).tolist())
    over_steps = read_curve(two / "progress.jsonl")
    assert "the batch changed (32, 64)" in over_steps.note and "--x samples" in over_steps.note
    assert read_curve(one / "progress.jsonl").note is None


def test_finished_runs_of_the_task_given_with_like_set_the_prior(capsys):
    """``--like``: finished runs of the same task give the prior (their shape; two or more their finals, carried to
    the run's schedule). Real curves: tinylm's token accuracy at 25 % of the one-cycle run, true 0.423: its cosine and
    step runs, finished, put it within 2 %, closer than the shipped prior (which holds every tinylm run's shape since
    the development set's accuracies joined it; 0.74 before, from the vision runs' error drops)."""
    curves = REPO / "bench" / "curves"
    args = (curves / "tinylm-onecycle.csv", "step", "accuracy", 600, "onecycle:pct=0.3", 150, 0.42, None, "accuracy",
            None, None, True, None)
    truth = float(pd.read_csv(curves / "tinylm-onecycle.csv").accuracy.iloc[-3:].mean())
    run_curve(*args)
    shipped = json.loads(capsys.readouterr().out)
    assert run_curve(*args, like=[curves / "tinylm-cosine.csv", curves / "tinylm-step.csv"]) == 0
    learnt = json.loads(capsys.readouterr().out)
    assert learnt["like_runs"] == 2 and "like_runs" not in shipped
    assert abs(learnt["final_value"] / truth - 1) < 0.02 < abs(shipped["final_value"] / truth - 1), \
        (learnt["final_value"], shipped["final_value"], truth)
    lo, hi = learnt["final_value_interval_80"]
    assert lo <= truth <= hi


def test_like_runs_logged_in_percent_carry_their_level_to_a_run_logged_as_a_fraction(tmp_path, capsys):
    """A finished run's accuracy in % and the new run's as a fraction (or the reverse) are one level: the answer is
    the one all-fraction logs give, on the run's own scale (the % runs' errors were read as 100x the run's)."""
    curves = REPO / "bench" / "curves"

    def percent(name):
        d = pd.read_csv(curves / f"{name}.csv")
        d["accuracy"] = 100 * d.accuracy
        d.to_csv(path := tmp_path / f"{name}.csv", index=False)
        return path

    def final(run, like, target):
        assert run_curve(run, "step", "accuracy", 600, "onecycle:pct=0.3", 150, target, None, "accuracy", None, None,
                         True, None, like=like) == 0
        return json.loads(capsys.readouterr().out)

    fraction = final(curves / "tinylm-onecycle.csv", [curves / "tinylm-cosine.csv", curves / "tinylm-step.csv"], 0.42)
    mixed = final(curves / "tinylm-onecycle.csv", [percent("tinylm-cosine"), curves / "tinylm-step.csv"], 0.42)
    in_percent = final(percent("tinylm-onecycle"), [curves / "tinylm-cosine.csv", curves / "tinylm-step.csv"], 42)
    assert mixed["final_value"] == pytest.approx(fraction["final_value"], rel=1e-9)
    assert in_percent["final_value"] == pytest.approx(100 * fraction["final_value"], rel=1e-6)
    assert in_percent["steps_to_target"] == pytest.approx(fraction["steps_to_target"], rel=1e-6)


def test_the_run_itself_given_with_like_is_refused(capsys):
    run = REPO / "bench" / "curves" / "tinylm-onecycle.csv"
    with pytest.raises(UserError, match=r"^--like .*tinylm-onecycle.csv: is the run predicted; give finished runs"):
        run_curve(run, "step", "accuracy", 600, None, 150, None, None, "accuracy", None, None, True, None, like=[run])


@pytest.mark.parametrize("content,said", [
    (None, "--like {f}: file not found"),
    ("epoch,accuracy\n1,0.5\n2,0.6\n3,0.7\n", "--like {f}: no column 'step'"),
    ("step,accuracy\n10,50\n20,101\n30,99\n", "--like {f}: field 'accuracy': a value leaves no positive error"),
])
def test_a_like_run_that_cannot_be_read_or_fitted_is_one_line_naming_it(tmp_path, content, said):
    f = tmp_path / "done.csv"
    if content is not None:
        f.write_text(content)
    r = cli(REPO / "bench" / "curves" / "tinylm-onecycle.csv", "--y", "accuracy", "--metric", "accuracy", "--budget",
            "600", "--like", f)
    assert r.returncode == 2 and r.stdout == "" and r.stderr.count("\n") == 1, r.stderr
    assert said.format(f=f) in r.stderr, r.stderr


def test_before_the_first_point_two_like_runs_predict_the_run(capsys):
    """``--observed-until 0``: no point of the run yet. Two or more finished runs of its task (``--like``) predict it:
    their curves carried to its schedule (real curves: charlm's cosine run from its step, constant and WSD runs, within
    3 % of where it ended, the band around it, and the step its loss got to 1.7 inside the steps band); one run is not
    enough, and that is one line."""
    curves = REPO / "bench" / "curves"
    run = pd.read_csv(curves / "charlm-cosine.csv")
    truth = float(run.loss.iloc[-3:].mean())
    reached = float(run.step[run.loss.rolling(3, center=True, min_periods=1).median() <= 1.7].iloc[0])
    like = [curves / f"charlm-{s}.csv" for s in ("step", "constant", "wsd")]
    assert run_curve(curves / "charlm-cosine.csv", "step", "loss", 800, "cosine:warmup=30", 0, 1.7, None, "loss", None,
                     None, True, None, like=like) == 0
    out = json.loads(capsys.readouterr().out)
    assert (out["model"], out["bands"], out["observed_until"], out["like_runs"]) == ("prior", "task_runs", 0.0, 3)
    assert abs(out["final_value"] / truth - 1) < 0.03
    lo, hi = out["final_value_interval_80"]
    assert lo <= truth <= hi
    assert out["interval_80"][0] <= reached <= out["interval_80"][1]
    r = cli(curves / "charlm-cosine.csv", "--budget", "800", "--observed-until", "0", "--like", like[0])
    assert r.returncode == 2 and r.stdout == "" and r.stderr.count("\n") == 1, r.stderr
    assert "no point to predict from (none with step <= 0.0)" in r.stderr and "(--like)" in r.stderr
    # no log at all (the run has not started): the same answer, FILE left out
    r = cli("--budget", "800", "--schedule", "cosine:warmup=30", "--target", "1.7", "--json", "--time-col", "wall_s",
            *(a for f in like for a in ("--like", f)))
    assert r.returncode == 0 and json.loads(r.stdout)["final_value"] == pytest.approx(out["final_value"]), r.stderr
    # the time to it at the finished runs' speed (the run has none of its own yet): their median seconds per step
    timed = json.loads(r.stdout)
    speeds = [np.ptp(d.wall_s.to_numpy()[-20:]) / np.ptp(d.step.to_numpy()[-20:]) for d in map(pd.read_csv, like)]
    assert timed["seconds_from"] == "like_runs" and "seconds_from" not in out
    assert timed["seconds_to_budget"] == pytest.approx(800 * np.median(speeds), rel=1e-9)
    for args, said in ((("--budget", "800", "--like", like[0]), "FILE: required (the run's log), unless two or more"),
                       (("--like", like[0], "--like", like[1]), "--budget: required (the run has no log"),
                       (("--like", like[0], "--like", like[1], "--budget", "800", "--schedule", "lr-column"),
                        "--schedule lr-column: the run has no log to read its LR from")):
        r = cli(*args)
        assert r.returncode == 2 and r.stdout == "" and r.stderr.count("\n") == 1 and said in r.stderr, r.stderr


def test_a_run_that_names_no_schedule_and_logs_no_lr_runs_as_its_like_runs_logged_theirs():
    """No --schedule and no LR in the run's log: the LR its --like runs logged, where they share one shape over their
    budgets (one recipe, any length: charlm's and tinylm's cosines both warm up for 5 % of theirs), stretched to its
    budget: what giving it as a SPEC predicts. Runs whose shapes differ leave it constant, and a note says so."""
    curves = REPO / "bench" / "curves"
    cosines = [curves / "charlm-cosine.csv", curves / "tinylm-cosine.csv"]
    base = ("--budget", "1000", "--target", "1.7", "--json", *(a for f in cosines for a in ("--like", f)))
    r = cli(*base)
    assert r.returncode == 0, r.stderr
    own, spec = json.loads(r.stdout), json.loads(cli(*base, "--schedule", "cosine:warmup=50").stdout)
    assert own["schedule"] == "as the --like runs' logged LR"
    assert own["final_value"] == pytest.approx(spec["final_value"], rel=0.01)
    assert own["target_step"] == pytest.approx(spec["target_step"], rel=0.05)
    r = cli("--budget", "800", "--json", "--like", cosines[0], "--like", curves / "charlm-step.csv")
    assert r.returncode == 0 and json.loads(r.stdout)["schedule"] == "constant"
    assert "the --like runs' logged LRs differ in shape: the run's is taken as constant" in r.stderr, r.stderr


def test_an_lr_column_of_zeros_is_one_line_naming_the_run_it_is_in(tmp_path):
    """An LR logged as 0 on every row (a frozen model's, a logger's mistake) gives no shape: one line naming the
    column, and for a --like run the run too (it read as 'need at least 2 points after x = 0', naming neither)."""
    d = pd.read_csv(RUN)[["step", "loss"]].assign(lr=0.0)
    d.to_csv(tmp_path / "zeros.csv", index=False)
    for args, said in (((tmp_path / "zeros.csv",), "error: --lr-col 'lr': lr column: needs finite values >= 0, one"),
                       ((RUN, "--like", tmp_path / "zeros.csv"), f"error: --like {tmp_path / 'zeros.csv'}: --lr-col")):
        r = cli(*args, "--budget", "800", "--json")
        assert r.returncode == 2 and r.stdout == "" and r.stderr.count("\n") == 1 and said in r.stderr, r.stderr


def test_an_accuracy_column_named_so_is_predicted_as_an_accuracy_without_metric(capsys, tmp_path):
    """Without --metric, charlm-step's `accuracy` column was read as a loss: every target 'already reached'. Its name
    says accuracy now, and a rising column whose name says nothing is said so on stderr."""
    args = (800, "step:400,600:0.1", 300, None, 0.95)
    assert run_curve(RUN, "step", "accuracy", *args, "accuracy", None, None, True, None) == 0
    told = json.loads(capsys.readouterr().out)
    assert run_curve(RUN, "step", "accuracy", *args, None, None, None, True, None) == 0
    out, err = capsys.readouterr()
    assert json.loads(out) == told and told["metric"] == "accuracy" and told["steps_to_target"] > 0
    assert err == "note: --metric accuracy, from the column's name 'accuracy' (give --metric to choose)\n"
    pd.read_csv(RUN).rename(columns={"accuracy": "val_metric"}).to_csv(tmp_path / "run.csv", index=False)
    assert run_curve(tmp_path / "run.csv", "step", "val_metric", *args, None, None, None, True, None) == 0
    out, err = capsys.readouterr()
    assert json.loads(out)["metric"] == "loss" and err == (
        "note: val_metric rises over the log, read as a loss (lower is better): if higher is better, give --metric "
        "accuracy\n")
    assert run_curve(RUN, "step", "loss", *args, None, None, None, True, None) == 0
    out, err = capsys.readouterr()
    assert json.loads(out)["metric"] == "loss" and err == ""


def test_an_lr_column_none_of_whose_rows_has_an_x_says_so_not_to_name_it(tmp_path):
    (tmp_path / "m.csv").write_text("epoch,lr,val_loss\n0,,2.0\n,0.1,\n1,,1.5\n,0.1,\n2,,1.2\n3,,1.1\n")
    with pytest.raises(UserError, match="no row of its LR column 'lr' has a value of the --x column"):
        run_curve(tmp_path / "m.csv", "epoch", "val_loss", 10, None, None, None, None, None, None, None, True, None)


def test_a_log_that_goes_on_past_the_budget_says_so(capsys, tmp_path):
    """A researcher's --budget 30 (epochs) against a log over steps to 1200, asked from its first point: a prediction
    over 30 steps and no word. A log past the budget now says its budget is in --x's units; one within it says nothing."""
    steps = np.arange(20, 1220, 20)
    pd.DataFrame({"step": steps, "val_acc": 95 - 70 * np.exp(-steps / 200)}).to_csv(tmp_path / "run.csv", index=False)
    for budget, noted in ((30, True), (1200, False)):
        assert run_curve(tmp_path / "run.csv", "step", "val_acc", budget, "constant", 20, 93, None, "accuracy", None,
                         None, True, None) == 0
        err = capsys.readouterr().err
        said = "note: " + f"{tmp_path / 'run.csv'} goes on to step 1200, past the --budget 30: the budget is in step"
        assert (said in err) == noted, err


def test_an_error_target_below_1_on_error_logged_in_percent_says_how_it_was_read(tmp_path):
    """--target 0.07 on an error column in % was read as 0.07 % without a word (an accuracy target is rescaled)."""
    f = tmp_path / "run.csv"
    f.write_text("step,val_error\n" + "".join(f"{s},{80 / (1 + s / 50) + 5:.3f}\n" for s in range(10, 410, 10)))
    r = cli(f, "--x", "step", "--y", "val_error", "--metric", "error", "--budget", "800", "--target", "0.07",
            "--json")
    assert "note: --target 0.07 on val_error logged in % (up to 71.667): read as 0.07 %; for 7 % give --target 7" \
        in r.stderr, r.stderr


def test_an_accuracy_target_out_of_range_names_the_option_and_its_value(tmp_path, capsys):
    """Bad input names the field: `--target -1` on an accuracy log said "FILE: field 'acc': accuracy target must be
    in 0–1 or 0–100 %, got -1", the log's column, as if the log were at fault."""
    step = np.arange(10, 101, 10)
    pd.DataFrame({"step": step, "acc": 0.9 - 0.5 / step}).to_csv(tmp_path / "acc.csv", index=False)
    for target, read in ((-1.0, "-1"), (101.0, "101")):
        with pytest.raises(UserError) as e:
            run_curve(tmp_path / "acc.csv", "step", "acc", 200, "constant", None, target, None, "accuracy", None,
                      None, True, None)
        assert str(e.value) == f"--target {read}: accuracy target must be in 0–1 or 0–100 %, got {read}"


def test_an_accuracy_target_between_1_and_10_on_a_fraction_log_is_refused_and_a_percent_is_said_how_read(
        tmp_path, capsys):
    """`--target 1.5` on an accuracy logged as fractions was read as 1.5 % and answered "already reached" without a
    word: one line now names the option and value. A percent is read as one (93: 0.93), and said so on stderr; on a
    log in %, 1.5 is in its own units and taken as given."""
    step = np.arange(10, 101, 10)
    pd.DataFrame({"step": step, "acc": 0.9 - 0.5 / step}).to_csv(tmp_path / "acc.csv", index=False)
    args = ("step", "acc", 200, "constant", None)
    with pytest.raises(UserError) as e:
        run_curve(tmp_path / "acc.csv", *args, 1.5, None, "accuracy", None, None, True, None)
    assert str(e.value).startswith("--target 1.5: an accuracy target above 1 is read as a percentage (1.5 %)")
    assert "give 0.015 for 1.5 %" in str(e.value) and "\n" not in str(e.value)
    run_curve(tmp_path / "acc.csv", *args, 89, None, "accuracy", None, None, True, None)
    out = capsys.readouterr()
    assert json.loads(out.out)["target"] == pytest.approx(0.89)
    assert "note: --target 89 read as 0.89: acc is logged as a fraction" in out.err
    pd.DataFrame({"step": step, "acc": 90 - 50 / step}).to_csv(tmp_path / "pct.csv", index=False)
    assert run_curve(tmp_path / "pct.csv", *args, 1.5, None, "accuracy", None, None, True, None) == 0
    assert json.loads(capsys.readouterr().out)["target"] == 1.5


def test_a_small_eval_sets_100_percent_is_predicted_and_said(tmp_path, capsys):
    """A Trainer's log of a real run (a 13-16-3 MLP on wine, 45 held-out samples, cosine over 300 steps) whose
    accuracy is 100 % from step 110: exit 2 ("accuracy values must leave a positive error") for any question asked
    after it. Now the answer, and a note that such points are fitted at a stand-in; a --like run at 100 % too."""
    acc = [0.7556, 0.9111, 0.9333, 0.9111, 0.9556, 0.9556, 0.9778, 0.9778, 0.9778, 0.9778] + [1.0] * 20
    hist = [{"step": 10 * (i + 1), "epoch": (i + 1) / 9, "eval_accuracy": a} for i, a in enumerate(acc)]
    (tmp_path / "trainer_state.json").write_text(json.dumps({"log_history": hist, "max_steps": 300}))
    code = run_curve(tmp_path / "trainer_state.json", "step", "eval_accuracy", None, "cosine", 150, 93, None, None,
                     None, None, True, None)
    said = capsys.readouterr()
    out = json.loads(said.out)
    assert code == 0 and out["steps_to_target"] == 0 and out["target"] == 0.93 and out["p_reach"] == 1
    assert "5 points of eval_accuracy at 1 leave no error to model" in said.err, said.err
    (tmp_path / "done.csv").write_text("step,eval_accuracy\n" + "".join(f"{10 * (i + 1)},{a}\n" for i, a in enumerate(acc)))
    assert run_curve(tmp_path / "trainer_state.json", "step", "eval_accuracy", None, "cosine", 150, 93, None, None,
                     None, None, True, None, like=[tmp_path / "done.csv"]) == 0


def test_a_finished_run_that_never_got_to_the_target_is_one_line_and_exit_3(tmp_path, capsys):
    """The run is at its budget (a real examples/stdlib_lm.py run's held-out perplexity, 3 epochs): a target its log
    never got to is unreachable, said from the log, not from a prediction."""
    (tmp_path / "run.csv").write_text("step,val_perplexity\n36,11.492010554694465\n72,9.692209025946859\n"
                                      "108,9.55401025218286\n")
    assert run_curve(tmp_path / "run.csv", "step", "val_perplexity", 108, "cosine:warmup=20", None, 9, None, "loss",
                     None, None, True, None) == 3
    said = capsys.readouterr()
    assert json.loads(said.out)["steps_to_target"] is None
    assert said.err == ("target 9 is unreachable: the run is at its budget (step 108), and the lowest its log got to "
                        "is 9.623 (a 3-point running median)\n"), said.err


def test_schedule_milestones_past_the_budget_are_said(capsys):
    """``--schedule step:4000,6000:0.1`` with ``--budget 800`` (milestones in other units than the budget, a step
    schedule beside an epoch budget or the reverse) was read without a word as a constant LR."""
    assert run_curve(RUN, "step", "loss", 800, "step:4000,6000:0.1", 300, None, 0.9, "loss", None, None, True, None) == 0
    err = capsys.readouterr().err
    assert "note: --schedule step:4000,6000:0.1: 4000, 6000 past the --budget 800 (in step)" in err, err
    assert run_curve(RUN, "step", "loss", 800, "step:400,600:0.1", 300, None, 0.9, "loss", None, None, True, None) == 0
    assert "past the --budget" not in capsys.readouterr().err


def test_a_bad_schedule_or_budget_is_the_one_line_on_stderr_before_the_logs_notes(tmp_path, capsys):
    """A log with a loss of 0 (its stand-in note) and a bad --schedule or --budget: stderr had the note, then the
    error, two lines; the options are checked before the log is read."""
    p = tmp_path / "zero.csv"
    p.write_text("step,loss\n100,2.0\n200,1.5\n300,1.2\n400,1.0\n500,0\n")
    for budget, spec, said in ((800.0, "cosine:warmup=abc", "--schedule: schedule 'cosine:warmup=abc'"),
                               (-5.0, None, "--budget: must be > 0, got -5")):
        with pytest.raises(UserError) as e:
            run_curve(p, "step", "loss", budget, spec, None, None, None, "loss", None, None, True, None)
        assert str(e.value).startswith(said), e.value
        assert capsys.readouterr().err == ""


def test_a_batch_scaled_lr_without_its_factor_is_not_read_as_the_schedule(capsys):
    """The demo's mlp-elastic job (its real records to 20 000 samples, ``tests/perf/data``): the batch grew 64 -> 256
    at 14 976 samples and its LR with it, 0.02 -> 0.08 (linear scaling), with no ``lr_factor`` in the records. Read as
    the schedule, 4x the LR was 4x the progress per sample: at 16 000 samples the final loss came out 0.034 [0.019,
    0.061] where the run ended at 0.20 and the service's refit, which refuses such an LR (``logged_schedule``), said
    0.22. Now the LR is left out, as there, with a note."""
    log = REPO / "tests" / "perf" / "data" / "demo-mlp-elastic-progress.jsonl"
    c = read_curve(log, x="samples")
    assert c.lr is None and "lr_factor" in c.note
    assert run_curve(log, "samples", "loss", 96000, None, 16000, None, None, None, None, None, True, None) == 0
    out = json.loads(capsys.readouterr().out)
    lo, hi = out["final_value_interval_80"]
    assert lo <= 0.20 <= hi and out["schedule"] != "lr-column"
