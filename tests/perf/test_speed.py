import numpy as np
import pytest

from dlsched.perf.efficiency import GradientNoise
from dlsched.perf.profile import POLLUX_APPS, h100_throughput, optimus_table2, pollux_app
from dlsched.perf.speed import (AllReduceSpeedModel, ComputeTime, NetworkTime, OptimusAsyncSpeed, OptimusSyncSpeed,
                                StepTimeParams, fit_compute, fit_optimus_async, fit_optimus_sync, fit_step_time,
                                profiling_rows)
from dlsched.policy.base import ThroughputModel


def test_optimus_sync_nnls_recovers_theta_exactly():
    true = OptimusSyncSpeed((1.02, 2.78, 4.92, 0.0, 0.02), 64)
    p, w = np.meshgrid([1, 2, 3, 4], [1, 2, 4, 6, 8])
    p, w = p.ravel(), w.ravel()
    fit = fit_optimus_sync(p, w, true.speed(p, w), 64)
    assert np.allclose(fit.theta, true.theta, atol=1e-6)
    assert min(fit.theta) >= 0


def test_optimus_async_nnls_recovers_theta_exactly():
    true = OptimusAsyncSpeed((2.83, 3.92, 0.0, 0.11))
    p = np.array([1, 1, 2, 2, 4, 3])
    w = np.array([1, 4, 2, 6, 8, 3])
    fit = fit_optimus_async(p, w, true.speed(p, w))
    assert np.allclose(fit.theta, true.theta, atol=1e-6)


def test_table2_sync_coefficients_load(data_dir):
    t = optimus_table2(data_dir / "tables" / "optimus2018_tables.csv")
    assert t["sync"] == (1.02, 2.78, 4.92, 0.0, 0.02) and len(t["async"]) == 4


def test_compute_is_not_proportional_to_batch_on_launch_bound_h100(data_dir):
    # shared/data/h100/throughput.csv: CIFAR ResNet-20 step time is flat from batch 16 to 512.
    h = h100_throughput(data_dir / "h100" / "throughput.csv")
    g = h[(h.model == "resnet20") & (h.precision == "fp32")]
    c = fit_compute(g.batch_size, g.step_time)
    rel = np.abs(c(g.batch_size.to_numpy()) / g.step_time.to_numpy() - 1)
    assert np.median(rel) < 0.06
    assert c(16) > 0.5 * c(512)          # launch floor: 32x the batch is far less than 32x the time
    assert c(2048) > 1.5 * c(512)        # but compute-bound above the knee


def test_fit_step_time_recovers_synthetic_model():
    # inside the fitted family: compute a + b·m^c, both links with latency + per-replica terms, inter-node with
    # enough replica counts (>= 4) to free its ring-bandwidth term too
    true = StepTimeParams(ComputeTime(0.0, 0.004, 2e-4, 1.2), NetworkTime(0.001, (0.003, 0.0, 0.002), (0.02, 0.03, 0.004)), 2.0)
    r = np.array([1, 1, 1, 2, 4, 4, 8, 8, 16, 16, 2, 4, 32, 3])
    n = np.array([1, 1, 1, 1, 1, 2, 2, 4, 4, 8, 2, 1, 8, 1])
    m = np.array([16, 64, 256, 32, 64, 128, 32, 256, 64, 128, 512, 8, 16, 100])
    s = true.step_time(r, n, m)
    fit = fit_step_time(r, n, m, s, s - true.compute(m))
    assert fit.gamma == pytest.approx(2.0, rel=1e-3)
    assert fit.compute.exponent == pytest.approx(1.2, rel=1e-3)
    assert np.allclose(fit.step_time(r, n, m), s, rtol=5e-3)
    r2, n2, m2 = np.array([64, 12, 2]), np.array([16, 3, 1]), np.array([48, 300, 700])  # not fitted on
    assert np.allclose(fit.step_time(r2, n2, m2), true.step_time(r2, n2, m2), rtol=1e-3)


