"""``perf.curve_readers``: the logs people have, as they write them (QA regressions)."""
import json
from pathlib import Path

import numpy as np
import pytest

from dlsched.errors import UserError
from dlsched.perf.curve_readers import read_curve, seconds_per_x


def test_a_time_column_of_iso_8601_timestamps_reads_as_seconds(tmp_path):
    rows = ["step,loss,ts"] + [f"{s},{2 - s / 100},2026-11-26T10:00:{s // 10:02d}Z" for s in range(10, 110, 10)]
    (tmp_path / "log.csv").write_text("\n".join(rows))
    c = read_curve(tmp_path / "log.csv", time_col="ts")
    assert np.diff(c.time) == pytest.approx(np.ones(9)) and seconds_per_x(c) == pytest.approx(0.1)
    (tmp_path / "bad.csv").write_text("step,loss,ts\n1,2,yesterday\n")
    with pytest.raises(UserError, match="line 2, field 'ts'.*'yesterday'"):
        read_curve(tmp_path / "bad.csv", time_col="ts")


def test_a_non_numeric_x_cell_is_named_by_line_and_field_and_an_empty_one_is_a_missing_point(tmp_path):
    (tmp_path / "log.csv").write_text("step,loss\n10,2.0\n,1.8\nepoch-3,1.5\n40,1.2\n")
    with pytest.raises(UserError, match="line 4, field 'step': expected a number, got 'epoch-3'"):
        read_curve(tmp_path / "log.csv")
    (tmp_path / "ok.csv").write_text("step,loss\n10,2.0\n,1.8\n40,1.2\n")
    assert list(read_curve(tmp_path / "ok.csv").x) == [10, 40]


def test_inf_cells_are_missing_points_like_nan(tmp_path):
    # AMP's skipped steps log inf as often as nan; one of them used to reject the whole curve
    (tmp_path / "log.csv").write_text("step,loss\n10,2.0\n20,inf\n30,nan\n40,\n50,-inf\n60,1.5\n")
    c = read_curve(tmp_path / "log.csv")
    assert list(c.x) == [10, 60] and list(c.y) == [2.0, 1.5]
    # so is an inf LR cell: it was kept, and lr-column refused the whole log ("needs finite values >= 0")
    (tmp_path / "lr.csv").write_text("step,loss,lr\n10,2.0,0.1\n20,1.8,inf\n30,1.7,0.1\ninf,1.6,0.1\n")
    c = read_curve(tmp_path / "lr.csv")
    assert list(c.lr_x) == [10, 30] and list(c.lr) == [0.1, 0.1]


def test_a_missing_cell_is_read_in_any_case_as_predict_reads_it(tmp_path):
    # `predict` (Optimus) skipped NONE/NULL/Infinity rows while `predict curve` refused the same file
    (tmp_path / "log.csv").write_text("step,loss,time\n10,2.0,0\n20,NONE,5\n30,Infinity,NULL\n40,1.5,20\n")
    c = read_curve(tmp_path / "log.csv", time_col="time")
    assert list(c.x) == [10, 40] and list(c.y) == [2.0, 1.5]


def test_the_budget_a_log_names_is_only_used_in_its_own_units(tmp_path):
    hist = [{"step": s, "epoch": s / 100, "loss": 2 - s / 1000} for s in range(10, 210, 10)]
    (tmp_path / "trainer_state.json").write_text(json.dumps({"log_history": hist, "max_steps": 600,
                                                             "num_train_epochs": 6}))
    assert read_curve(tmp_path / "trainer_state.json").budget == 600
    assert read_curve(tmp_path / "trainer_state.json", x="epoch").budget == 6    # was max_steps, in epochs
    recs = [{"step": s, "time": 1e9 + s, "loss": 2 - s / 1000, "budget": 600} for s in range(1, 20)]
    (tmp_path / "progress.jsonl").write_text("\n".join(map(json.dumps, recs)))
    assert read_curve(tmp_path / "progress.jsonl").budget == 600
    assert read_curve(tmp_path / "progress.jsonl", x="time").budget is None


