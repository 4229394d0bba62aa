"""Human lines for progress records."""
from dlsched.train.progress_lines import event_line, step_line


def test_an_epoch_end_without_a_mean_loss_says_no_placeholder():
    assert event_line({"event": "epoch_end", "epoch": 2, "mean_loss": 0.25}, None).endswith("epoch 2 done: mean loss 0.25")
    line = event_line({"event": "epoch_end", "epoch": 2}, None)    # a dlsched.torch script's epoch
    assert line.endswith("epoch 2 done") and "-" not in line.split("epoch 2")[-1], line


def test_a_resume_names_the_step_it_restored_or_says_it_started_over():
    # the coordinator's record says restored_step; the line printed "resumed from step None"
    assert event_line({"event": "resumed", "new_generation": 2, "restored_step": 10,
                       "checkpoint": "/j/ckpt/step-10"}, None) == "resumed from the checkpoint of step 10 (generation 2)"
    assert event_line({"event": "resumed", "new_generation": 1, "restored_step": 0, "checkpoint": None},
                      None) == "restarted from the beginning (no checkpoint) (generation 1)"
    assert event_line({"event": "resumed", "new_generation": 1, "restored_step": 10, "checkpoint": "/j/ckpt/step-10",
                       "batch_size": 64, "from_batch_size": 32}, None) == \
        "resumed from the checkpoint of step 10 (generation 1) at batch 64 (the checkpoint's: 32)"


def test_an_lr_rule_line_says_the_factor_the_rule_and_the_batches():
    """It printed a bare `lr_rule`, no detail, before the resize it went with."""
    assert event_line({"event": "lr_rule", "rule": "linear", "from_batch": 32, "to_batch": 64, "factor": 2.0,
                       "ramp_steps": 8}, None) == "LR x2 (linear rule, batch 32 -> 64, over 8 steps)"
    assert event_line({"event": "lr_rule", "rule": "sqrt", "from_batch": 32, "to_batch": 128, "factor": 2.0,
                       "ramp_steps": 0}, None) == "LR x2 (sqrt rule, batch 32 -> 128)"   # at once


def test_a_worker_loss_says_why_and_where_the_group_restarts():
    """The line said only 'worker(s) [1] lost', and the steps after it went back to an earlier one unexplained."""
    assert event_line({"event": "worker_lost", "workers_lost": [1], "exit_codes": [-9], "restored_step": 20,
                       "lost_steps": 8, "checkpoint": "/j/ckpt/step-000000020.ckpt"}, None) == \
        "worker(s) [1] lost (killed by signal 9): restarting from the checkpoint of step 20, 8 step(s) to redo"
    assert event_line({"event": "worker_lost", "workers_lost": [0], "exit_codes": [1], "restored_step": 0,
                       "lost_steps": 3, "checkpoint": None}, None) == \
        "worker(s) [0] lost (exit 1): restarting from the beginning, 3 step(s) to redo"
    assert event_line({"event": "worker_lost", "exit_codes": [0], "servers_lost": [0], "workers_lost": [],
                       "restored_step": 6}, None) == "server(s) [0] lost: restarting from step 6"


def test_a_step_with_an_evaluation_is_shown_however_soon_it_follows_the_last_line():
    """An evaluation every N steps inside the loop rides on that step's record: the step lines' throttle hid it
    unless that step happened to print."""
    import io

    from dlsched.train.progress_lines import HumanProgress

    out = io.StringIO()
    show = HumanProgress(out, every_s=3600)
    step = {"epoch": 0, "loss": 1.0, "samples_per_s": 5.0, "workers": 2, "batch_size": 8, "samples": 8}
    for k in range(1, 7):
        evaluation = {"val_accuracy": 0.5} if k % 3 == 0 else {}
        show({**step, "step": k, "metrics": {"train_accuracy": 0.4, **evaluation}})
    lines = out.getvalue().splitlines()
    assert [line.split()[2] for line in lines] == ["1", "3", "6"], lines   # the first, then each evaluation
    assert all("val_accuracy 0.5" in line for line in lines[1:])


def test_an_ensembles_events_and_steps_say_which_member_what_plan_and_where_its_weights_are():
    """`dlsched logs` of an ensemble printed bare `profiled`, `flotillas`, `member_converged` and steps of no member."""
    assert event_line({"event": "profiled", "profiles": [{"member": "a", "rates": [367.7, 911.1]},
                                                         {"member": "b", "rates": [1500.0]}]}, None) \
        == "profiled (samples/s on 1 slot): a 367.7, b 1500"
    assert event_line({"event": "flotillas", "share": 3, "waiting": ["c"],
                       "flotillas": [{"members": {"a": 2}}, {"members": {"b": 1}}]}, None) \
        == "planned on 3 slot(s): flotillas a:2 | b:1; waiting c"
    assert event_line({"event": "member_converged", "member": "a", "epoch": 7, "best_acc": 0.9922, "reason": "converged",
                       "best_checkpoint": "/j/ckpt/a.best.pt"}, None) \
        == "member a converged at epoch 7: best val acc 0.9922, weights /j/ckpt/a.best.pt"
    assert event_line({"event": "member_converged", "member": "b", "epoch": 3, "best_acc": 0.5, "reason": "max_epochs"},
                      None) == "member b stopped at max_epochs at epoch 3: best val acc 0.5"
    # the member's own step (the record's step counts every member's: "member a step 990" was the ensemble's)
    assert step_line({"step": 12, "epoch": 1, "loss": 0.5, "samples_per_s": 100.0, "workers": 2, "batch_size": 32,
                      "samples": 384, "member": "a", "member_step": 5}) == \
        "member a step 5 epoch 1 loss 0.5 | ensemble: step 12 samples/s 100 workers 2 batch 32 samples 384"
