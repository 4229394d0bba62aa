"""The events a job's processes write are bounded before the store copies them (``service/job_events.py``): each
was a row, however large and however many (4 MiB of rows a round, for as long as the job ran)."""
import logging

from dlsched.service.job_events import BURST, MAX_FIELD_BYTES
from tests.service.conftest import job_yaml
from tests.waiting import wait_until

FLOOD = 3000


def test_a_flood_of_job_events_is_thinned_an_oversize_field_left_out_and_the_drop_said_once(service, client, caplog):
    caplog.set_level(logging.WARNING, logger="dlsched.service")
    extra = f"params: {{samples: 320, epochs: 1, step_s: 0.02, flood: {FLOOD}, big_event: 3000000}}\n"
    jid = client.post("/jobs", content=job_yaml("chatty").split("params:")[0] + extra,
                      headers={"content-type": "application/yaml"}).json()["id"]
    wait_until(lambda: client.get(f"/jobs/{jid}").json()["state"] == "finished", 120, "the job to finish")
    events = client.get(f"/jobs/{jid}/events").json()
    kinds = [e["kind"] for e in events]
    stored = kinds.count("job_metrics")
    assert BURST <= stored < BURST + 60, stored   # the burst, then about one a second while it ran
    dropped = [e["detail"] for e in events if e["kind"] == "events_dropped"]
    assert sum(d["kinds"].get("metrics", 0) for d in dropped) == FLOOD - stored   # every one counted
    assert len(dropped) <= 2   # said when first dropped, then at most every REPORT_EVERY_S, and at the end
    big = next(e["detail"] for e in events if e["kind"] == "job_epoch_end")   # a rare kind: kept, its big field not
    assert big["dropped_fields"] == ["notes"] and big["mean_loss"] == 1.5 and len(str(big)) < MAX_FIELD_BYTES
    assert "job_finished" in kinds and client.get(f"/jobs/{jid}").json()["samples"] == 320
    said = [r.getMessage() for r in caplog.records if "were not stored" in r.getMessage()]
    assert said and said[0].startswith(f"job {jid}: ") and "metrics: " in said[0] and "progress.jsonl" in said[0]
    progress = (service.jobs_dir / str(jid) / "progress.jsonl").read_text()
    assert progress.count('"event": "metrics"') == FLOOD   # left out of the store, not lost


def test_a_read_whose_round_failed_to_commit_spends_none_of_the_jobs_budget(tmp_path):
    """A full disk failed every round's commit; each retry read the same records again (the offset was not stored)
    and the job's budget, spent on rows that were rolled back, was gone once the disk had room: 13 of a job's 376
    checkpoint events stored, and each failed round counted the same events dropped again. The real SQLite store
    with its database full (``max_page_count``), then room again."""
    import sqlite3

    import pytest

    from dlsched.service.job_events import JobEvents
    from dlsched.service.store import Store
    from dlsched.spec import load_job_spec

    store = Store(tmp_path / "s.db")
    jid = store.submit(load_job_spec(job_yaml("a")))
    events = JobEvents(store)
    read = [{"event": "checkpoint", "step": k, "path": "x" * 2000} for k in range(BURST)]
    conn = store._conn()
    conn.execute(f"PRAGMA max_page_count = {conn.execute('PRAGMA page_count').fetchone()[0]}")   # the disk is full
    for _ in range(3):
        with pytest.raises(sqlite3.OperationalError, match="full"):
            with store.batch():
                events.store_read(jid, read, now=100.0)
    conn.execute("PRAGMA max_page_count = 1073741823")   # room again: the same read is retried
    with store.batch():
        events.store_read(jid, read, now=100.0)
    kinds = [e["kind"] for e in store.events(job_id=jid)]
    assert kinds.count("job_checkpoint") == BURST and "events_dropped" not in kinds
