"""service/finish_times.py: the stated target a job list shows, read off the latest prediction row."""
from __future__ import annotations

import json
from datetime import datetime

from dlsched.commands.service import job_rows
from dlsched.service.finish_times import stated_target

METRIC = {"metric": "val_accuracy", "kind": "accuracy", "target": 0.93, "final": 0.95, "final_80": [0.9, 0.96],
          "target_step": 4200.0, "target_step_80": [3900.0, 4800.0], "target_chance": 0.8, "points": 12,
          "target_time": 1_800_000_000.0, "target_time_80": [1_799_999_000.0, 1_800_002_000.0]}


def test_the_stated_target_is_the_metrics_else_the_losss_else_none():
    assert stated_target(None) is None and stated_target({"loss_fit": None}) is None
    assert stated_target({"loss_fit": json.dumps({"beta0": 1.0})}) is None            # a fit, no target stated
    loss = {"target_loss": 1.8, "target_step": None, "target_time": None, "target_chance": 0.03}
    assert stated_target({"loss_fit": json.dumps(loss)}) == {"metric": "loss", "value": 1.8, "step": None,
                                                             "time": None, "chance": 0.03, "step_80": None,
                                                             "time_80": None, "reached": False, "final": None,
                                                             "beyond": False}
    both = {"loss_fit": loss | {"metric_target": METRIC}}                           # a row read back as a dict
    assert stated_target(both) == {"metric": "val_accuracy", "value": 0.93, "step": 4200.0, "time": 1_800_000_000.0,
                                   "chance": 0.8, "step_80": [3900.0, 4800.0],
                                   "time_80": [1_799_999_000.0, 1_800_002_000.0], "reached": False, "final": 0.95,
                                   "beyond": False}


def test_status_shows_when_a_running_job_reaches_its_target_and_the_chance():
    job = {"id": 3, "name": "lm", "state": "running", "num_gpus": 1, "batch_size": 32, "fraction_done": 0.4,
           "last_loss": 2.0, "samples_per_s": 100.0, "predicted_finish": None}
    at = stated_target({"loss_fit": {"metric_target": METRIC}})
    clock = lambda t: datetime.fromtimestamp(t).strftime("%H:%M:%S")   # noqa: E731  (the reader's local time)
    assert job_rows([job | {"target": at}])[0][11] == \
        f"val_accuracy 0.93: {clock(1_800_000_000)} [{clock(1_799_999_000)}–{clock(1_800_002_000)}], chance 80 %"
    # not training: the step, and its band in steps
    assert job_rows([job | {"target": at | {"time": None, "time_80": None}}])[0][11] == \
        "val_accuracy 0.93: step 4,200 [3,900–4,800], chance 80 %"
    assert job_rows([job | {"target": at | {"time": None, "step_80": None}}])[0][11] == \
        "val_accuracy 0.93: step 4,200, chance 80 %"   # a target the log already crossed has no band
    assert job_rows([job | {"target": at | {"step": None, "time": None, "chance": 0.03}}])[0][11] == \
        "val_accuracy 0.93: not by the budget, chance 3 %"
    assert job_rows([job | {"target": None}])[0][11] == "-"
    # once the log got there: when (where, while it waits), and no chance
    assert job_rows([job | {"target": at | {"reached": True}}])[0][11] == \
        f"val_accuracy 0.93: reached {clock(1_800_000_000)}"
    assert job_rows([job | {"target": at | {"reached": True, "time": None}}])[0][11] == \
        "val_accuracy 0.93: reached step 4,200"


def test_status_says_a_target_past_the_predicted_final_value_is_at_the_budget_only_if_the_run_does_better():
    """A digits run predicted to end at 0.925 showed `val_accuracy 0.93: 20:40:35 (35 %)`: the budget's time, read as
    when it gets there. ``predict curve`` says such a target is reached by the budget only if the run beats its
    prediction; the refit stores that (``target_beyond_final``) and `status` says it, with the predicted final."""
    job = {"id": 1, "name": "digits", "state": "running", "num_gpus": 1, "batch_size": 32, "fraction_done": 0.8,
           "last_loss": 0.5, "samples_per_s": 50.0, "predicted_finish": None}
    short = METRIC | {"final": 0.9245, "final_80": [0.917, 0.937], "target_step": 900.0, "target_step_80": None,
                      "target_chance": 0.35, "target_time": 1_800_000_000.0, "target_time_80": None,
                      "target_beyond_final": True}
    at = stated_target({"loss_fit": {"metric_target": short}})
    assert at["beyond"] and at["final"] == 0.9245
    clock = datetime.fromtimestamp(1_800_000_000).strftime("%H:%M:%S")
    assert job_rows([job | {"target": at}])[0][11] == \
        f"val_accuracy 0.93: predicted to end at 0.9245; by the budget, {clock}, only if it does better, chance 35 %"
    # a row stored before the flag: as before
    assert not stated_target({"loss_fit": {"metric_target": METRIC}})["beyond"]


