from rich.console import Console

from dlsched.display import Column, make_table, readable_numbers


def render(table, width: int) -> str:
    con = Console(width=width, record=True, file=open("/dev/null", "w"))
    con.print(table)
    return con.export_text()


def test_a_column_dropped_to_fit_is_named_under_the_table_with_how_to_see_it():
    cols = [Column("ID", "right"), Column("STATE"), Column("REASON", drop_rank=1)]
    rows = [[1, "failed", "RuntimeError: CUDA out of memory while allocating the optimizer state"]]
    out = render(make_table(cols, rows, width=40, show_all="--wide shows all"), 40)
    assert "failed" in out and "CUDA" not in out
    assert "not shown at 40 columns: REASON (--wide shows all)" in " ".join(out.split())
    assert all(len(line) <= 40 for line in out.splitlines())
    wide = render(make_table(cols, rows, width=40, wide=True), 200)
    assert "CUDA" in wide and "not shown" not in wide


def test_an_empty_dropped_column_is_not_mentioned():
    cols = [Column("ID", "right"), Column("STATE"), Column("REASON", drop_rank=1)]
    rows = [[1, "running", "-"], [2, "queued", "a" * 60]]
    assert "not shown" in render(make_table(cols, rows, width=40), 40)
    assert "not shown" not in render(make_table(cols, rows[:1], width=12), 12)


def test_json_output_shows_every_time_of_a_job_and_its_prediction_as_iso_8601():
    """``dlsched show``: the prediction's target_time, forecast_time and policy_finish were raw POSIX seconds."""
    from dlsched.display import with_iso_times

    shown = with_iso_times({"submit_time": 0, "prediction": {"forecast_time": 60, "policy_finish": 120.5,
                                                             "loss_fit": {"target_time": 3600, "target_step": 400,
                                                                          "target_time_80": [3000, 4200],
                                                                          "target_step_80": [350, 480]}}})
    p = shown["prediction"]
    assert p["loss_fit"]["target_time_80"] == ["1970-01-01T00:50:00+00:00", "1970-01-01T01:10:00+00:00"]
    assert p["loss_fit"]["target_step_80"] == [350, 480]   # steps, not times
    assert shown["submit_time"] == "1970-01-01T00:00:00+00:00" and p["forecast_time"] == "1970-01-01T00:01:00+00:00"
    assert p["policy_finish"].startswith("1970-01-01T00:02:00") and p["loss_fit"]["target_time"] == "1970-01-01T01:00:00+00:00"
    assert p["loss_fit"]["target_step"] == 400


def test_readable_numbers_keep_four_significant_digits_and_every_whole_unit():
    detail = {"mean_loss": 0.9764092975012859, "rate": 14918.039354368873, "samples": 1437.0, "lr": 1.5e-05,
              "flotillas": [{"rate": 123.456, "members": {"m": 1}}], "ok": True, "gap": -0.000123456}
    assert readable_numbers(detail) == {"mean_loss": 0.9764, "rate": 14918.0, "samples": 1437.0, "lr": 1.5e-05,
                                        "flotillas": [{"rate": 123.5, "members": {"m": 1}}], "ok": True,
                                        "gap": -0.0001235}
