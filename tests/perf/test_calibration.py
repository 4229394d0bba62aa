"""perf/calibration.py: the bands a cluster's own errors give (``Calibration.with_own_errors``), and each metric kind's."""
import dataclasses
import json
import math

import numpy as np
import pytest

from dlsched.perf.calibration import OWN_ERRORS_MIN, from_dict, load_calibration, quantile_band
from dlsched.perf.curve_predict import predict_curve
from dlsched.perf.schedule import parse_schedule


def test_own_errors_replace_a_fractions_band_only_once_there_are_enough_of_them():
    shipped = load_calibration()
    few = {"fit": {0.1: [0.5] * (OWN_ERRORS_MIN - 1) + [math.nan, math.inf]}}   # non-finite errors do not count
    assert shipped.with_own_errors(few) == shipped
    errors = [0.05 * i - 0.2 for i in range(OWN_ERRORS_MIN)]
    # 0.33: not a calibrated fraction
    own = shipped.with_own_errors({"fit": {0.25: errors, 0.5: errors[:-1], 0.33: errors}, "carried": {0.5: errors}})
    assert own.final_band(0.25) == quantile_band(errors) == (min(errors), max(errors))
    assert own.final_band(0.5) == shipped.final_band(0.5) and own.final_band(0.1) == shipped.final_band(0.1)
    assert own.steps == shipped.steps and own.reach == shipped.reach and own.fits == shipped.fits
    assert own.final_centre(0.25) == pytest.approx(sorted(errors)[OWN_ERRORS_MIN // 2])
    # each table its own errors: a level's bands are not the fit alone's
    assert own.table("carried").final_band(0.5) == quantile_band(errors) != shipped.table("carried").final_band(0.5)
    assert own.table("carried").final_band(0.25) == shipped.table("carried").final_band(0.25)
    assert own.table("levelled") == shipped.table("levelled")


def test_a_level_table_is_named_by_what_the_table_holds():
    shipped = load_calibration()
    assert (shipped.level_table(True), shipped.level_table(False)) == ("carried", "levelled")
    assert shipped.table("carried") is shipped.carried and shipped.table("fit") is shipped
    bare = dataclasses.replace(shipped, levelled=None, carried=None)
    assert bare.level_table(True) == "fit" and bare.table("carried") is bare


def test_own_steps_errors_replace_a_stated_targets_band_and_shift_and_nothing_else():
    shipped = load_calibration()
    errors = [0.1 * i - 0.3 for i in range(OWN_ERRORS_MIN)]
    assert shipped.with_own_errors({}, {"fit": {0.25: errors[:-1]}}) == shipped   # 8: not yet
    own = shipped.with_own_errors({}, {"fit": {0.25: errors}, "carried": {0.5: errors}})
    assert own.steps_band(0.25, stated=True) == quantile_band(errors)
    assert own.steps_shift(0.25, stated=True) == pytest.approx(errors[OWN_ERRORS_MIN // 2])
    assert own.steps_band(0.1, stated=True) == shipped.steps_band(0.1, stated=True)
    assert own.table("carried").steps_band(0.5, stated=True) == quantile_band(errors)
    assert (own.steps, own.final, own.steps_median) == (shipped.steps, shipped.final, shipped.steps_median)
    # a table written before stated targets had a band of their own: the others' elsewhere
    old = dataclasses.replace(shipped, stated_steps=None, stated_steps_median=None)
    mine = old.with_own_errors({}, {"fit": {0.25: errors}})
    assert mine.steps_band(0.25, stated=True) == quantile_band(errors)
    assert mine.steps_band(0.5, stated=True) == shipped.steps_band(0.5)


def test_an_accuracy_or_error_gets_its_kinds_bands_and_a_loss_the_loss_ones():
    shipped = load_calibration()
    assert shipped.error_kind is not None   # calibration.json holds both kinds (bench/prediction_accuracy.py)
    for metric in ("loss", None):
        assert shipped.for_metric(metric) is shipped
    errors = shipped.for_metric("accuracy")
    assert errors == shipped.for_metric("error") and errors.final == shipped.error_kind.final != shipped.final
    # the shape fits, prior and one-point bands are the whole table's; the bands are the kind's
    assert (errors.fits, errors.prior, errors.one_point) == (shipped.fits, shipped.prior, shipped.one_point)
    assert errors.table("carried") is shipped.error_kind.carried and errors.for_metric("accuracy") is errors
    assert from_dict(json.loads(shipped.to_json())) == shipped
    # a table written before the kinds had tables of their own serves every metric
    assert dataclasses.replace(shipped, error_kind=None).for_metric("accuracy").final == shipped.final


def test_a_prediction_of_an_accuracy_uses_the_error_bands():
    x = np.arange(10, 401, 10.0)
    acc = 0.98 - 0.5 * (x / 10) ** -0.7
    s = parse_schedule("cosine", 1000)
    shipped = load_calibration()
    p = predict_curve(x, acc, s, metric="accuracy", prior=None)
    q = predict_curve(x, acc, s, metric="accuracy", prior=None, calibration=dataclasses.replace(shipped, error_kind=None))
    r = predict_curve(x, acc, s, metric="accuracy", prior=None, calibration=shipped.for_metric("accuracy"))
    assert p.final_value_interval_80 == r.final_value_interval_80 != q.final_value_interval_80


def test_the_error_tables_crossings_are_moved_as_the_loss_curves_are():
    shipped = load_calibration()
    errors = shipped.for_metric("accuracy")
    assert (errors.steps_median, errors.stated_steps_median) == (shipped.steps_median, shipped.stated_steps_median)
    assert errors.table("carried").steps_median == shipped.carried.steps_median
    moved = dataclasses.replace(shipped, steps_median=(0.5,) * 4).with_shifts_of(shipped)
    assert moved.steps_median == shipped.steps_median and moved.final == shipped.final