def test_the_refit_flags_a_target_past_the_predicted_final_value():
    """``service.metric_target.predict_target`` on a real run's evaluations (the digits MLP of the report above, its
    first 11 of 20 epochs, warm-up + cosine; it ended at 0.922): 0.93 lies past its predicted final (0.919), 0.915 is
    ahead of the log and crossed before the budget, 0.99 is out of reach."""
    import numpy as np

    from dlsched.perf.schedule import parse_schedule
    from dlsched.service.metric_target import predict_target
    from dlsched.spec import MetricTarget

    x = 45.0 * np.arange(1, 12)
    acc = np.array([0.117, 0.425, 0.733, 0.853, 0.858, 0.850, 0.878, 0.886, 0.900, 0.906, 0.911])
    sched = parse_schedule("cosine:warmup=90", 900.0)
    def at(value: float) -> dict:
        return predict_target(MetricTarget(metric="val_accuracy", value=value, kind="accuracy"), x, acc, sched,
                              "scratch")

    past = at(0.93)
    assert past["target_beyond_final"] and past["target_step"] == 900.0 and past["final"] < 0.93
    ahead = at(0.915)
    assert not ahead["target_beyond_final"] and ahead["target_step"] < 900.0 and ahead["final"] > 0.915
    assert not at(0.99)["target_beyond_final"] and at(0.99)["target_step"] is None   # "not by the budget"
    assert at(93.0)["target_beyond_final"]   # a target in % against fractions: read on the data's scale


def test_a_live_job_past_its_predicted_finish_is_overdue_never_a_negative_time_left():
    """`status` showed ``LEFT -0s`` (and -23s) for a job still training past its forecast finish."""
    job = {"id": 3, "name": "lm", "state": "running", "num_gpus": 1, "batch_size": 32, "fraction_done": 0.9,
           "last_loss": 2.0, "samples_per_s": 100.0}
    now = 1_800_000_000.0
    left = [job_rows([job | {"predicted_finish": now + d}], now)[0][9] for d in (95.0, 0.2, -0.2, -23.0)]
    assert left == ["1m 35s", "overdue", "overdue", "overdue"]
    # every sample trained, still running (its last evaluation, checkpoint, exit): `overdue` read as a late job
    assert job_rows([job | {"fraction_done": 1.0, "predicted_finish": now - 5}], now)[0][9] == "ending"
    assert job_rows([job | {"state": "finished", "predicted_finish": now - 5}], now)[0][9] == "-"
    # at 100 % it is saving its last checkpoint and exiting, not late: it showed overdue for that moment
    assert job_rows([job | {"fraction_done": 1.0, "predicted_finish": now - 2}], now)[0][9] == "ending"
    assert job_rows([job | {"fraction_done": 1.0, "predicted_finish": None}], now)[0][9] == "ending"


def test_status_says_a_stated_target_is_not_predicted_yet_and_show_says_why(client, service):
    """A job stating `--target val_accuracy=0.93` showed "-" in `dlsched status`'s TARGET until the target could be
    predicted, though its newest row says why it cannot yet (``metric_target_missing``), as the dashboard does: the
    API lists it as ``target_pending`` (``target`` stays None: no step a reader could take for "not by the
    budget"), before the first refit too, and beside a target loss that is predicted."""
    from dlsched.spec import JobSpec

    store = service.store   # never placed on 2 x 2 slots: its rows are the ones written here
    jid = store.submit(JobSpec(name="evals", command=["python", "t.py"], gpus=64, prediction={
        "target_loss": 1.8, "target": {"metric": "val_accuracy", "value": 0.93, "kind": "accuracy"}}))
    try:
        listed = client.get("/jobs").json()[0]
        assert listed["target"] is None and listed["target_pending"] == {"metric": "val_accuracy", "value": 0.93,
                                                                          "why": None}
        assert job_rows([listed])[0][11] == "val_accuracy 0.93: no prediction yet"
        why = "no point and fewer than two finished runs of the task"
        store.add_prediction(jid, 1.0, 0.1, 25600.0, None, None, {"metric_target_missing": {
            "metric": "val_accuracy", "target": 0.93, "why": why}})
        shown = client.get(f"/jobs/{jid}").json()
        assert shown["target"] is None and shown["target_pending"]["why"] == why
        assert job_rows([client.get("/jobs").json()[0]])[0][11] == "val_accuracy 0.93: no prediction yet"
        store.add_prediction(jid, 2.0, 0.1, 25600.0, None, None, {
            "target_loss": 1.8, "target_step": None, "target_time": None, "target_chance": 0.03,
            "metric_target_missing": {"metric": "val_accuracy", "target": 0.93, "why": why}})
        assert job_rows([client.get("/jobs").json()[0]])[0][11] == \
            "loss 1.8: not by the budget, chance 3 %; val_accuracy 0.93: no prediction yet"
        store.add_prediction(jid, 3.0, 0.1, 25600.0, None, None, {"metric_target": METRIC})
        listed = client.get("/jobs").json()[0]
        assert listed["target_pending"] is None and listed["target"]["step"] == 4200.0
    finally:
        store.request_cancel(jid)