def test_fit_step_time_without_sync_uses_single_replica_steps_as_compute():
    true = StepTimeParams(ComputeTime(0.0, 0.01, 1e-3), NetworkTime(0.0, (0.02, 0.0, 0.005), (0.0, 0.0, 0.0)), 1.0)
    r, n, m = np.array([1, 1, 1, 2, 4, 4]), np.ones(6), np.array([16, 64, 256, 64, 32, 128])
    fit = fit_step_time(r, n, m, true.step_time(r, n, m))
    assert np.allclose(fit.step_time(r, n, m), true.step_time(r, n, m), rtol=1e-3)
    with pytest.raises(ValueError, match="single-replica"):
        fit_step_time(r[3:], n[3:], m[3:], true.step_time(r, n, m)[3:])


def test_fit_step_time_with_gradient_accumulation_rows():
    # Pollux: each accumulation micro-batch adds one compute time and no communication
    true = StepTimeParams(ComputeTime(0.0, 0.01, 1e-3, 1.0), NetworkTime(0.0, (0.02, 0.0, 0.002), (0.08, 0.0, 0.004)), 1.5)
    r = np.array([1, 1, 4, 4, 8, 8, 16, 2, 4])
    n = np.array([1, 1, 1, 2, 2, 4, 4, 1, 1])
    m = np.array([32, 128, 64, 32, 128, 64, 32, 128, 32])
    acc = np.array([0, 1, 0, 2, 0, 1, 3, 0, 1])
    s = true.step_time(r, n, m, acc)
    assert s[1] == pytest.approx(2 * true.step_time(1, 1, 128))            # one replica: no network, 2 passes
    sync = s - (acc + 1) * true.compute(m)
    fit = fit_step_time(r, n, m, s, sync, accum_steps=acc)
    assert np.allclose(fit.step_time(r, n, m, acc), s, rtol=1e-3)
    assert np.allclose(fit.compute(m), true.compute(m), rtol=1e-3)
    with pytest.raises(ValueError, match="accum_steps"):
        fit_step_time(r, n, m, s, sync, accum_steps=-acc - 1)


def test_compute_time_default_is_the_hard_hinge_and_sharpness_smooths_it():
    hinge = ComputeTime(0.01, 0.002, 1e-4)
    m = np.array([1.0, 50, 80, 100, 1000])
    assert np.allclose(hinge(m), np.maximum(0.01, 0.002 + 1e-4 * m))
    smooth = ComputeTime(0.01, 0.0, 1e-4, 1.0, 4.0)
    assert smooth(100) == pytest.approx(0.01 * 2 ** 0.25)          # at the knee the power mean is 2^(1/p) x
    assert smooth(1) == pytest.approx(0.01, rel=1e-4) and smooth(10_000) == pytest.approx(1.0, rel=1e-4)


def test_fit_compute_recovers_a_smooth_launch_bound_knee():
    true = ComputeTime(0.007, 0.0, 2e-5, 1.0, 3.0)
    m = np.array([16, 64, 256, 512, 1024, 2048])
    fit = fit_compute(m, true(m))
    grid = np.geomspace(16, 2048, 30)
    assert np.allclose(fit(grid), true(grid), rtol=1e-3)


def test_six_planned_profiling_runs_predict_every_other_pollux_step(data_dir):
    """Issue 2's few-sample case: fit on the 6 rows of ``PROFILING_PLAN``, predict all the other rows.
    The traces scatter by 2.5-6 % between repeats of one configuration (see bench/prediction_accuracy.py),
    so the guard is the measured 7.0 % median (per app 6.0-10.1 %) plus a margin."""
    errs = {}
    for app in POLLUX_APPS:
        d = pollux_app(app, data_dir / "pollux" / "traces").step_samples()
        rows = profiling_rows(d)
        assert len(rows) == 6
        tr, te = d.loc[rows], d.drop(index=rows)
        p = fit_step_time(tr.num_replicas, tr.num_nodes, tr.local_bsz, tr.step_time, tr.sync_time)
        pred = p.step_time(te.num_replicas.to_numpy(), te.num_nodes.to_numpy(), te.local_bsz.to_numpy())
        errs[app] = float(np.median(np.abs(pred / te.step_time.to_numpy() - 1)))
    assert np.median(list(errs.values())) < 0.08, errs
    assert max(errs.values()) < 0.13, errs


