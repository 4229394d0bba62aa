"""A failure that lasts is logged once with its traceback, then as one line now and then (``service.failure_log``):
a full disk or a database another process keeps locked wrote a whole traceback every round (288 in a few minutes at
the default 2 s interval, on the full disk)."""
import logging
import sqlite3

from dlsched.service.failure_log import RepeatedFailures
from dlsched.service.server import Service
from tests.service.conftest import RUNTIME, cluster
from tests.service.teardown import stop_service_and_jobs
from tests.waiting import wait_until


def test_a_database_locked_for_many_rounds_logs_one_traceback_and_its_recovery(tmp_path, monkeypatch, caplog):
    from dlsched.service import store as store_module

    monkeypatch.setattr(store_module, "BUSY_TIMEOUT_S", 0.05)
    caplog.set_level(logging.INFO, logger="dlsched.service")
    svc = Service(cluster(interval=0.05), tmp_path / "state", port=0, runtime=RUNTIME).start()
    try:
        wait_until(lambda: svc.thread.rounds > 0, 60, "a first round")
        holder = sqlite3.connect(svc.state_dir / "dlsched.db", isolation_level=None)
        holder.execute("BEGIN EXCLUSIVE")   # an sqlite3 shell left in a transaction
        wait_until(lambda: svc.thread.failed_rounds >= 5, 60, "five failed rounds")
        holder.execute("ROLLBACK")
        wait_until(lambda: any("scheduling round succeeds again" in r.getMessage() for r in caplog.records), 60,
                   "the rounds' recovery logged")
    finally:
        stop_service_and_jobs(svc)
    rounds = [r for r in caplog.records if r.getMessage().startswith("scheduling round")]
    with_traceback = [r for r in rounds if r.exc_info]
    assert len(with_traceback) == 1 and "database is locked" in str(with_traceback[0].exc_info[1])
    assert rounds[-1].getMessage().startswith("scheduling round succeeds again after ")
    assert int(rounds[-1].getMessage().split("after ")[1].split(" ")[0]) >= 5


def test_the_same_failure_is_one_line_every_so_often_and_another_is_logged_in_full(caplog):
    now = [0.0]
    failures = RepeatedFailures("policy forecast", logging.getLogger("dlsched.service"), every_s=600,
                                clock=lambda: now[0])
    caplog.set_level(logging.INFO, logger="dlsched.service")
    for t in range(0, 1300, 2):   # a round every 2 s for 21 minutes
        now[0] = float(t)
        failures.failed(OSError(28, "No space left on device"))
    failures.failed(KeyError("n0"))
    failures.succeeded()
    said = [(r.getMessage(), bool(r.exc_info)) for r in caplog.records]
    assert said == [("policy forecast failed", True),
                    ("policy forecast failed 301 times so far, the same way: OSError: [Errno 28] No space left on "
                     "device", False),
                    ("policy forecast failed 601 times so far, the same way: OSError: [Errno 28] No space left on "
                     "device", False),
                    ("policy forecast failed", True),
                    ("policy forecast succeeds again after 1 failure(s)", False)]
