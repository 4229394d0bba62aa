"""The Pollux trace model (``perf.pollux``): the artifact's step-time lookup and per-epoch gradient noise."""
import pytest

from dlsched.perf.pollux import StepTimes, canonical_placement, even_placement, load_app, packed_placement
from dlsched.perf.profile import pollux_app


def test_even_placement():
    assert even_placement(6, 4) == (2, 2, 1, 1) and even_placement(4, 1) == (4,)
    with pytest.raises(ValueError):
        even_placement(2, 3)


def test_measured_placements_are_read_off_the_traces(data_dir):
    app = pollux_app("cifar10", data_dir / "pollux" / "traces")
    st = StepTimes(app)
    p = app.placements
    row = p[(p.placement == 22) & (p.local_bsz == 64)]
    step, sync = st.step_time((2, 2), 64)
    assert step == pytest.approx(row.step_time.mean()) and sync == pytest.approx(row.sync_time.mean())
    assert st.step_time((1, 2), 64) == st.step_time((2, 1), 64)          # rotations are the same ring


def test_step_times_is_the_artifact_lookup(data_dir):
    import pandas as pd
    from scipy.interpolate import LinearNDInterpolator

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
    # The simulator's app runs on the same lookup.
    assert load_app("cifar10").step_time((3, 1), 64) == st.step_time((1, 3), 64)


def test_cifar10_efficiency_grows_during_training():
    # shared/data/pollux/traces/cifar10/validation-*.csv
    app = load_app("cifar10")
    assert app.init_batch_size == 128 and app.max_batch_size == 4096 and app.max_epochs == 100
    assert app.efficiency(128, 0) == pytest.approx(1.0)
    early, late = app.efficiency(2048, 0), app.efficiency(2048, 90)
    assert 0 < early < 0.3 < 0.9 < late <= 1.0
    # Between validated sizes the noise is linearly interpolated.
    (lo_sqr, lo_var), (hi_sqr, hi_var) = app.grad_stats(1024, 5), app.grad_stats(2048, 5)
    assert app.grad_stats(1536, 5) == pytest.approx(((lo_sqr + hi_sqr) / 2, (lo_var + hi_var) / 2))


def test_batch_outside_validated_range_is_rejected():
    with pytest.raises(ValueError, match="outside validated"):
        load_app("cifar10").gain(64, 0)
