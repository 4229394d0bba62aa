"""An ensemble job's progress as the service shows it (service/fleet_status), from hand-made FLEET events."""
from __future__ import annotations

from dlsched.service.fleet_status import ensemble_status, summary


def _event(kind: str, **detail) -> dict:
    return {"kind": kind, "time": 0.0, "detail": detail}


PROFILED = _event("job_profiled", profiles=[{"member": "a"}, {"member": "b"}], max_samples={"a": 800, "b": 200})


def test_an_ensemble_has_no_fraction_done_before_its_members_are_profiled():
    assert ensemble_status([])["fraction_done"] is None


def test_an_ensembles_fraction_done_counts_each_plans_samples_and_a_member_that_left_whole():
    plan = _event("job_flotillas", flotillas=[{"members": {"a": 1, "b": 1}}], share=2, samples_done={"a": 200, "b": 50})
    assert ensemble_status([PROFILED, plan])["fraction_done"] == 0.25           # 250 of 1000
    left = _event("job_member_converged", member="b", reason="patience")
    assert ensemble_status([PROFILED, plan, left])["fraction_done"] == 0.4      # b's 200 are all done: it left
    assert ensemble_status([PROFILED, plan, left, _event("job_finished")])["fraction_done"] == 1.0
    assert ensemble_status([PROFILED, plan, _event("job_stopped")])["fraction_done"] == 0.25   # stopped, not done


def test_a_running_ensembles_fraction_done_moves_between_plans_and_a_stop_says_where_it_left_each_member():
    """DONE stood at the last plan's count for as long as the flotillas trained (0 % for minutes, then a jump), and
    a cancelled ensemble whose members had trained showed 0 %."""
    plan = {**_event("job_flotillas", flotillas=[{"members": {"a": 1, "b": 1}, "rate": 10.0}], share=2,
                     samples_done={"a": 0, "b": 0}), "time": 100.0}
    assert ensemble_status([PROFILED, plan], now=100.0)["fraction_done"] == 0.0
    assert ensemble_status([PROFILED, plan], now=110.0)["fraction_done"] == 0.2       # 100 + 100 of 1000
    assert ensemble_status([PROFILED, plan], now=200.0)["fraction_done"] == 1.0       # each capped at its epochs
    stopped = {**_event("job_stopped", samples_done={"a": 300, "b": 50}), "time": 120.0}
    for now in (120.0, 500.0):                     # stopped: what the stop says, however long ago
        assert ensemble_status([PROFILED, plan, stopped], now=now)["fraction_done"] == 0.35


def test_each_member_that_left_has_its_epochs_and_best_accuracy():
    """A service job's per-model results were only in its events; `dlsched show` and the dashboard had the states."""
    plan = _event("job_flotillas", flotillas=[{"members": {"a": 1, "b": 1}}], share=2, samples_done={})
    left = _event("job_member_converged", member="b", epoch=3, best_acc=0.97, reason="max_epochs",
                  best_checkpoint="/jobs/1/ckpt/b.best.pt")
    shown = ensemble_status([PROFILED, plan, left])
    assert shown["results"] == {"b": {"epochs": 3, "best_acc": 0.97, "left": "stopped at max_epochs",
                                      "best_checkpoint": "/jobs/1/ckpt/b.best.pt"}}   # where its weights are


def test_an_ensemble_not_yet_profiled_says_so_in_its_summary():
    """`dlsched status` showed "0/0 converged" under an ensemble still profiling, or one that failed before."""
    assert summary(ensemble_status([])) == "no member profiled"
    assert summary(ensemble_status([PROFILED])) == "0/2 converged"


def test_members_of_a_stopped_ensemble_are_not_shown_training():
    """A cancelled ensemble still showed its members 'training'."""
    plan = _event("job_flotillas", flotillas=[{"members": {"a": 1}}], share=1, waiting=["b"], samples_done={})
    stopped = ensemble_status([PROFILED, plan, _event("job_stopped")])
    assert stopped["members"] == {"a": "stopped", "b": "stopped"}
    again = ensemble_status([PROFILED, plan, _event("job_stopped"), plan])     # resumed: the next plan says
    assert again["members"] == {"a": "training", "b": "waiting"}


def test_events_job_code_forged_are_skipped_not_raised():
    """Job code writes these events (progress.jsonl): a member_converged without a member, a profile without one, a
    flotilla list given as text raised in every `GET /jobs` (a 500 for every client), job page and forecast."""
    from dlsched.service.fleet_status import ensemble_status, members_left

    def ev(kind, **d):
        return {"kind": kind, "detail": d, "time": 0.0}

    good = [ev("job_profiled", profiles=[{"member": "a", "rates": [10.0]}], max_samples={"a": 100}),
            ev("job_flotillas", flotillas=[{"members": {"a": 1}, "rate": 10.0}], share=1, samples_done={"a": 50})]
    forged = [ev("job_member_converged"), ev("job_profiled", profiles=[{}]), ev("job_flotillas", flotillas="x"),
              ev("job_flotillas", samples_done={"a": "x"}), ev("job_profiled", max_samples=[1]),
              ev("job_profiled", profiles=[{"member": "a", "rates": ["x"]}]), ev("job_stopped", samples_done=[2]),
              ev("job_flotillas", flotillas=[{"members": {"a": "<b>"}}])]
    events = good[:1] + forged + good[1:]
    assert ensemble_status(events, 0.0)["members"] == {"a": "training"}
    assert ensemble_status(events, 0.0)["fraction_done"] == 0.5
    assert members_left(events, 0.0) == (("a", (10.0,), 50.0),)


def test_an_ensemble_whose_runtime_died_without_a_stop_is_counted_where_it_last_held_slots(tmp_path):
    """A runtime that failed or was SIGKILLed writes no ``stopped``: its DONE went on at its last plan's rate, to
    100 % while it sat failed (live: a digits ensemble failed at 90 %, shown 100 % a minute later), its members
    'training'. Real SQLite; the loop's writes (an allocation of 0 slots when it ended)."""
    from dlsched.service.fleet_status import ensemble_of
    from dlsched.service.store import Store
    from dlsched.spec import load_job_spec

    store = Store(tmp_path / "s.db")
    job = store.submit(load_job_spec("name: e\nkind: ensemble\nentry: dlsched.train.fleet_spec:from_yaml\n"
                                     "params: {path: e.yaml}\ngpus: 2\n"), now=0.0)
    store.event("job_profiled", job, 90.0, profiles=[{"member": "a", "rates": [10.0]}, {"member": "b", "rates": [10.0]}],
                max_samples={"a": 800, "b": 200})
    store.event("job_flotillas", job, 100.0, time=100.0, share=2, samples_done={"a": 0, "b": 0},
                flotillas=[{"members": {"a": 1, "b": 1}, "rate": 10.0}])
    store.record_allocation(job, 95.0, 2, None, {"n0": 2})
    store.record_allocation(job, 110.0, 0, None, {})            # its runtime died at 110 s
    ens = ensemble_of(store, job)
    assert ens["fraction_done"] == 0.2                           # 100 + 100 of 1000, not 1.0 at the wall clock's now
    assert ens["members"] == {"a": "stopped", "b": "stopped"} and ens["flotillas"] == []
