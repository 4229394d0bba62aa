import sqlite3
import subprocess
import sys
import textwrap

import pytest

from dlsched.service.store import (CANCELLED, FINISHED, MIGRATIONS, QUEUED, RESCALING, RUNNING, Store,
                                   TransitionError, UnknownJob)
from dlsched.spec import JobSpec, load_job_spec

SPEC = load_job_spec("name: j\nentry: m:make_job\ngpus: 2")


def test_schema_is_versioned_and_reopening_is_idempotent(tmp_path):
    db = tmp_path / "s.db"
    s = Store(db)
    assert s.schema_version == len(MIGRATIONS)
    assert s._conn().execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    s.submit(SPEC)
    s.close()
    s2 = Store(db)
    assert s2.count() == 1 and s2.schema_version == len(MIGRATIONS)
    rows = s2._conn().execute("SELECT COUNT(*) FROM schema_version").fetchone()[0]
    assert rows == len(MIGRATIONS)


def test_a_version_1_store_is_migrated_and_keeps_its_predictions(tmp_path):
    db = tmp_path / "s.db"
    c = sqlite3.connect(db)
    c.executescript(MIGRATIONS[0] + "; CREATE TABLE schema_version (version INTEGER NOT NULL);"
                    "INSERT INTO schema_version VALUES (1);"
                    "INSERT INTO predictions(job_id, time, remaining_s, predicted_finish) VALUES (7, 1.0, 9.0, 10.0);")
    c.close()
    s = Store(db)
    assert s.schema_version == len(MIGRATIONS) >= 2
    old = s.predictions(7)[0]
    assert (old["predicted_finish"], old["forecast_time"], old["policy_finish"]) == (10.0, None, None)
    s.add_prediction(7, 2.0, 0.5, 100.0, 8.0, 10.0, None, forecast_time=2.0, predicted_start=1.5, policy_finish=12.0)
    assert s.latest_prediction(7)["policy_finish"] == 12.0   # no job 7 row: latest_predictions lists jobs


def test_a_version_6_store_is_migrated_and_starts_with_no_finished_fits(tmp_path):
    """Migration 7 adds the finished jobs' fits (the curve prior's): a store from before it opens with its jobs
    and none, so the service's prior starts empty there, as it did before."""
    db = tmp_path / "s.db"
    c = sqlite3.connect(db)
    c.executescript(";".join(MIGRATIONS[:6]) + "; CREATE TABLE schema_version (version INTEGER NOT NULL);"
                    "INSERT INTO schema_version VALUES (1),(2),(3),(4),(5),(6);"
                    "INSERT INTO jobs(name, spec, state, submit_time) VALUES ('j', '{}', 'finished', 1.0);")
    c.close()
    s = Store(db)
    assert s.schema_version == len(MIGRATIONS) >= 7 and s.finished_fits() == []
    assert s._conn().execute("SELECT state FROM jobs").fetchone()[0] == "finished"
    s.add_finished_fit(1, {"alpha": 0.5, "drop": None})
    s.add_finished_fit(1, {"alpha": 0.6, "drop": 0.1})   # refitted once more: the newer one stands
    s.close()
    assert Store(db).finished_fits() == [{"alpha": 0.6, "drop": 0.1}]