def test_pollux_speed_model_predicts_held_out_half(data_dir):
    """Fit on a random half of each app's scalability+placements rows, predict the other half."""
    medians = {}
    for app in POLLUX_APPS:
        d = pollux_app(app, data_dir / "pollux" / "traces").step_samples()
        idx = np.random.default_rng(0).permutation(len(d))
        tr, te = d.iloc[idx[: len(d) // 2]], d.iloc[idx[len(d) // 2:]]
        p = fit_step_time(tr.num_replicas, tr.num_nodes, tr.local_bsz, tr.step_time, tr.sync_time)
        pred = p.step_time(te.num_replicas.to_numpy(), te.num_nodes.to_numpy(), te.local_bsz.to_numpy())
        medians[app] = float(np.median(np.abs(pred / te.step_time.to_numpy() - 1)))
    print("median relative step-time error on the held-out half:", {k: round(v, 3) for k, v in medians.items()})
    # Measured 3.4-6.2 % (median 4.4 %); repeats of one configuration scatter by 2.5-6 %, so 8 % is a guard.
    assert all(v < 0.08 for v in medians.values()), medians


def test_allreduce_model_is_a_throughput_model_with_gpu_types():
    base = StepTimeParams(ComputeTime(0.0, 0.01, 1e-3), NetworkTime(0.0, (0.01, 0.0, 0.0), (0.05, 0.0, 0.0)), 1.0)
    fast = base.with_compute(ComputeTime(0.0, 0.005, 2.5e-4))
    m = AllReduceSpeedModel({"V100": base, "H100": fast}, "V100", GradientNoise(1.0, 4.0), base_batch=64, max_local_batch=256)
    assert isinstance(m, ThroughputModel)
    assert m.throughput(4, 1, 256, "H100") > m.throughput(4, 1, 256, "V100") == m.throughput(4, 1, 256)
    assert m.throughput(4, 2, 256) < m.throughput(4, 1, 256)  # crossing nodes costs
    assert m.throughput(1, 1, 512) == 0.0                       # over the per-GPU memory limit
    assert m.efficiency(64) == pytest.approx(1.0) and m.efficiency(256) < 1.0
    assert m.goodput(4, 1, 256) == pytest.approx(m.throughput(4, 1, 256) * m.efficiency(256))
    with pytest.raises(ValueError, match="K80"):
        m.throughput(1, 1, 64, "K80")


def test_pollux_model_with_h100_profile(data_dir):
    from dlsched.perf.speed import fit_h100_compute, fit_pollux_app, with_gpu_type

    app = pollux_app("imagenet", data_dir / "pollux" / "traces")
    m = fit_pollux_app(app)
    h = fit_h100_compute(h100_throughput(data_dir / "h100" / "throughput.csv"), "resnet50", "imagenet")
    m = with_gpu_type(m, "H100", h)
    assert m.throughput(8, 2, 800, "H100") > m.throughput(8, 2, 800, "T4") > 0
    assert m.throughput(16, 4, 3200) > m.throughput(4, 1, 800)   # scales out
    assert m.efficiency(app.base_batch) == pytest.approx(1.0) and m.efficiency(12800) < 0.5
    # Measured 1-GPU H100 ResNet-50 step at batch 128 is 52.6 ms.
    assert h(128) == pytest.approx(0.0526, rel=0.05)
