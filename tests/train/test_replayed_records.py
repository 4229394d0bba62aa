"""A restart's replayed evaluations and epoch ends are recorded once; an evaluation after a resize is new."""
from dlsched.train.replayed_records import ReplayedRecords


def step(n: int) -> dict:
    return {"step": n, "epoch": 0, "loss": 1.0}


def evaluation(n: int) -> dict:
    return {"event": "metrics", "step": n, "epoch": 0, "metrics": {"val_accuracy": 0.9}}


def test_a_replayed_evaluation_is_dropped_and_a_later_one_at_the_same_step_kept():
    r = ReplayedRecords()
    assert all(r.keep(rec) for rec in [step(5), step(6), evaluation(6), {"event": "epoch_end", "epoch": 0}, step(7)])
    r.restored(4)                                                     # the checkpoint of step 4: 5 to 7 again
    assert [r.keep(rec) for rec in [step(5), step(6), evaluation(6), {"event": "epoch_end", "epoch": 0}, step(7)]] \
        == [True, True, False, False, True]
    assert r.keep(evaluation(6))       # past the replay (a resize's group evaluating again): a new evaluation


def test_a_resize_without_a_restore_keeps_an_evaluation_at_a_step_already_evaluated_at():
    r = ReplayedRecords()
    assert r.keep(evaluation(6)) and r.keep(evaluation(6))


def test_a_replay_that_does_not_evaluate_at_the_checkpoints_step_drops_nothing_after_it():
    """The checkpoint of step 6 was written after the evaluation at 6: the restored group does not repeat it."""
    r = ReplayedRecords()
    r.keep(evaluation(6))
    r.restored(6)
    assert r.keep(step(7)) and r.keep(evaluation(6))


def test_a_resumed_run_knows_the_evaluations_the_earlier_run_recorded():
    r = ReplayedRecords.from_log([step(1), step(2), evaluation(2), step(3)], restored_step=1)
    assert [r.keep(rec) for rec in [step(2), evaluation(2), evaluation(2)]] == [True, False, True]