def test_a_version_10_stores_accuracy_final_kept_in_percent_is_read_in_fractions(tmp_path):
    """Migration 11: a finished accuracy target's fit is kept in fractions (``service.metric_target.reported_scale``).
    One a job reporting in % kept before (its error above 1) becomes a fraction, its curve's level with it; a
    fraction, a loss and an error stay as they were."""
    import json

    db = tmp_path / "s.db"
    c = sqlite3.connect(db)
    curve = {"l0": 20.0, "a": 40.0, "alpha": 0.5, "c": 0.3, "s0": 0.0, "schedule": {}}
    fits = [{"alpha": 0.5, "drop": 0.3, "meta": {"kind": "accuracy"}, "final": 24.0, "curve": curve},
            {"alpha": 0.5, "drop": 0.3, "meta": {"kind": "accuracy"}, "final": 0.24, "curve": None},
            {"alpha": 0.5, "drop": None, "meta": {"kind": "accuracy"}, "final": 57.5, "curve": None},
            {"alpha": 0.5, "drop": 0.3, "meta": {"kind": "error"}, "final": 24.0, "curve": curve}]
    c.executescript(";".join(MIGRATIONS[:10]) + "; CREATE TABLE schema_version (version INTEGER NOT NULL);"
                    "INSERT INTO schema_version VALUES (1),(2),(3),(4),(5),(6),(7),(8),(9),(10);")
    c.executemany("INSERT INTO finished_target_fits(job_id, fit) VALUES (?, ?)",
                  [(i, json.dumps(f)) for i, f in enumerate(fits, 1)])
    c.commit()
    c.close()
    s = Store(db)
    assert s.schema_version == len(MIGRATIONS) >= 11
    got = s.finished_fits()
    assert [f["final"] for f in got] == pytest.approx([0.24, 0.24, 0.575, 24.0])
    assert (got[0]["curve"]["l0"], got[0]["curve"]["a"], got[0]["curve"]["c"]) == pytest.approx((0.2, 0.4, 0.3))
    assert got[2]["curve"] is None and got[3]["curve"] == curve
    s.close()


def test_a_version_8_store_is_migrated_its_steps_carry_no_metrics_and_its_fits_no_targets(tmp_path):
    """Migrations 9 and 10 (a step's reported metrics; a finished job's target fit): a store from before them keeps
    its progress rows, which report no metric, and its loss fits, beside which none of a target is kept."""
    db = tmp_path / "s.db"
    c = sqlite3.connect(db)
    c.executescript(";".join(MIGRATIONS[:8]) + "; CREATE TABLE schema_version (version INTEGER NOT NULL);"
                    "INSERT INTO schema_version VALUES (1),(2),(3),(4),(5),(6),(7),(8);"
                    "INSERT INTO jobs(name, spec, state, submit_time) VALUES ('j', '{}', 'finished', 1.0);"
                    "INSERT INTO progress(job_id, time, step, samples, loss) VALUES (1, 1.0, 1, 8, 2.0);"
                    """INSERT INTO finished_fits(job_id, fit) VALUES (1, '{"alpha": 0.5, "drop": null}');""")
    c.close()
    s = Store(db)
    assert s.schema_version == len(MIGRATIONS) >= 10
    assert [r["loss"] for r in s.progress(1)] == [2.0] and s.metric_values(1, "acc", "job_metrics").values == []
    assert s.finished_fits() == [{"alpha": 0.5, "drop": None}]
    s.add_finished_fit(2, {"alpha": 0.6, "drop": 0.1}, {"alpha": 0.7, "drop": 0.3, "meta": {"kind": "accuracy"}})
    s.close()
    assert Store(db).finished_fits() == [{"alpha": 0.5, "drop": None}, {"alpha": 0.6, "drop": 0.1},
                                         {"alpha": 0.7, "drop": 0.3, "meta": {"kind": "accuracy"}}]


def test_a_newer_schema_is_refused(tmp_path):
    db = tmp_path / "s.db"
    Store(db).close()
    c = sqlite3.connect(db)
    c.execute("INSERT INTO schema_version VALUES (99)")
    c.commit()
    with pytest.raises(RuntimeError, match="schema version 99 is newer"):
        Store(db)