def test_a_live_progress_file_s_torn_last_line_is_skipped_quietly(tmp_path, caplog):
    # a running job's last line is usually half-written; its warning made exit 2/3 two lines on stderr
    recs = [json.dumps({"step": s, "loss": 2 - s / 100}) for s in range(1, 10)]
    (tmp_path / "progress.jsonl").write_text("\n".join(recs) + '\n{"step": 10, "lo')
    with caplog.at_level("WARNING"):
        c = read_curve(tmp_path / "progress.jsonl")
    assert len(c.x) == 9 and not caplog.records


def test_tensorboard_runs_in_subfolders_are_columns_run_slash_tag(tmp_path):
    # Keras' TensorBoard callback writes logs/train and logs/validation, each with an 'epoch_loss' tag: the
    # folder read "no scalar events"
    pytest.importorskip("tensorboard")
    from torch.utils.tensorboard import SummaryWriter

    for run, off in (("train", 0.0), ("validation", 0.1)):
        with SummaryWriter(str(tmp_path / run)) as w:
            for e in range(10):
                w.add_scalar("epoch_loss", 2.0 / (1 + e) + off, e)
    val = read_curve(tmp_path, y="validation/epoch_loss")
    assert val.y == pytest.approx([2.0 / (1 + e) + 0.1 for e in range(10)])
    assert read_curve(tmp_path / "train", y="epoch_loss").y[0] == pytest.approx(2.0)
    # its step is the epoch from 0: the first point is after one epoch (``predict curve`` reads x + 1)
    assert val.epochs_from_zero == "Keras' TensorBoard callback" and val.x[0] == 0
    with pytest.raises(UserError, match="train/epoch_loss, validation/epoch_loss"):
        read_curve(tmp_path, y="epoch_loss")


