"""``perf.curve_readers``: the logs people have, as they write them (QA regressions)."""
import json

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
    with pytest.raises(UserError, match="train/epoch_loss, validation/epoch_loss"):
        read_curve(tmp_path, y="epoch_loss")