def test_state_machine(tmp_path):
    s = Store(tmp_path / "s.db")
    j = s.submit(SPEC, now=1.0)
    assert s.get(j).state == QUEUED
    rec = s.transition(j, RUNNING, now=2.0, num_gpus=2, placement={"n0": 2})
    assert rec.start_time == 2.0 and rec.placement == {"n0": 2}
    s.transition(j, RESCALING, now=3.0, num_gpus=1, placement={"n0": 1})
    s.transition(j, RUNNING, now=4.0)
    s.transition(j, QUEUED, now=5.0, num_gpus=0, placement={})   # preempted
    assert s.get(j).start_time == 2.0
    s.transition(j, RUNNING, now=6.0)
    done = s.transition(j, FINISHED, now=7.0)
    assert done.end_time == 7.0 and done.num_gpus == 0 and done.placement == {}
    with pytest.raises(TransitionError, match="finished -> running"):
        s.transition(j, RUNNING)
    kinds = [e["kind"] for e in s.events(j)]
    assert kinds == ["submitted", "running", "rescaling", "running", "queued", "running", "finished"]
    with pytest.raises(UnknownJob):
        s.transition(999, RUNNING)


def test_cancel_queued_is_immediate_running_is_flagged(tmp_path):
    s = Store(tmp_path / "s.db")
    a, b = s.submit(SPEC), s.submit(SPEC)
    s.transition(b, RUNNING, num_gpus=2)
    assert s.request_cancel(a).state == CANCELLED
    rb = s.request_cancel(b)
    assert rb.state == RUNNING and rb.cancel_requested
    assert s.request_cancel(b).cancel_requested   # asking a running job twice is harmless
    with pytest.raises(TransitionError, match=f"job {a} already cancelled; nothing to cancel"):
        s.request_cancel(a)     # an ended job has nothing to cancel (the API's 409)
    assert s.get(a).state == CANCELLED


def test_progress_and_offset_advance_together(tmp_path):
    s = Store(tmp_path / "s.db")
    j = s.submit(SPEC)
    s.add_progress(j, [{"time": 1.0, "step": 1, "samples": 32, "loss": 2.0}], 120, samples=32.0, last_loss=2.0)
    rec = s.get(j)
    assert rec.progress_offset == 120 and rec.samples == 32 and s.progress(j)[0]["loss"] == 2.0
    assert rec.public()["progress_offset"] == 120   # `dlsched show`: which rotated segments of its log were read


def test_a_restores_replayed_steps_replace_the_rolled_back_rows_each_step_stored_once(tmp_path):
    """A restore replays the steps after its checkpoint: their rows were stored a second time (the curve and the
    loss fit saw each replayed step twice). In one read or across reads, the replay replaces the rolled-back rows;
    an ensemble's rows (its ``step`` counts every member's) are left as they come."""
    s = Store(tmp_path / "s.db")
    j, ens = s.submit(SPEC), s.submit(SPEC)

    def rows(first, last, loss=2.0):
        return [{"time": float(k), "step": k, "samples": 8 * k, "loss": loss} for k in range(first, last + 1)]

    assert s.add_progress(j, rows(1, 6), 10) == 0
    assert s.add_progress(j, rows(7, 8) + rows(5, 6, loss=1.0), 20) == 2    # lost at 8, restored from step 4
    assert s.add_progress(j, rows(3, 7, loss=0.5), 30) == 4                 # restored from 2, read on its own
    assert [(r["step"], r["loss"]) for r in s.progress(j)] == \
        [(1, 2.0), (2, 2.0), (3, 0.5), (4, 0.5), (5, 0.5), (6, 0.5), (7, 0.5)]
    assert s.get(j).progress_offset == 30
    member = [{"time": 1.0, "step": k, "member": "a", "member_step": k} for k in (1, 2, 1)]
    assert s.add_progress(ens, member, 10) == 0 and len(s.progress(ens)) == 3


