import pytest

from dlsched.errors import UserError
from dlsched.perf.profile import h100_throughput, pollux_app, read_numeric_csv, seed_log


def test_pollux_app_tables(data_dir):
    app = pollux_app("cifar10", data_dir / "pollux" / "traces")
    assert app.base_batch == 128 and app.max_batch == 4096 and app.max_epochs == 100
    p = app.placements
    row = p[p.placement == 22].iloc[0]
    assert (row.num_nodes, row.num_replicas) == (2, 4)  # "22" = 2 nodes x 2 GPUs
    curve = app.loss_curve()
    assert len(curve) == 100 and curve.loss.iloc[0] > curve.loss.iloc[-1] > 0  # error = 1 - accuracy falls
    assert pollux_app("yolov3", data_dir / "pollux" / "traces").max_local_batch == 8


def test_other_loaders(data_dir):
    h = h100_throughput(data_dir / "h100" / "throughput.csv")
    assert set(h.gpu_type) == {"H100"} and (h.step_time > 0).all()
    log = seed_log(path=data_dir / "gpu-training" / "resnet50-p100-v2_per_epoch_from_log.csv")
    assert len(log) == 70 and log.steps_cum_assumed.iloc[0] == 390


def test_bad_csv_cell_is_named(tmp_path):
    f = tmp_path / "t.csv"
    f.write_text("a,b\n1,2\n3,x\n")
    with pytest.raises(UserError, match=r"t.csv: line 3, field 'b': expected a number, got 'x'"):
        read_numeric_csv(f, ["a", "b"])
    with pytest.raises(UserError, match="missing column 'c'"):
        read_numeric_csv(f, ["c"])