def test_a_job_folders_epoch_is_the_one_it_trains_in_and_its_budget_its_epochs(tmp_path):
    # dlsched train's make_job records: 1797 samples an epoch at batch 32 (57 steps), 8 epochs. --x epoch read the
    # last record of epoch 0, after one epoch of training, as an evaluation before any (not fitted), every later
    # point an epoch early, and asked for --budget
    recs, samples = [], 0
    for step in range(1, 457):
        samples = min(samples + 32, 1797 * ((step - 1) // 57 + 1))
        recs.append({"time": step * 0.01, "step": step, "epoch": (step - 1) // 57, "samples": samples,
                     "loss": 2.3 - step / 1000, "batch_size": 32, "lr": 0.02, "total_samples": 8 * 1797})
        if step % 57 == 0:   # each epoch's mean loss: asked for as --y mean_loss, it was "no column"
            recs.append({"event": "epoch_end", "epoch": step // 57 - 1, "mean_loss": 2.0 - step / 1000,
                         "time": step * 0.01})
    (tmp_path / "progress.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    c = read_curve(tmp_path, x="epoch")
    assert c.epochs_from_zero == "dlsched's progress.jsonl" and c.x[0] == 0 and c.budget == 8
    assert c.y[0] == pytest.approx(2.3 - 57 / 1000)   # the last step of epoch 0
    epochs = read_curve(tmp_path, x="epoch", y="mean_loss")
    assert list(epochs.x) == list(range(8)) and epochs.y[0] == pytest.approx(2.0 - 57 / 1000)
    assert list(read_curve(tmp_path, y="mean_loss").x) == list(range(57, 457, 57))   # the step each epoch ended at
    assert read_curve(tmp_path).epochs_from_zero is None   # over steps: as logged
    # a script's records say their epochs
    (tmp_path / "progress.jsonl").write_text("".join(json.dumps({**r, "epochs": 8}) + "\n" for r in recs[:61]))
    assert read_curve(tmp_path, x="epoch").budget == 8


def test_a_csv_whose_logger_wrote_its_header_again_after_a_restart_is_read_through_it(tmp_path):
    # a script that opens its log in append mode and writes the header at every start: the resumed run's rows
    # follow a second header line, which was "line 4, field 'step': expected a number, got 'step'" (exit 2)
    (tmp_path / "log.csv").write_text("step,acc\n10,0.5\n20,0.6\nstep,acc\n20,0.61\n30,0.7\n40,x\n")
    with pytest.raises(UserError, match="line 7, field 'acc'"):   # later lines keep their numbers
        read_curve(tmp_path / "log.csv", y="acc")
    (tmp_path / "log.csv").write_text("step,acc\n10,0.5\n20,0.6\nstep,acc\n20,0.61\n30,0.7\n")
    c = read_curve(tmp_path / "log.csv", y="acc")
    assert list(c.x) == [10, 20, 30] and c.y == pytest.approx([0.5, 0.61, 0.7])   # the resumed run's step 20


def test_a_resumed_runs_speed_is_read_within_each_run_never_across_its_stop(tmp_path):
    # a run at 1 s a step crashed at step 400 and resumed an hour later from its step-280 checkpoint: its newest
    # 20 points span the stop, and the speed was 10.8 s a step (seconds_to_budget 7 553 for 700 steps)
    pytest.importorskip("tensorboard")
    from torch.utils.tensorboard import SummaryWriter

    t0, t1 = 1.7e9, 1.7e9 + 400 + 3600 - 280
    with SummaryWriter(str(tmp_path / "tb")) as w:
        for s in range(20, 420, 20):
            w.add_scalar("val/acc", 0.5, s, walltime=t0 + s)
    with SummaryWriter(str(tmp_path / "tb"), filename_suffix=".resumed") as w:
        for s in range(300, 520, 20):
            w.add_scalar("val/acc", 0.6, s, walltime=t1 + s)
    c = read_curve(tmp_path / "tb", y="val/acc")
    assert c.y[c.x >= 300] == pytest.approx(0.6) and c.y[c.x < 300] == pytest.approx(0.5)   # the newest writing
    assert c.time[c.x == 300][0] == pytest.approx(t1 + 300) and seconds_per_x(c) == pytest.approx(1.0)
    # a CSV the resumed run appended to: its x goes back where it starts
    rows = [(s, t0 + s) for s in range(20, 420, 20)] + [(s, t1 + s) for s in range(300, 520, 20)]
    (tmp_path / "log.csv").write_text("step,acc,t\n" + "".join(f"{s},0.5,{t}\n" for s, t in rows))
    assert seconds_per_x(read_curve(tmp_path / "log.csv", y="acc", time_col="t")) == pytest.approx(1.0)
    # a job folder's records name their coordinator run
    recs = [{"step": s, "loss": 1.0, "time": t0 + s, "run": "a"} for s in range(1, 41)] + \
        [{"step": s, "loss": 1.0, "time": t1 + s, "run": "b"} for s in range(41, 51)]
    (tmp_path / "progress.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    assert seconds_per_x(read_curve(tmp_path / "progress.jsonl")) == pytest.approx(1.0)


def test_a_run_folder_is_read_as_its_framework_leaves_it(tmp_path):
    """Ultralytics' run folder (results.csv, space-padded, the LR in lr/pgN groups) and a Hugging Face output folder
    holding only checkpoints: the newest checkpoint's trainer_state.json (checkpoint-1000 after checkpoint-300, not
    by name), whose log_history is the whole run's."""
    yolo = tmp_path / "runs" / "detect" / "train"
    yolo.mkdir(parents=True)
    head = ["epoch", "metrics/mAP50-95(B)", "lr/pg0", "lr/pg1", "lr/pg2"]
    rows = [[e, 0.1 + 0.02 * e, 0.01, 0.01 * min(e / 3, 1), 0.01 * min(e / 3, 1)] for e in range(1, 11)]
    (yolo / "results.csv").write_text("\n".join(",".join(f"{v:>22}" for v in r) for r in [head] + rows) + "\n")
    c = read_curve(yolo, x="epoch", y="metrics/mAP50-95(B)")
    assert len(c.x) == 10 and c.lr_name == "lr/pg1"
    hf = tmp_path / "out"
    for step in (300, 1000):
        (hf / f"checkpoint-{step}").mkdir(parents=True)
        log = [{"step": s, "eval_loss": 2 - s / 1000, "learning_rate": 1e-4} for s in range(100, step + 1, 100)]
        (hf / f"checkpoint-{step}" / "trainer_state.json").write_text(json.dumps({"log_history": log, "max_steps": 1000}))
    c = read_curve(hf, y="eval_loss")
    assert c.x[-1] == 1000 and len(c.x) == 10 and c.budget == 1000
    with pytest.raises(UserError, match="no progress.jsonl.*results.csv, checkpoint-N/trainer_state.json"):
        read_curve(tmp_path / "runs")


def test_a_running_jobs_folder_reads_its_runtimes_lr_plan_as_the_lr_still_to_come(tmp_path):
    """``predict curve DIR/progress.jsonl`` of a job a quarter through its one-cycle run: the logged LR stops at
    the last step, so lr-column held the peak LR to the end. The runtime's lr_plan.json beside it (the LR its
    schedulers will set, at the batch it trains at) gives the rest. Real curve: charlm-onecycle, 200 of 800 steps."""
    import pandas as pd

    from dlsched.paths import REPO_ROOT
    from dlsched.train.files import atomic_write_json

    d = pd.read_csv(REPO_ROOT / "bench" / "curves" / "charlm-onecycle.csv")
    seen, ahead = d[d.step <= 200], d[d.step > 200]
    with open(tmp_path / "progress.jsonl", "w") as f:
        for r in seen.itertuples():
            f.write(json.dumps({"time": 1000 + r.wall_s, "step": int(r.step), "samples": 32 * int(r.step),
                                "total_samples": 32 * 800, "batch_size": 32, "loss": r.loss, "lr": r.lr}) + "\n")
    c = read_curve(tmp_path / "progress.jsonl")
    assert c.budget == 800 and c.lr_x[-1] == 200                          # no plan: the LR ends where the log does
    atomic_write_json(tmp_path / "lr_plan.json", {"step": 200, "batch_size": 32, "steps": ahead.step.tolist(),
                                                  "lr": ahead.lr.tolist()})
    planned = read_curve(tmp_path / "progress.jsonl")
    whole = read_curve(REPO_ROOT / "bench" / "curves" / "charlm-onecycle.csv", lr_col="lr")
    assert planned.lr_x.tolist() == whole.lr_x.tolist() and planned.lr.tolist() == whole.lr.tolist()
    assert planned.x.tolist() == seen.step.tolist()                      # the plan adds no metric points
    atomic_write_json(tmp_path / "lr_plan.json", {"step": 200, "batch_size": 64, "steps": ahead.step.tolist(),
                                                  "lr": ahead.lr.tolist()})
    assert read_curve(tmp_path / "progress.jsonl").lr_x[-1] == 200         # made at another batch: not this run's


def test_lightnings_lr_rows_are_read_at_the_epoch_their_step_falls_in_and_its_newest_version_is_the_run(tmp_path):
    """LearningRateMonitor writes ``lr-SGD`` on rows with a step and no epoch: over ``--x epoch`` the LR column had no
    row ("no LR values (name the column with --lr-col)", where it was named). A real run (charlm-step, 40 steps an
    epoch) written as Lightning does: validation at each epoch's last step, the LR every 10 steps."""
    import pandas as pd

    run = pd.read_csv(Path(__file__).resolve().parents[2] / "bench" / "curves" / "charlm-step.csv")
    val = run[run.step % 40 == 0]
    rows = [{"epoch": s // 40 - 1, "step": s - 1, "val_loss": v} for s, v in zip(val.step, val.loss)]
    rows += [{"step": s - 1, "lr-SGD": lr} for s, lr in zip(run.step, run.lr)]
    logs = tmp_path / "lightning_logs"
    for version, frame in (("version_2", pd.DataFrame(rows[:3])), ("version_10", pd.DataFrame(rows))):
        (logs / version).mkdir(parents=True)
        frame.sort_values("step").to_csv(logs / version / "metrics.csv", index=False)
    c = read_curve(logs, x="epoch", y="val_loss")   # the logger's folder: version_10, the newest, not version_2
    assert len(c.x) == len(val) and c.lr_name == "lr-SGD" and c.epochs_from_zero == "Lightning's metrics.csv"
    assert c.lr_x == pytest.approx(run.step / 40 - 1) and c.lr == pytest.approx(run.lr)


def test_a_trainers_epoch_budget_is_where_max_steps_falls(tmp_path):
    """The Trainer stops at max_steps and rounds num_train_epochs up: 800 steps of 39 an epoch are 20.5 epochs."""
    hist = [{"step": s, "epoch": s / 39, "eval_loss": 2 - s / 1000} for s in range(50, 450, 50)]
    (tmp_path / "trainer_state.json").write_text(json.dumps({"log_history": hist, "max_steps": 800,
                                                             "num_train_epochs": 21}))
    assert read_curve(tmp_path / "trainer_state.json", x="epoch", y="eval_loss").budget == pytest.approx(800 / 39)


def test_a_text_log_that_prints_its_code_first_has_the_columns_of_its_curve_lines(tmp_path):
    """modded-nanogpt's logs start with the script's source and nvidia-smi: their `nc = 10` and `CUDA Version: 12.4`
    were columns a wrong --y listed beside the curve's."""
    code = ["import torch", "nc = 10", "bs = 64  # batch", "| NVIDIA-SMI 550.54  Driver Version: 550.54  CUDA Version: 12.4 |"]
    curve = [f"step:{s}/800 val_loss:{2 - s / 1000:.4f} train_time:{s * 30}ms step_avg:30.00ms" for s in range(0, 801, 100)]
    (tmp_path / "log.txt").write_text("\n".join(code + curve))
    with pytest.raises(UserError, match=r"have: step, val_loss, train_time, step_avg\)$"):
        read_curve(tmp_path / "log.txt", y="nope")
    assert read_curve(tmp_path / "log.txt", y="val_loss").budget == 800
    with pytest.raises(UserError, match="no column 'epoch' for --x .*nc, bs"):   # a wrong --x: every name there is
        read_curve(tmp_path / "log.txt", x="epoch", y="val_loss")


def test_a_csv_whose_epoch_0_is_an_evaluation_before_training_is_read_as_logged(tmp_path):
    """A user's CSV with ``epoch`` beside ``step`` and an evaluation before training at step 0, epoch 0 was taken
    for Lightning's metrics.csv and read x + 1: the pre-training value became "1 finished epoch", every epoch one
    late, and the output named a logger that never wrote it. Found predicting a digits MLP's own log. The real run
    (charlm-step, 40 steps an epoch) logged per epoch at step 40 * epoch; Lightning's layout still reads from 0."""
    import pandas as pd

    run = pd.read_csv(Path(__file__).resolve().parents[2] / "bench" / "curves" / "charlm-step.csv")
    val = run[run.step % 40 == 0]
    own = pd.DataFrame({"step": [0, *val.step], "epoch": [0, *(val.step // 40)], "val_loss": [4.2, *val.loss]})
    own.to_csv(tmp_path / "own.csv", index=False)
    c = read_curve(tmp_path / "own.csv", x="epoch", y="val_loss")
    assert c.epochs_from_zero is None and c.x[0] == 0 and c.x[-1] == val.step.max() // 40
    lightning = pd.DataFrame({"step": val.step - 1, "epoch": val.step // 40 - 1, "val_loss": val.loss})
    lightning.to_csv(tmp_path / "metrics.csv", index=False)
    assert read_curve(tmp_path / "metrics.csv", x="epoch", y="val_loss").epochs_from_zero == "Lightning's metrics.csv"


def test_a_finished_trainers_epoch_budget_is_its_last_epoch_exactly(tmp_path):
    """A finished run read over epochs: the Trainer logs epoch = step / steps per epoch (300/43 at its last step,
    digits at batch 32) and the budget where max_steps falls came out 1 ulp below it, so ``predict curve --x epoch``
    of a finished run refused its own budget ("6.97674 is before the last observed epoch (6.97674)")."""
    hist = []
    for s in range(10, 301, 10):
        hist.append({"step": s, "epoch": s / 43, "loss": 2.3 * (1 + s / 50) ** -0.5, "learning_rate": 0.05})
        if s % 20 == 0:
            hist.append({"step": s, "epoch": s / 43, "eval_accuracy": 0.97 - 0.9 * (1 + s / 20) ** -1.2})
    path = tmp_path / "checkpoint-300" / "trainer_state.json"
    path.parent.mkdir()
    path.write_text(json.dumps({"log_history": hist, "max_steps": 300, "num_train_epochs": 7, "global_step": 300}))
    c = read_curve(tmp_path, x="epoch", y="eval_accuracy")
    assert c.budget == c.x[-1] == 300 / 43


def test_a_lightning_save_dir_is_read_through_its_logger_folder(tmp_path):
    """``CSVLogger(save_dir)`` writes ``save_dir/lightning_logs/version_N/metrics.csv``: the folder a script names was
    "no progress.jsonl, ... or TensorBoard events inside". Now its newest version, and two experiment names there are
    one line naming them."""
    rows = "epoch,lr-SGD,step,train_loss_step,val_acc\n,0.1,4,,\n0,,4,2.3,\n0,,21,,0.81\n,0.1,25,,\n1,,25,1.1,\n1,,43,,0.93\n"
    for version in ("version_0", "version_1"):
        (tmp_path / "lightning_logs" / version).mkdir(parents=True)
        (tmp_path / "lightning_logs" / version / "hparams.yaml").write_text("{}\n")
        (tmp_path / "lightning_logs" / version / "metrics.csv").write_text(rows if version == "version_1" else rows[:60])
    c = read_curve(tmp_path, x="step", y="val_acc")
    assert c.x.tolist() == [21, 43] and c.lr_name == "lr-SGD"
    (tmp_path / "other" / "version_0").mkdir(parents=True)
    (tmp_path / "other" / "version_0" / "metrics.csv").write_text(rows)
    with pytest.raises(UserError, match=r"Lightning logs of 2 experiments \(lightning_logs, other\): give one"):
        read_curve(tmp_path, x="step", y="val_acc")


def test_printed_dicts_and_json_lines_in_a_text_log_are_read(tmp_path):
    """Two logs people keep that were "no :::MLLOG records or name:value pairs": the Hugging Face Trainer's printed
    logs (stdout of a real run, a 30-32-2 MLP on breast cancer, transformers 5: numbers quoted; 4.x prints them
    bare) and a JSON line per epoch (DeiT's and MAE's log.txt, here a real digits run's first epochs)."""
    (tmp_path / "train.log").write_text(
        "***** Running training *****\n"
        "{'loss': '0.7413', 'grad_norm': '0.6376', 'learning_rate': '0.015', 'epoch': '0.7143'}\n"
        "{'loss': '0.6566', 'grad_norm': '0.7302', 'learning_rate': '0.03167', 'epoch': '1.429'}\n"
        "{'eval_loss': '0.5904', 'eval_accuracy': '0.7972', 'eval_runtime': '0.0384', 'eval_samples_per_second': "
        "'3721', 'eval_steps_per_second': '468.4', 'epoch': '1.429'}\n"
        "{'loss': 0.5219, 'grad_norm': 0.6114, 'learning_rate': 0.04833, 'epoch': 2.143}\n"
        "{'loss': 0.3709, 'grad_norm': 0.494, 'learning_rate': 0.04833, 'epoch': 2.857}\n"
        "{'eval_loss': 0.3488, 'eval_accuracy': 0.9091, 'eval_runtime': 0.0544, 'epoch': 2.857}\n")
    c = read_curve(tmp_path / "train.log", x="epoch", y="eval_accuracy")
    assert c.x.tolist() == [1.429, 2.857] and c.y.tolist() == [0.7972, 0.9091] and c.lr_name == "learning_rate"
    assert c.lr.tolist() == [0.015, 0.03167, 0.04833, 0.04833]
    (tmp_path / "log.txt").write_text(
        '{"train_lr": 0.06666666666666667, "train_loss": 1.9583053345030004, "test_loss": 0.9237185716629028, '
        '"test_acc1": 81.33333325386047, "epoch": 0, "n_parameters": 2410}\n'
        '{"train_lr": 0.13333333333333333, "train_loss": 0.39509372717954894, "test_loss": 0.20080913603305817, '
        '"test_acc1": 93.77777576446533, "epoch": 1, "n_parameters": 2410}\n')
    c = read_curve(tmp_path / "log.txt", x="epoch", y="test_acc1", lr_col="train_lr")
    assert c.x.tolist() == [0, 1] and c.y == pytest.approx([81.3333, 93.7778], abs=1e-4) and len(c.lr) == 2


def test_a_log_whose_x_goes_back_is_said_so(tmp_path):
    """A second run appended to the first's CSV with its step counter begun again overwrote the first run's rows
    with the same steps, without a word: the curve became the first run's tail spliced onto the second's start.
    Where x first goes back is now a note (a resumed run, which logs its steps after a checkpoint again, is read as
    before: its rows win)."""
    first = [(s, 2.0 / (1 + s / 50)) for s in range(20, 301, 20)]
    again = [(s, 1.9 / (1 + s / 60)) for s in range(20, 121, 20)]
    (tmp_path / "log.csv").write_text("step,val_loss\n" + "".join(f"{s},{v}\n" for s, v in first + again))
    c = read_curve(tmp_path / "log.csv", y="val_loss")
    assert c.note.startswith("step goes back once, first at line 17 (300, then 20)"), c.note
    assert c.y[c.x == 20][0] == pytest.approx(1.9 / (1 + 20 / 60))   # the last row per step, as before
    (tmp_path / "one.csv").write_text("step,val_loss\n" + "".join(f"{s},{v}\n" for s, v in first))
    assert read_curve(tmp_path / "one.csv", y="val_loss").note is None


def test_a_running_jobs_epoch_in_progress_is_not_read_as_finished(tmp_path):
    """A job folder's records over ``--x epoch``, the job 1.25 epochs in (examples/stdlib_lm.py, 36 steps an epoch,
    read at step 45): its newest record, mid-way through epoch 1, was read as 2 finished epochs ("observed to epoch
    2 of 3"). Epoch 1 has no ``epoch_end`` yet: its records wait for it; a finished job's last epoch is read."""
    recs = [{"time": 10.0 + s, "step": s, "epoch": (s - 1) // 36, "samples": 32 * s, "total_samples": 3423,
             "batch_size": 32, "epochs": 3, "loss": 3.6 - s / 40, "lr": 0.002} for s in range(1, 46)]
    recs.insert(36, {"event": "epoch_end", "epoch": 0, "mean_loss": 3.45, "time": 46.5})
    (tmp_path / "progress.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    c = read_curve(tmp_path, x="epoch")
    assert c.x.tolist() == [0] and c.y[0] == pytest.approx(3.6 - 36 / 40) and c.budget == 3
    assert read_curve(tmp_path).x[-1] == 45   # over steps: every record
    recs = recs[:37] + [{**r, "epoch": 1} for r in recs[37:]]
    recs.append({"event": "epoch_end", "epoch": 1, "mean_loss": 2.5, "time": 60.0})
    (tmp_path / "progress.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    assert read_curve(tmp_path, x="epoch").x.tolist() == [0, 1]