def test_a_metrics_values_are_read_from_its_steps_and_then_its_evaluations_numbers_only(tmp_path):
    """``Store.metric_values``: a metric reported inside a step rides on the step's record (migration 9 keeps its
    numbers); one reported between steps is an event. A NaN, a bool, a string or another job's report is not read;
    an event's NaN is stored as null (SQLite's JSON functions would call the detail malformed)."""
    s = Store(tmp_path / "s.db")
    j, other = s.submit(SPEC), s.submit(SPEC)
    steps = [{"time": 1.0, "step": 1, "samples": 8, "loss": 2.0, "metrics": {"acc": 0.25, "note": "x"}},
             {"time": 2.0, "step": 2, "samples": 16, "loss": 1.9, "metrics": {"acc": float("nan"), "flag": True}},
             {"time": 3.0, "step": 3, "samples": 24, "loss": 1.8, "metrics": {"acc": 0.5}},
             {"time": 4.0, "step": 4, "samples": 32, "loss": 1.7}]
    s.add_progress(j, steps, 100)
    s.add_progress(other, [{"time": 1.0, "step": 9, "samples": 8, "loss": 2.0, "metrics": {"acc": 0.9}}], 10)
    s.event("job_metrics", j, step=3, epoch=0, metrics={"acc": 0.75, "val_loss": float("nan")})
    s.event("job_metrics", j, step=4, epoch=0, metrics={"loss_only": 1.0})
    s.event("job_metrics", other, step=4, epoch=0, metrics={"acc": 0.1})
    got = s.metric_values(j, "acc", "job_metrics")
    assert got.values == [(1.0, 0.25), (3.0, 0.5), (3.0, 0.75)] and got.inside == ((1.0, 0.25), (3.0, 0.5))
    # read on from where it left: only what was stored since
    s.add_progress(j, [{"time": 5.0, "step": 5, "samples": 40, "loss": 1.6, "metrics": {"acc": 0.6}}], 120)
    s.event("job_metrics", j, step=5, epoch=0, metrics={"acc": 0.8})
    more = s.metric_values(j, "acc", "job_metrics", after=got.seen)
    assert (more.inside, more.between) == (((5.0, 0.6),), ((5.0, 0.8),)) and more.seen > got.seen
    assert s.metric_values(j, "acc", "job_metrics", after=more.seen).values == []
    assert s.metric_values(j, "acc", "job_metrics", points=2).inside == ((1.0, 0.25), (5.0, 0.6))   # k-th + newest
    assert s.events(j, kinds=("job_metrics",))[0]["detail"]["metrics"]["val_loss"] is None   # stored as null
    assert s.metric_values(j, "flag", "job_metrics").values == [] == s.metric_values(j, "note", "job_metrics").values
    assert s.metric_values(j, "loss_only", "job_metrics").values == [(4.0, 1.0)]
    assert [r["loss"] for r in s.progress(j)] == [2.0, 1.9, 1.8, 1.7, 1.6]   # the API's rows are as before
    assert "metrics" not in s.progress(j)[0]


def test_a_drawn_curve_reads_evenly_spaced_rows_with_a_loss_and_the_newest(tmp_path):
    s = Store(tmp_path / "s.db")
    j, other = s.submit(SPEC), s.submit(SPEC)
    rows = [{"time": float(i), "step": i, "samples": 32 * i, "loss": None if i % 3 == 0 else 1.0 / i}
            for i in range(1, 1001)]
    s.add_progress(other, rows[:10], 10)
    s.add_progress(j, rows, 1000)
    with_loss = [r for r in s.progress(j) if r["loss"] is not None]
    drawn = s.progress(j, loss_points=100)
    assert [r["step"] for r in drawn] == [r["step"] for r in with_loss[::7]] + [1000]   # 667 rows: every 7th
    assert drawn[0] == with_loss[0] and drawn[-1] == with_loss[-1]
    assert s.progress(j, loss_points=10_000) == with_loss
    # every row: more ids than a statement may carry parameters (999 before SQLite 3.32, 32 766 after; this
    # build allows 250 000, so the test sets the older limit)
    s._conn().setlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER, 999)
    s.add_progress(other, [{"time": float(i), "step": i, "samples": i, "loss": 1.0} for i in range(11, 2_011)], 2_010)
    assert len(s.progress(other, loss_points=10**6)) == 2_007
    assert s.progress(s.submit(SPEC), loss_points=100) == []


