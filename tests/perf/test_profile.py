import numpy as np
import pytest

from dlsched.errors import UserError
from dlsched.perf.profile import (MeasuredSpeed, even_placement, h100_throughput, pollux_app, read_numeric_csv,
                                  seed_log)
from dlsched.policy.base import ThroughputModel


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


def test_even_placement():
    assert even_placement(6, 4) == (2, 2, 1, 1) and even_placement(4, 1) == (4,)
    with pytest.raises(ValueError):
        even_placement(2, 3)


def test_measured_speed_reads_the_traces(data_dir):
    app = pollux_app("cifar10", data_dir / "pollux" / "traces")
    m = MeasuredSpeed(app)
    assert isinstance(m, ThroughputModel)
    p = app.placements
    row = p[(p.placement == 22) & (p.local_bsz == 64)]
    step, sync = m.step_time((2, 2), 64)
    assert step == pytest.approx(row.step_time.mean()) and sync == pytest.approx(row.sync_time.mean())
    assert m.step_time((1, 2), 64) == m.step_time((2, 1), 64)          # rotations are the same ring
    assert m.throughput(4, 2, 256) == pytest.approx(256 / step)
    assert np.isfinite(m.step_time((4,) * 16, 1000)[0])                  # outside the hull: model fallback
    assert m.efficiency(128) == pytest.approx(1.0)
    assert m.efficiency(2048) < m.at_progress(30000).efficiency(2048) <= 1.0


def test_step_times_is_the_artifact_lookup(data_dir):
    import pandas as pd
    from scipy.interpolate import LinearNDInterpolator

    from dlsched.perf.profile import StepTimes, canonical_placement, packed_placement
    from dlsched.sim.traces import load_app

    assert canonical_placement((2, 0, 1, 3)) == (1, 3, 2) and packed_placement(6, 4) == (4, 2)
    app = pollux_app("cifar10", data_dir / "pollux" / "traces")
    st = StepTimes(app)
    # An unmeasured placement: scipy's LinearNDInterpolator over the placement means plus scalability rows.
    xs, ys = ["num_nodes", "num_replicas", "local_bsz"], ["step_time", "sync_time"]
    df = pd.concat([app.placements.groupby(xs)[xs + ys].mean(), app.scalability], ignore_index=True)
    want = LinearNDInterpolator(df[xs].to_numpy(float), df[ys].to_numpy(float))([5, 20, 100])[0]
    assert st.step_time((4, 4, 4, 4, 4), 100) == pytest.approx(tuple(want), rel=1e-12)
    with pytest.raises(ValueError, match="outside the measured"):
        st.step_time((2, 2), 1e6)
    # One implementation: the simulator's app and the policies' MeasuredSpeed answer the same.
    assert load_app("cifar10").step_time((3, 1), 64) == MeasuredSpeed(app).step_time((1, 3), 64)