def test_status_says_whether_an_ended_job_reached_its_stated_target(client, service):
    """The digits run of the tests above ended at 0.922 short of its 0.93, and `status` said "-" in TARGET once it
    finished: the API's job list carried the target of live jobs only. An ended job now says whether it got there
    (where it ran to its budget, the value it ended at: its last refit's, on every point)."""
    import time

    from dlsched.spec import JobSpec

    store = service.store   # never placed on 2 x 2 slots: its rows are the ones written here
    jid = store.submit(JobSpec(name="digits", command=["python", "t.py"], gpus=64, prediction={
        "target": {"metric": "val_accuracy", "value": 0.93, "kind": "accuracy"}}))
    store.add_prediction(jid, 1.0, 0.6, 25600.0, None, None, {"metric_target": METRIC | {
        "final": 0.9245, "target_step": None, "target_step_80": None, "target_chance": 0.0, "target_time": None,
        "target_time_80": None}})
    store.request_cancel(jid)
    deadline = time.monotonic() + 60
    while (listed := client.get("/jobs").json()[0])["state"] != "cancelled":
        assert time.monotonic() < deadline, listed["state"]
        time.sleep(0.1)
    assert listed["target"]["reached"] is False and listed["target_pending"] is None
    assert job_rows([listed])[0][11] == "val_accuracy 0.93: not reached"   # stopped before its budget: no end value
    finished = listed | {"state": "finished", "fraction_done": 1.0, "target": listed["target"] | {"final": 0.9222}}
    assert job_rows([finished])[0][11] == "val_accuracy 0.93: not reached, ended at 0.9222"
    there = finished | {"target": finished["target"] | {"reached": True, "step": 360.0, "time": None}}
    assert job_rows([there])[0][11] == "val_accuracy 0.93: reached step 360"
    assert job_rows([finished | {"target": None}])[0][11] == "-"


def test_a_targets_time_is_on_the_clock_of_the_finish_shown():
    """`status` showed "finish 14:41" beside "target ... 14:46": the finish was the policy forecast's (more GPUs
    later), the target's time the rate the job trains at now. Each time is moved to the same share of the way from
    the refit to the finish shown."""
    from dlsched.service.finish_times import stated_targets

    class Job:   # a job that states no reported-metric target: only its target loss
        spec = type("Spec", (), {"prediction": None})()

    t0, at_rate, forecast = 1_000.0, 2_000.0, 1_500.0   # the forecast finishes twice as fast as today's rate
    loss = {"target_loss": 1.8, "target_step": 900.0, "target_time": 2_000.0, "target_chance": 0.5,
            "target_step_80": [800.0, 900.0], "target_time_80": [1_800.0, 2_000.0]}
    row = {"time": t0, "predicted_finish": at_rate, "loss_fit": json.dumps(loss)}
    target, _ = stated_targets(Job(), row, forecast)
    assert (target["time"], target["time_80"]) == (1_500.0, [1_400.0, 1_500.0])   # at the budget: the finish itself
    assert stated_targets(Job(), row, at_rate)[0]["time"] == 2_000.0   # no forecast: the finish at today's rate
    assert stated_targets(Job(), row, None)[0]["time"] == 2_000.0
    reached = loss | {"target_reached": True, "target_time": 900.0}   # a fact, when the log got there
    assert stated_targets(Job(), row | {"loss_fit": json.dumps(reached)}, forecast)[0]["time"] == 900.0