def test_acknowledged_submission_survives_sigkill(tmp_path):
    """A writer killed with SIGKILL right after the id is returned: the row must be there on reopen."""
    db = tmp_path / "s.db"
    code = textwrap.dedent(f"""
        import os, signal, sys
        from dlsched.service.store import Store
        from dlsched.spec import JobSpec, load_job_spec
        s = Store({str(db)!r})
        for i in range(20):
            print(s.submit(load_job_spec("name: j\\nentry: m:f")), flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == -9
    acked = [int(x) for x in out.stdout.split()]
    assert len(acked) == 20
    s = Store(db)
    assert [j.id for j in s.jobs()] == acked


def test_the_latest_prediction_is_the_newest_of_the_jobs_own_decoded(tmp_path):
    s = Store(tmp_path / "s.db")
    a, b = s.submit(SPEC), s.submit(SPEC)
    assert s.latest_prediction(a) is None
    for t in range(3):
        s.add_prediction(a, float(t), 0.1 * t, 100.0, 9.0, 10.0 + t, {"final": t})
    s.add_prediction(b, 5.0, 0.5, 100.0, 1.0, 6.0, None)
    assert s.latest_prediction(a) == s.predictions(a)[-1]
    assert s.latest_prediction(a)["loss_fit"] == {"final": 2} and s.latest_prediction(b)["loss_fit"] is None


def test_only_the_newest_prediction_of_a_job_keeps_its_curve(tmp_path):
    s = Store(tmp_path / "s.db")
    a, b = s.submit(SPEC), s.submit(SPEC)
    fit = lambda t: {"model": "annealing", "final": t, "curve": [[0, 2.0], [100, 1.0 + t]],   # noqa: E731
                     "metric_target": {"metric": "acc", "final": t, "curve": [[0, 0.1], [100, 0.9]]}}
    s.add_prediction(a, 1.0, 0.1, 100.0, 9.0, 10.0, fit(1))
    s.add_prediction(b, 1.5, 0.1, 100.0, 9.0, 10.5, fit(9))
    s.add_prediction(a, 2.0, 0.2, 100.0, 8.0, 10.0, None)
    s.add_prediction(a, 3.0, 0.3, 100.0, 7.0, 10.0, fit(3))
    old, empty, new = s.predictions(a)
    assert old["loss_fit"] == {"model": "annealing", "final": 1, "metric_target": {"metric": "acc", "final": 1}}
    assert empty["loss_fit"] is None
    assert new["loss_fit"] == fit(3) and s.latest_prediction(b)["loss_fit"] == fit(9)


def test_a_nan_in_a_fit_is_stored_as_null_and_the_next_prediction_still_lands(tmp_path):
    """A fit that holds a NaN or inf (a diverged metric's band, say) was stored as JSON's NaN, and the next
    prediction's ``json_remove`` of its curve raised "malformed JSON" in the loop."""
    s = Store(tmp_path / "s.db")
    j = s.submit(SPEC)
    s.add_prediction(j, 1.0, 0.1, 100.0, 9.0, 10.0, {"final": float("nan"), "curve": [[0, float("inf")]],
                                                     "metric_target": {"final_80": [0.1, float("-inf")]}})
    s.add_prediction(j, 2.0, 0.2, 100.0, 8.0, 10.0, {"final": 1.0})
    old, new = s.predictions(j)
    assert old["loss_fit"] == {"final": None, "metric_target": {"final_80": [0.1, None]}}
    assert new["loss_fit"] == {"final": 1.0}


def test_the_latest_predictions_are_each_jobs_newest_and_only_of_jobs_with_one(tmp_path):
    s = Store(tmp_path / "s.db")
    a, b, none = s.submit(SPEC), s.submit(SPEC), s.submit(SPEC)
    for t, job in enumerate((a, b, a, b, a)):
        s.add_prediction(job, float(t), 0.1 * t, 100.0, 9.0, 10.0 + t, None)
    latest = s.latest_predictions()
    assert sorted(latest) == [a, b] and none not in latest
    assert latest[a]["time"] == 4.0 and latest[b]["time"] == 3.0


def test_latest_predictions_of_the_named_jobs_are_their_newest_rows(tmp_path):
    """/metrics reads the active jobs' newest predictions only (``Store.latest_predictions(job_ids)``)."""
    s = Store(tmp_path / "s.db")
    jobs = [s.submit(JobSpec(name=f"j{i}", entry="m.py:f", gpus=1)) for i in range(3)]
    for job in jobs:
        for t in (1.0, 2.0):
            s.add_prediction(job, t, 0.5, 100.0, 10.0 * job + t, 20.0, None)
    every = s.latest_predictions()
    assert sorted(every) == jobs and [every[j]["remaining_s"] for j in jobs] == [10.0 * j + 2.0 for j in jobs]
    named = s.latest_predictions([jobs[2], jobs[0]])
    assert named == {j: every[j] for j in (jobs[0], jobs[2])}
    assert s.latest_predictions([]) == {} and s.latest_predictions(iter([99])) == {}
    s.close()


def test_a_full_database_says_so_and_leaves_no_transaction_open(tmp_path):
    """SQLite rolls a transaction back itself on a full disk: the store's own ROLLBACK then raised 'cannot rollback -
    no transaction is active', and the service's log named that instead of the full disk."""
    s = Store(tmp_path / "s.db")
    c = s._conn()
    c.execute(f"PRAGMA max_page_count = {c.execute('PRAGMA page_count').fetchone()[0]}")   # a disk with no room
    with pytest.raises(sqlite3.OperationalError, match="database or disk is full"):
        for _ in range(1000):
            s.submit(SPEC)
    assert not c.in_transaction
    before = s.count()
    c.execute("PRAGMA max_page_count = 1000000")   # room again: the same connection writes on
    s.submit(SPEC)
    assert s.count() == before + 1


def test_a_jobs_predictions_are_kept_one_a_minute_or_one_a_percent_and_the_newest_always(tmp_path):
    """The loop stores a prediction every round a job trains (2 s): about 600 bytes each, 26 MB a day of one job,
    never pruned. The history keeps one a minute or one per 1 % of progress; the newest is always the last made."""
    s = Store(tmp_path / "s.db")
    slow, fast, blind = s.submit(SPEC), s.submit(SPEC), s.submit(SPEC)
    for r in range(900):   # half an hour of 2 s rounds
        t = 2.0 * r
        s.add_prediction(slow, t, r / 1e5, 100.0, 9.0, 10.0, {"final": r, "curve": [[0, 1.0]]})
        s.add_prediction(fast, t, r / 900, 100.0, 9.0, 10.0, {"final": r})
        s.add_prediction(blind, t, None, None, None, None, None)
        assert s.latest_prediction(slow)["loss_fit"] == {"final": r, "curve": [[0, 1.0]]}
    kept = s.predictions(slow)
    assert 30 <= len(kept) <= 32 and all(b["time"] - a["time"] >= 60 for a, b in zip(kept[:-2], kept[1:-1]))
    assert [p for p in kept if "curve" in p["loss_fit"]] == [kept[-1]]
    done = [p["fraction_done"] for p in s.predictions(fast)]
    assert 95 <= len(done) <= 101 and all(b - a >= 0.01 - 1e-9 for a, b in zip(done[:-2], done[1:-1]))
    assert 30 <= len(s.predictions(blind)) <= 32


def test_what_a_queued_job_waits_for_goes_with_its_start_or_its_cancel(tmp_path):
    """``waiting_for`` (a start that failed on a full disk) said so still on a job cancelled while queued."""
    s = Store(tmp_path / "s.db")
    spec = JobSpec(name="a", entry="x.py:make_job", gpus=1)
    a, b = s.submit(spec, now=0.0), s.submit(spec, now=0.0)
    for job in (a, b):
        s.transition(job, QUEUED, 1.0, waiting_for="room on its folder's disk (full)")
        assert s.get(job).waiting_for == "room on its folder's disk (full)"
    s.transition(a, RUNNING, 2.0, num_gpus=1)
    s.request_cancel(b, now=2.0)
    assert (s.get(a).waiting_for, s.get(b).waiting_for) == (None, None)
