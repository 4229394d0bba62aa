"""The service's durable state: one SQLite file in WAL mode.

Why SQLite: a submission is *acknowledged* only after its row is committed with ``synchronous=FULL``, so a
SIGKILL (or power loss) of the service never loses an accepted job; WAL lets the API threads read while the
loop writes. Every thread gets its own connection. The job state machine lives here, so no caller can
move a job along an edge that does not exist.

Schema changes are append-only migrations recorded in ``schema_version``.
"""
from __future__ import annotations

import json
import math
import sqlite3
import threading
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping

from dlsched.numbers import finite, is_number
from dlsched.service.private_files import private_file, tighten
from dlsched.service.replayed_steps import drop_rolled_back
from dlsched.spec import JobSpec

QUEUED, RUNNING, RESCALING, FINISHED, FAILED, CANCELLED = "queued", "running", "rescaling", "finished", "failed", "cancelled"
ACTIVE = (QUEUED, RUNNING, RESCALING)
TERMINAL = (FINISHED, FAILED, CANCELLED)

# queued -> running -> rescaling -> running ...; running/rescaling -> queued is a preemption.
TRANSITIONS: dict[str, frozenset[str]] = {
    QUEUED: frozenset({RUNNING, FAILED, CANCELLED}),
    RUNNING: frozenset({RESCALING, QUEUED, FINISHED, FAILED, CANCELLED}),
    RESCALING: frozenset({RUNNING, QUEUED, FINISHED, FAILED, CANCELLED}),
    FINISHED: frozenset(), FAILED: frozenset(), CANCELLED: frozenset(),
}

MIGRATIONS: list[str] = [
    # 1: initial schema
    """
    CREATE TABLE jobs (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        name TEXT NOT NULL,
        spec TEXT NOT NULL,
        state TEXT NOT NULL,
        submit_time REAL NOT NULL,
        start_time REAL,
        end_time REAL,
        num_gpus INTEGER NOT NULL DEFAULT 0,
        placement TEXT NOT NULL DEFAULT '{}',
        batch_size INTEGER,
        generation INTEGER NOT NULL DEFAULT 0,
        attained_service REAL NOT NULL DEFAULT 0,
        run_time REAL NOT NULL DEFAULT 0,
        samples REAL NOT NULL DEFAULT 0,
        total_samples REAL,
        last_loss REAL,
        samples_per_s REAL,
        progress_offset INTEGER NOT NULL DEFAULT 0,
        cancel_requested INTEGER NOT NULL DEFAULT 0,
        error TEXT,
        job_dir TEXT
    );
    CREATE INDEX jobs_state ON jobs(state);
    CREATE TABLE allocations (
        id INTEGER PRIMARY KEY, job_id INTEGER NOT NULL, time REAL NOT NULL,
        num_gpus INTEGER NOT NULL, batch_size INTEGER, placement TEXT NOT NULL
    );
    CREATE INDEX allocations_job ON allocations(job_id);
    CREATE TABLE progress (
        id INTEGER PRIMARY KEY, job_id INTEGER NOT NULL, time REAL NOT NULL, step INTEGER, epoch INTEGER,
        samples REAL, loss REAL, samples_per_s REAL, workers INTEGER, batch_size INTEGER
    );
    CREATE INDEX progress_job ON progress(job_id);
    CREATE TABLE events (
        id INTEGER PRIMARY KEY, time REAL NOT NULL, job_id INTEGER, kind TEXT NOT NULL, detail TEXT NOT NULL
    );
    CREATE INDEX events_job ON events(job_id);
    CREATE TABLE predictions (
        id INTEGER PRIMARY KEY, job_id INTEGER NOT NULL, time REAL NOT NULL, fraction_done REAL,
        total_samples REAL, remaining_s REAL, predicted_finish REAL, loss_fit TEXT
    );
    CREATE INDEX predictions_job ON predictions(job_id);
    """,
    # 2: the policy forecast (service/forecast.py) next to the at-current-allocation figures
    """
    ALTER TABLE predictions ADD COLUMN forecast_time REAL;
    ALTER TABLE predictions ADD COLUMN predicted_start REAL;
    ALTER TABLE predictions ADD COLUMN policy_finish REAL;
    CREATE TABLE forecasts (job_id INTEGER PRIMARY KEY, time REAL NOT NULL, start REAL, finish REAL);
    """,
    # 3: an operator's `dlsched resize`: the size the job is held at, whatever its spec's range
    """
    ALTER TABLE jobs ADD COLUMN requested_workers INTEGER;
    ALTER TABLE jobs ADD COLUMN requested_batch INTEGER;
    """,
    # 4: what a dlsched.torch job reports per step: its LR and gradient noise (Pollux's grad_sqr/grad_var at
    # noise_batch), for the goodput policy, the forecast and the dashboard
    """
    ALTER TABLE progress ADD COLUMN lr REAL;
    ALTER TABLE progress ADD COLUMN grad_sqr REAL;
    ALTER TABLE progress ADD COLUMN grad_var REAL;
    ALTER TABLE progress ADD COLUMN noise_batch INTEGER;
    """,
    # 5: while a job rescales, num_gpus is the target the scheduler reserves; the runtime trains on these until
    # it confirms the target (status shows and attained service charges these)
    """
    ALTER TABLE jobs ADD COLUMN training_gpus INTEGER;
    """,
    # 6: the slots {node: count} a grow given up past resize_timeout_s may still train on, past the job's books,
    # until the runtime confirms it runs at its size again (service/slot_holds.py keeps them out of the rounds)
    """
    ALTER TABLE jobs ADD COLUMN releasing TEXT;
    """,
    # 7: what each job that finished here left for the curve prior of new ones (``perf.prior.fit_record``: its
    # annealing fit's α and drop, its metadata, the value it ended at and the fit itself), so a restarted service
    # keeps it
    """
    CREATE TABLE finished_fits (job_id INTEGER PRIMARY KEY, fit TEXT NOT NULL);
    """,
    # 8: the LR rule's factor in a step's LR: across batch changes the schedule is the LR over it
    # (``service.progress_axis``)
    """
    ALTER TABLE progress ADD COLUMN lr_factor REAL;
    """,
    # 9: the metrics a script reports inside a step besides its loss (``dlsched.torch.report``; a training accuracy),
    # as a JSON object of numbers: a stated target of one is predicted from them (``service.metric_target``)
    """
    ALTER TABLE progress ADD COLUMN metrics TEXT;
    """,
    # 10: beside 7, the fit of the metric a finished job stated a target of (``spec.MetricTarget``): the prior of a
    # new job's target (``service.job_models``)
    """
    CREATE TABLE finished_target_fits (job_id INTEGER PRIMARY KEY, fit TEXT NOT NULL);
    """,
    # 11: an accuracy target's finished fit in fractions (``service.metric_target.reported_scale``), as a job
    # reporting in % kept it in % before: an error above 1 can only be in %. (One in % below 1, an accuracy over
    # 99 %, cannot be told apart and stays.) Its curve first, while its final still says so
    """
    UPDATE finished_target_fits SET fit = json_set(fit, '$.curve.l0', json_extract(fit, '$.curve.l0') / 100.0,
                                                   '$.curve.a', json_extract(fit, '$.curve.a') / 100.0)
     WHERE json_extract(fit, '$.meta.kind') = 'accuracy' AND json_extract(fit, '$.final') > 1
       AND json_type(fit, '$.curve') = 'object';
    UPDATE finished_target_fits SET fit = json_set(fit, '$.final', json_extract(fit, '$.final') / 100.0)
     WHERE json_extract(fit, '$.meta.kind') = 'accuracy' AND json_extract(fit, '$.final') > 1;
    """,
    # 12: the time through which a running job's run_time and attained_service are counted: a service that was down
    # counts the time its jobs trained meanwhile (their next round, or ``recovery`` from what the job folder says)
    """
    ALTER TABLE jobs ADD COLUMN accounted_until REAL;
    """,
    # 13: when the loop last read new progress of a running job (or started or resized it), and since when a job whose
    # processes live has made none past the cluster's stall_after_s (``service.stalls``)
    """
    ALTER TABLE jobs ADD COLUMN progressed_at REAL;
    ALTER TABLE jobs ADD COLUMN stalled_since REAL;
    """,
    # 14: an ensemble's step rows name the member that took the step and its own step count: its measured progress
    # and samples/s (``service.member_progress``); its status and forecast followed its profiles alone before
    """
    ALTER TABLE progress ADD COLUMN member TEXT;
    ALTER TABLE progress ADD COLUMN member_step INTEGER;
    CREATE INDEX progress_member ON progress(job_id, time) WHERE member IS NOT NULL;
    """,
    # 15: what a queued job waits for when its GPUs were free and its start failed (its folder's disk full, its
    # reservation timed out): it said "waiting for GPUs", the reason only in its events (``coordinator_loss``)
    """
    ALTER TABLE jobs ADD COLUMN waiting_for TEXT;
    """,
    # 16: the global batch a job's newest step ran at, as its runtime reports it: a script's own batch (`submit --
    # python train.py` with no --batch-size) is no scheduler's choice, and status showed none (``loop.trained_batch``)
    """
    ALTER TABLE jobs ADD COLUMN trained_batch INTEGER;
    """,
    # 17: the remaining time at the fast and the slow end of the job's recent speed (``refit.rate_spread``): a
    # busy machine's prediction moved 2x between rounds, and nothing said how far it could
    """
    ALTER TABLE predictions ADD COLUMN remaining_lo_s REAL;
    ALTER TABLE predictions ADD COLUMN remaining_hi_s REAL;
    """,
]


def _edge_fields(old: str, new: str, start_time: float | None, now: float, fields: dict[str, Any]) -> None:
    """Add to a transition's ``fields`` what its edge implies (those the caller set stand)."""
    if new == RUNNING and start_time is None:
        fields.setdefault("start_time", now)
    if new not in (RUNNING, RESCALING):   # its processes are gone: nothing of theirs to hold
        fields.setdefault("releasing", None)
    if new != QUEUED or old != QUEUED:   # what held a queued job back holds it no more
        fields.setdefault("waiting_for", None)
    if new in TERMINAL:
        fields.setdefault("end_time", now)
        fields.setdefault("num_gpus", 0)
        fields.setdefault("placement", {})
    fields["state"] = new


def _resize_event(job: JobRecord, workers: int | None, batch_size: int | None) -> tuple[str, dict] | None:
    """The event of a ``request_resize``: a hold asked for, or one released (what it held); releasing none, none."""
    if workers is not None or batch_size is not None:
        return "resize_requested", {"workers": workers, "batch_size": batch_size}
    if job.requested_workers is not None or job.requested_batch is not None:
        return "resize_released", {"workers": job.requested_workers, "batch_size": job.requested_batch}
    return None


def _prediction(row: sqlite3.Row) -> dict:
    return dict(row) | {"loss_fit": json.loads(row["loss_fit"]) if row["loss_fit"] else None}


# A job's history of predictions keeps one per minute or per 1 % of its progress, whichever comes first: the loop
# stores one every round the job trains, about 600 bytes at 2 s rounds, 26 MB a day of one job, never pruned. Its
# readers (the run report's predicted-vs-actual, own_calibration's fraction bands) need no finer grid.
KEEP_EVERY_S = 60.0
KEEP_EVERY_FRACTION = 0.01


def _superseded(newest: sqlite3.Row, before: sqlite3.Row) -> bool:
    """Whether the newest row is within a minute and 1 % of progress of the one before it: the next replaces it."""
    if newest["time"] - before["time"] >= KEEP_EVERY_S:
        return False
    done, was = newest["fraction_done"], before["fraction_done"]
    return (done is None) == (was is None) and (done is None or abs(done - was) < KEEP_EVERY_FRACTION)


def _insert_prediction(c: sqlite3.Connection, job_id: int, values: tuple) -> None:
    """A job's new prediction (``values``: time .. remaining_hi_s). Its previous one is replaced where superseded,
    else it stays and loses its ``loss_fit``'s ``curve`` (and its metric target's): 121 curve points were about
    93 % of a row, and only the newest curve is read."""
    last = c.execute("SELECT id, time, fraction_done FROM predictions WHERE job_id = ? ORDER BY id DESC LIMIT 2",
                     (job_id,)).fetchall()
    if len(last) == 2 and _superseded(*last):
        c.execute("DELETE FROM predictions WHERE id = ?", (last[0]["id"],))
    elif last:
        c.execute("UPDATE predictions SET loss_fit = json_remove(loss_fit, '$.curve', '$.metric_target.curve') "
                  "WHERE id = ? AND loss_fit IS NOT NULL", (last[0]["id"],))
    c.execute("INSERT INTO predictions(job_id, time, fraction_done, total_samples, remaining_s, predicted_finish, "
              "loss_fit, forecast_time, predicted_start, policy_finish, remaining_lo_s, remaining_hi_s) "
              "VALUES (?,?,?,?,?,?,?,?,?,?,?,?)", (job_id, *values))


_PROGRESS_COLUMNS = ("time, step, epoch, samples, loss, samples_per_s, workers, batch_size, lr, lr_factor, grad_sqr, "
                    "grad_var, noise_batch")


def _progress_rows(c: sqlite3.Connection, job_id: int, after_id: int | None,
                   loss_points: int | None, limit: int | None = None) -> list[dict]:
    """``Store.progress``."""
    columns = _PROGRESS_COLUMNS if after_id is None else "id, " + _PROGRESS_COLUMNS
    if loss_points is None:
        return [dict(r) for r in c.execute(f"SELECT {columns} FROM progress WHERE job_id = ? AND id > ? ORDER BY id "
                                           "LIMIT ?", (job_id, after_id or 0, -1 if limit is None else limit))]
    # Pick the ids first and read only their rows: reading a day's 100 000 rows (one a step) to draw 400 points
    # took 0.37 s of every 3 s dashboard refresh, the ids alone about 0.05 s.
    ids = [r[0] for r in c.execute("SELECT id FROM progress WHERE job_id = ? AND id > ? AND step IS NOT NULL "
                                   "AND loss IS NOT NULL ORDER BY id", (job_id, after_id or 0))]
    picked = ids[::max(1, math.ceil(len(ids) / max(loss_points, 1)))]
    picked += ids[-1:] if ids and picked[-1] != ids[-1] else []
    # one JSON parameter, not one a row: SQLite takes at most 32 766 (``?points=`` may ask for every row)
    return [dict(r) for r in c.execute(f"SELECT {columns} FROM progress WHERE id IN (SELECT value FROM json_each(?)) "
                                       "ORDER BY id", (json.dumps(picked),))]


def _number(x: Any) -> float | None:
    return float(x) if is_number(x) else None


def _step_metrics(metrics: Any) -> str | None:
    """A step record's reported metrics as stored (migration 9): its finite numbers; None when it has none."""
    kept = {k: float(v) for k, v in metrics.items() if is_number(v) and math.isfinite(v)} \
        if isinstance(metrics, dict) else {}
    return json.dumps(kept) if kept else None


@dataclass(frozen=True)
class MetricReports:
    """A metric's reports by a job (``Store.metric_values``): (step, value) inside steps (on its progress rows) and
    between them (its evaluation events), each in the order stored; ``seen``: the last (progress id, event id) read,
    from which a later read goes on."""

    inside: tuple[tuple[float, float], ...]
    between: tuple[tuple[float, float], ...]
    seen: tuple[int, int]

    @property
    def values(self) -> list[tuple[float, float]]:
        """Inside, then between: an evaluation, made after the step it names, is the later report of that step."""
        return list(self.inside + self.between)


def _metric_values(c: sqlite3.Connection, job_id: int, metric: str, event_kind: str, after: tuple[int, int],
                   points: int | None) -> MetricReports:
    """``Store.metric_values``."""
    ids = [r[0] for r in c.execute("SELECT id FROM progress WHERE job_id = ? AND id > ? AND metrics IS NOT NULL "
                                   "ORDER BY id", (job_id, after[0]))]
    last = ids[-1] if ids else after[0]
    if points:   # every k-th row that reports metrics, and the newest (a curve to draw)
        ids = ids[::max(1, math.ceil(len(ids) / points))] + ids[-1:]
    # one JSON parameter, not one a row (``_progress_rows``)
    inside = c.execute("SELECT p.step, j.value FROM progress p, json_each(p.metrics) j WHERE p.id IN (SELECT value "
                       "FROM json_each(?)) AND j.key = ? AND p.step IS NOT NULL ORDER BY p.id",
                       (json.dumps(sorted(set(ids))), metric)).fetchall()
    # in Python: an event an older dlsched stored may hold a NaN, which SQLite's JSON functions refuse
    rows = c.execute("SELECT id, detail FROM events WHERE job_id = ? AND kind = ? AND id > ? ORDER BY id",
                     (job_id, event_kind, after[1])).fetchall()
    details = [json.loads(r[1]) for r in rows]
    between = [(d.get("step"), d["metrics"].get(metric)) for d in details if isinstance(d.get("metrics"), dict)]
    kept = [[(float(step), float(v)) for step, v in part if is_number(step) and is_number(v) and math.isfinite(v)]
            for part in (inside, between)]
    return MetricReports(tuple(kept[0]), tuple(kept[1]), (last, rows[-1][0] if rows else after[1]))


def _add_finished_fit(c: sqlite3.Connection, job_id: int, fit: dict, target: dict | None) -> None:
    """``Store.add_finished_fit``."""
    c.execute("INSERT OR REPLACE INTO finished_fits(job_id, fit) VALUES (?,?)", (job_id, json.dumps(fit)))
    if target is not None:
        c.execute("INSERT OR REPLACE INTO finished_target_fits(job_id, fit) VALUES (?,?)", (job_id, json.dumps(target)))


def _member(rec: dict) -> tuple[str | None, int | None]:
    """(member, member_step) of an ensemble's step record (``train.fleet_job``); None where job code wrote no name
    (or a long one) or no whole step count (``backends.base.STEP_NUMBERS`` kept it within 64 bits)."""
    name, step = rec.get("member"), rec.get("member_step")
    ok = isinstance(name, str) and 0 < len(name) <= 64
    return (name if ok else None), (step if ok and isinstance(step, int) and not isinstance(step, bool) else None)


def _noise(noise: Any) -> tuple[float | None, float | None, int | None]:
    """(grad_sqr, grad_var, noise_batch) of a step record's ``grad_noise`` (protocol.GradientNoiseRecord)."""
    if not isinstance(noise, dict):
        return None, None, None
    batch = noise.get("reference_batch")
    return _number(noise.get("sqr")), _number(noise.get("var")), int(batch) if isinstance(batch, int) else None


class TransitionError(ValueError):
    """An edge the job state machine does not have (e.g. finished -> running)."""


class ResizeRefused(ValueError):
    """A hand resize outside the job's own spec (the message names the field and the value)."""


class UnknownJob(KeyError):
    pass


@dataclass(frozen=True)
class JobRecord:
    """One row of ``jobs``, decoded."""

    id: int
    name: str
    spec: JobSpec
    state: str
    submit_time: float
    start_time: float | None
    end_time: float | None
    num_gpus: int
    placement: dict[str, int]          # node -> workers, nodes in the order of the workers' ranks
    batch_size: int | None
    generation: int
    attained_service: float
    run_time: float
    samples: float
    total_samples: float | None
    last_loss: float | None
    samples_per_s: float | None
    progress_offset: int
    cancel_requested: bool
    error: str | None
    job_dir: str | None
    requested_workers: int | None = None
    requested_batch: int | None = None
    training_gpus: int | None = None    # what the runtime trains on while rescaling to num_gpus
    releasing: dict[str, int] | None = None   # slots past placement its processes may still use (slot_holds.py)
    accounted_until: float | None = None   # run_time/attained_service count the time it ran up to here
    progressed_at: float | None = None     # when its last new progress was read (or it started or resized)
    stalled_since: float | None = None     # its processes live, no progress since then (service/stalls.py)
    waiting_for: str | None = None         # queued: what it waits for besides GPUs (service/coordinator_loss.py)
    trained_batch: int | None = None       # the global batch its newest step ran at (its runtime's word)

    @property
    def held_gpus(self) -> int:
        """The GPUs the job trains on now: until the runtime confirms a resize, its size before it."""
        return self.training_gpus if self.state == RESCALING and self.training_gpus is not None else self.num_gpus

    def public(self) -> dict[str, Any]:
        # progress_offset shown: how far the service read the job's log (which rotated segments it read past)
        skip = ("spec", "training_gpus", "releasing", "accounted_until", "progressed_at")
        d = {k: getattr(self, k) for k in self.__dataclass_fields__ if k not in skip}
        # num_gpus as held, the scheduler's reservation beside it while a resize is pending
        d["num_gpus"], d["target_gpus"] = self.held_gpus, self.num_gpus if self.state == RESCALING else None
        d["spec"] = self.spec.model_dump(mode="json", exclude_none=True)
        d["fraction_done"] = (self.samples / self.total_samples) if self.total_samples else None
        return d


def _decode(row: sqlite3.Row, cache: dict[int, tuple[tuple, JobRecord]]) -> JobRecord:
    """Row -> JobRecord, reusing the previous object when the row is unchanged (a round over 1 000 queued
    jobs then decodes only the few that moved; specs never change, so they are parsed once per process)."""
    raw = tuple(row)
    hit = cache.get(raw[0])
    if hit is not None and hit[0] == raw:
        return hit[1]
    d = dict(row)
    d["spec"] = hit[1].spec if hit is not None else JobSpec.model_validate_json(d["spec"])
    d["placement"] = json.loads(d["placement"])
    d["releasing"] = json.loads(d["releasing"]) if d["releasing"] else None
    d["cancel_requested"] = bool(d["cancel_requested"])
    rec = JobRecord(**d)
    if rec.state in TERMINAL:
        cache.pop(rec.id, None)      # finished jobs are read rarely: keep the cache the size of the live queue
    else:
        cache[rec.id] = (raw, rec)
    return rec


# how long a write waits for SQLite's write lock (held by the loop's round, or by another process: an sqlite3 shell,
# a backup tool) before it fails; ``unavailable`` says so, and a client waits longer than this for a write's answer
BUSY_TIMEOUT_S = 30.0


def unavailable(e: sqlite3.OperationalError) -> str:
    """One line for a write the database refused (the transaction was rolled back: nothing changed)."""
    text = str(e)
    if "locked" in text or "busy" in text:
        why = (f"the service's database stayed locked for {BUSY_TIMEOUT_S:g} s (another process holds it: an sqlite3 "
               "shell, a backup?)")
    elif "full" in text:
        why = "the disk of the service's state folder is full"
    elif "readonly" in text or "read-only" in text:
        why = "the service's database is read-only (its state folder or file)"
    else:
        why = f"the service's database failed ({text})"
    return f"{why}; nothing was changed: retry when it is fixed"


def unopenable(path: str | Path, e: sqlite3.DatabaseError) -> str:
    """One line for a database the service cannot start on (a traceback of 79 lines before)."""
    text = str(e)
    if "not a database" in text or "malformed" in text:
        return (f"{path}: the service's database is damaged ({text}); restore it from a backup (or salvage it: "
                "sqlite3 dlsched.db .recover), or start on another --state-dir")
    return f"{path}: cannot open the service's database: {unavailable(e).split('; nothing')[0]}"


class Store:
    """Thread-safe access to the service database (one connection per thread)."""

    def __init__(self, path: str | Path, clock=time.time):
        self.path = str(path)
        if self.path != ":memory:":   # every job's spec and events: this user's only (SQLite gives -wal/-shm its mode)
            private_file(self.path)
            for side in ("-wal", "-shm"):   # left 0644 by a dlsched before this rule
                tighten(self.path + side)
        self.clock = clock
        self._local = threading.local()
        self._records: dict[int, tuple[tuple, JobRecord]] = {}
        self._migrate()

    # -- connections -------------------------------------------------------------------------
    def _conn(self) -> sqlite3.Connection:
        c = getattr(self._local, "conn", None)
        if c is None:
            c = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_S, isolation_level=None, check_same_thread=False)
            c.row_factory = sqlite3.Row
            c.execute("PRAGMA journal_mode=WAL")
            c.execute("PRAGMA synchronous=FULL")     # acknowledged == durable, even on power loss
            c.execute("PRAGMA foreign_keys=ON")
            self._local.conn = c
        return c

    def close(self) -> None:
        c = getattr(self._local, "conn", None)
        if c is not None:
            c.close()
            self._local.conn = None

    def _tx(self):
        return _Transaction(self._conn(), self._local)

    def batch(self):
        """Group many writes into one transaction (one fsync): ``with store.batch(): ...``. Nested calls join it."""
        return self._tx()

    def _migrate(self) -> None:
        c = self._conn()
        with self._tx():
            c.execute("CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL)")
            row = c.execute("SELECT MAX(version) FROM schema_version").fetchone()
            have = row[0] or 0
            if have > len(MIGRATIONS):
                raise RuntimeError(f"{self.path}: schema version {have} is newer than this dlsched ({len(MIGRATIONS)})")
            for v in range(have + 1, len(MIGRATIONS) + 1):
                for stmt in filter(str.strip, MIGRATIONS[v - 1].split(";")):
                    c.execute(stmt)
                c.execute("INSERT INTO schema_version(version) VALUES (?)", (v,))

    @property
    def schema_version(self) -> int:
        return self._conn().execute("SELECT MAX(version) FROM schema_version").fetchone()[0]

    # -- jobs ------------------------------------------------------------------------------------
    def submit(self, spec: JobSpec, now: float | None = None, check: Callable[[], None] | None = None) -> int:
        """Store a new queued job; returns its id once the row is durable. ``check()`` runs first in the same write
        transaction (no other submission in between); what it raises stores nothing."""
        now = self.clock() if now is None else now
        c = self._conn()
        with self._tx():
            if check is not None:
                check()
            cur = c.execute("INSERT INTO jobs(name, spec, state, submit_time, batch_size, total_samples) "
                            "VALUES (?, ?, ?, ?, ?, ?)",
                            (spec.name, spec.model_dump_json(), QUEUED, now, spec.batch_size, spec.total_samples))
            job_id = cur.lastrowid
            self._event(c, now, job_id, "submitted", {"name": spec.name, "gpus": spec.gpus})
        return job_id

    def submit_many(self, specs: list[JobSpec], now: float | None = None,
                    check: Callable[[], None] | None = None) -> list[int]:
        """Many submissions in one transaction, all or none (``POST /jobs/batch``, bulk loads, benchmarks); ``check``
        as ``submit``'s."""
        with self._tx():
            if check is not None:
                check()
            return [self.submit(s, now) for s in specs]

    def get(self, job_id: int) -> JobRecord:
        row = self._job_row(self._conn(), job_id, "*")
        return _decode(row, self._records)

    def jobs(self, states: Iterable[str] | None = None, limit: int | None = None) -> list[JobRecord]:
        q, args = "SELECT * FROM jobs", []
        if states is not None:
            states = list(states)
            q += f" WHERE state IN ({','.join('?' * len(states))})"
            args += states
        q += " ORDER BY id"
        if limit is not None:
            q += " LIMIT ?"
            args.append(limit)
        return [_decode(r, self._records) for r in self._conn().execute(q, args)]

    def count(self) -> int:
        return self._conn().execute("SELECT COUNT(*) FROM jobs").fetchone()[0]

    def transition(self, job_id: int, new_state: str, now: float | None = None, detail: dict | None = None,
                   **fields: Any) -> JobRecord:
        """Move a job along one edge of the state machine, updating ``fields`` in the same transaction."""
        now = self.clock() if now is None else now
        c = self._conn()
        with self._tx():
            row = self._job_row(c, job_id, "state, start_time")
            old = row["state"]
            if new_state != old and new_state not in TRANSITIONS[old]:
                raise TransitionError(f"job {job_id}: {old} -> {new_state} is not allowed")
            _edge_fields(old, new_state, row["start_time"], now, fields)
            self._update(c, job_id, fields)
            if new_state != old or (new_state == RESCALING and detail):   # a new target mid-resize is news too
                self._event(c, now, job_id, new_state, {"from": old, **(detail or {})})
        return self.get(job_id)

    def update(self, job_id: int, **fields: Any) -> None:
        """Update bookkeeping fields (never ``state``: use ``transition``)."""
        assert "state" not in fields
        with self._tx():
            self._update(self._conn(), job_id, fields)

    @staticmethod
    def _job_row(c: sqlite3.Connection, job_id: int, columns: str) -> sqlite3.Row:
        row = c.execute(f"SELECT {columns} FROM jobs WHERE id = ?", (job_id,)).fetchone()
        if row is None:
            raise UnknownJob(job_id)
        return row

    @staticmethod
    def _update(c: sqlite3.Connection, job_id: int, fields: dict[str, Any]) -> None:
        if not fields:
            return
        if "placement" in fields:   # in the workers' rank order, unsorted: a shrink keeps the first (placement.resized)
            fields["placement"] = json.dumps(dict(fields["placement"]))
        if "releasing" in fields:   # none (NULL) rather than an empty map
            fields["releasing"] = json.dumps(dict(fields["releasing"]), sort_keys=True) if fields["releasing"] else None
        cols = ", ".join(f"{k} = ?" for k in fields)
        c.execute(f"UPDATE jobs SET {cols} WHERE id = ?", (*fields.values(), job_id))

    def request_cancel(self, job_id: int, now: float | None = None) -> JobRecord:
        """Queued jobs are cancelled at once; running ones are flagged for the loop, which stops them (asking again
        is harmless). A job that already ended has nothing to cancel: ``TransitionError``, read on the row written."""
        now = self.clock() if now is None else now
        c = self._conn()
        with self._tx():
            row = _live_row(c, job_id, "state, start_time", "job {id} already {state}; nothing to cancel")
            if row["state"] == QUEUED:
                fields: dict[str, Any] = {"cancel_requested": 1}
                _edge_fields(QUEUED, CANCELLED, row["start_time"], now, fields)   # the edge's rules, as transition
                self._update(c, job_id, fields)
                self._event(c, now, job_id, CANCELLED, {"from": QUEUED})
            else:   # running or rescaling
                c.execute("UPDATE jobs SET cancel_requested = 1 WHERE id = ?", (job_id,))
                self._event(c, now, job_id, "cancel_requested", {})
        return self.get(job_id)

    def request_resize(self, job_id: int, workers: int | None, batch_size: int | None, now: float | None = None,
                       refuse: Callable[[JobSpec], str | None] | None = None) -> JobRecord:
        """Hold the job at ``workers`` and/or ``batch_size`` from the next round on (the policy sizes what is None);
        the loop applies it. Both None releases the hold: the policy sizes the job again.

        ``refuse(spec)``: why the job's own spec forbids it (``ResizeRefused``), checked on the one row read."""
        now = self.clock() if now is None else now
        c = self._conn()
        with self._tx():
            job = _decode(_live_row(c, job_id, "*", "job {id} is {state}; only queued or running jobs can be resized"),
                          self._records)
            why = refuse(job.spec) if refuse is not None else None
            if why:
                raise ResizeRefused(why)
            c.execute("UPDATE jobs SET requested_workers = ?, requested_batch = ? WHERE id = ?",
                      (workers, batch_size, job_id))
            if (event := _resize_event(job, workers, batch_size)) is not None:
                self._event(c, now, job_id, *event)
        return replace(job, requested_workers=workers, requested_batch=batch_size)

    # -- allocations, progress, events, predictions -------------------------------------------------
    def record_allocation(self, job_id: int, now: float, num_gpus: int, batch_size: int | None,
                          placement: dict[str, int]) -> None:
        with self._tx():
            self._conn().execute("INSERT INTO allocations(job_id, time, num_gpus, batch_size, placement) VALUES (?,?,?,?,?)",
                                 (job_id, now, num_gpus, batch_size, json.dumps(placement, sort_keys=True)))

    def allocations(self, job_id: int | None = None) -> list[dict]:
        q = "SELECT * FROM allocations" + (" WHERE job_id = ?" if job_id is not None else "") + " ORDER BY id"
        rows = self._conn().execute(q, () if job_id is None else (job_id,))
        return [dict(r) | {"placement": json.loads(r["placement"])} for r in rows]

    def add_progress(self, job_id: int, records: list[dict], new_offset: int, **job_fields: Any) -> int:
        """Append progress rows and advance the job's read offset atomically (idempotent across restarts). A
        restore's replayed steps replace the rows of the steps it rolled back (``replayed_steps``): returns how
        many stored rows were deleted (a reader that keeps rows in memory reads them again)."""
        with self._tx():
            records, deleted = drop_rolled_back(c := self._conn(), job_id, records)
            c.executemany(
                "INSERT INTO progress(job_id, time, step, epoch, samples, loss, samples_per_s, workers, batch_size, "
                "lr, lr_factor, grad_sqr, grad_var, noise_batch, metrics, member, member_step) "
                "VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                [(job_id, s.get("time"), s.get("step"), s.get("epoch"), s.get("samples"), s.get("loss"),
                  s.get("samples_per_s"), s.get("workers"), s.get("batch_size"), _number(s.get("lr")),
                  _number(s.get("lr_factor")), *_noise(s.get("grad_noise")), _step_metrics(s.get("metrics")),
                  *_member(s)) for s in records])
            self._update(c, job_id, {"progress_offset": new_offset, **job_fields})
        return deleted

    def progress(self, job_id: int, after_id: int | None = None, loss_points: int | None = None,
                 limit: int | None = None) -> list[dict]:
        """The job's progress rows (the first ``limit``); with ``after_id``, those stored after that row, each with its
        ``id`` (``service.progress_history`` reads only what is new); with ``loss_points``, every k-th of the rows that
        carry a step and a loss, at most that many, and the newest (a curve to draw)."""
        return _progress_rows(self._conn(), job_id, after_id, loss_points, limit)

    def event(self, kind: str, job_id: int | None = None, now: float | None = None, /, **detail: Any) -> None:
        # positional-only: a job's own progress event carries any keys into ``detail`` ({"job_id": 7} raised, every round)
        with self._tx():
            self._event(self._conn(), self.clock() if now is None else now, job_id, kind, detail)

    @staticmethod
    def _event(c: sqlite3.Connection, now: float, job_id: int | None, kind: str, detail: dict) -> None:
        # NaN/inf as null, as the API shows them: SQLite's JSON functions call a detail that holds one malformed
        c.execute("INSERT INTO events(time, job_id, kind, detail) VALUES (?,?,?,?)",
                  (now, job_id, kind, json.dumps(finite(detail), default=str)))

    def events(self, job_id: int | None = None, after_id: int = 0, limit: int = 1000,
               kinds: Iterable[str] | None = None) -> list[dict]:
        """Events after ``after_id``, oldest first; only those of ``job_id`` and of ``kinds`` when given."""
        q, args = "SELECT * FROM events WHERE id > ?", [after_id]
        if job_id is not None:
            q, args = q + " AND job_id = ?", args + [job_id]
        if kinds is not None:
            kinds = list(kinds)
            q, args = q + f" AND kind IN ({','.join('?' * len(kinds))})", args + kinds
        q, args = q + " ORDER BY id LIMIT ?", args + [limit]
        return [dict(r) | {"detail": json.loads(r["detail"])} for r in self._conn().execute(q, args)]

    def metric_values(self, job_id: int, metric: str, event_kind: str, after: tuple[int, int] = (0, 0),
                      points: int | None = None) -> MetricReports:
        """The job's reports of ``metric``: inside a step (its progress rows' ``metrics``) and between steps (its
        ``event_kind`` events' ``metrics``); those stored after ``after`` (a ``MetricReports.seen``); with ``points``,
        of the rows that report metrics every k-th, at most that many, and the newest. The finite numbers only."""
        return _metric_values(self._conn(), job_id, metric, event_kind, after, points)

    def last_event(self, job_id: int, kind: str, came_from: str) -> dict | None:
        """The detail of a job's newest ``kind`` transition out of state ``came_from``, None if none."""
        q = ("SELECT detail FROM events WHERE job_id = ? AND kind = ? AND json_extract(detail, '$.from') = ? "
             "ORDER BY id DESC LIMIT 1")
        row = self._conn().execute(q, (job_id, kind, came_from)).fetchone()
        return json.loads(row["detail"]) if row else None

    def rescale_started(self, job_id: int) -> float | None:
        """When the job's current resize was requested (its newest ``rescaling`` event), None if never: kept here,
        so a restarted service times a grow from its request, not from its own start."""
        row = self._conn().execute("SELECT time FROM events WHERE job_id = ? AND kind = ? ORDER BY id DESC LIMIT 1",
                                   (job_id, RESCALING)).fetchone()
        return row[0] if row else None

    def count_events(self, job_id: int, kind: str, detail_key: str) -> int:
        """How many ``kind`` events of a job carry ``detail_key`` (e.g. re-queues after a lost coordinator)."""
        q = "SELECT COUNT(*) FROM events WHERE job_id = ? AND kind = ? AND json_extract(detail, ?) IS NOT NULL"
        return self._conn().execute(q, (job_id, kind, f"$.{detail_key}")).fetchone()[0]

    def add_prediction(self, job_id: int, now: float, fraction_done: float | None, total_samples: float | None,
                       remaining_s: float | None, predicted_finish: float | None, loss_fit: dict | None, *,
                       forecast_time: float | None = None, predicted_start: float | None = None,
                       policy_finish: float | None = None,
                       remaining_range_s: tuple[float, float] | None = None) -> None:
        """``remaining_s``/``predicted_finish``: at the job's current allocation, ``remaining_range_s`` at the fast
        and slow end of its recent speed. ``forecast_time`` (when the policy forecast was made), ``predicted_start``
        and ``policy_finish``: the policy rolled forward. A NaN or inf in ``loss_fit`` is stored as null: the next
        prediction's ``json_remove`` would find it malformed."""
        lo, hi = remaining_range_s or (None, None)
        with self._tx():
            _insert_prediction(self._conn(), job_id, (now, fraction_done, total_samples, remaining_s, predicted_finish,
                                                      json.dumps(finite(loss_fit)) if loss_fit else None,
                                                      forecast_time, predicted_start, policy_finish, lo, hi))

    def set_forecast(self, now: float, times: Mapping[int, tuple[float | None, float | None]]) -> None:
        """Replace the current policy forecast: (start, finish) per active job. A snapshot, not a history (the
        history of what was forecast for running jobs is in ``predictions``)."""
        with self._tx():
            c = self._conn()
            c.execute("DELETE FROM forecasts")
            c.executemany("INSERT INTO forecasts(job_id, time, start, finish) VALUES (?,?,?,?)",
                          [(j, now, s, f) for j, (s, f) in times.items()])

    def forecasts(self) -> dict[int, dict]:
        return {r["job_id"]: dict(r) for r in self._conn().execute("SELECT * FROM forecasts")}

    def predictions(self, job_id: int, after_id: int = 0, limit: int | None = None) -> list[dict]:
        """The job's refits, oldest first: those stored after row ``after_id``, at most ``limit`` of them."""
        return [_prediction(r) for r in self._conn().execute(
            "SELECT * FROM predictions WHERE job_id = ? AND id > ? ORDER BY id LIMIT ?",
            (job_id, after_id, -1 if limit is None else limit))]

    def latest_prediction(self, job_id: int) -> dict | None:
        """The newest of ``predictions``: a job that ran for days has a refit for every round it trained."""
        return next(map(_prediction, self._conn().execute(
            "SELECT * FROM predictions WHERE job_id = ? ORDER BY id DESC LIMIT 1", (job_id,))), None)

    def latest_predictions(self, job_ids: Iterable[int] | None = None) -> dict[int, dict]:
        """Each job's newest prediction row; of ``job_ids`` only, when given (a scrape of the active jobs)."""
        # one index seek per job: a GROUP BY over every prediction took 0.16 s at 10^6 rows (a day of 25 jobs)
        rows = self._conn().execute(
            "SELECT * FROM predictions WHERE id IN (SELECT (SELECT MAX(id) FROM predictions WHERE job_id = j.id) "
            f"FROM ({'SELECT id FROM jobs' if job_ids is None else 'SELECT value AS id FROM json_each(?)'}) j)",
            () if job_ids is None else (json.dumps([int(i) for i in job_ids]),))
        return {r["job_id"]: dict(r) for r in rows}

    def add_finished_fit(self, job_id: int, fit: dict, target: dict | None = None) -> None:
        """A finished job's loss fit and, where it stated one, its target metric's (``perf.prior.fit_record``)."""
        with self._tx():
            _add_finished_fit(self._conn(), job_id, fit, target)

    def finished_fits(self) -> list[dict]:
        """The loss fits, then the target metrics' fits, each in the order the jobs were submitted."""
        return [json.loads(r["fit"]) for table in ("finished_fits", "finished_target_fits")
                for r in self._conn().execute(f"SELECT fit FROM {table} ORDER BY job_id")]

    def snapshot(self) -> dict[str, int]:
        """Row counts per table: used by tests to prove a refused request changed nothing."""
        c = self._conn()
        return {t: c.execute(f"SELECT COUNT(*) FROM {t}").fetchone()[0]
                for t in ("jobs", "allocations", "progress", "events", "predictions")}


def purge_ended(store: Store, before: float) -> dict[str, int]:
    """Delete the step rows, events and predictions of the jobs that ended before ``before``; their job rows
    (history: times, GPU time, outcome), allocations and finished fits stay. Rows deleted, per table."""
    ended = "SELECT id FROM jobs WHERE state IN (" + ",".join("?" * len(TERMINAL)) + ") AND end_time < ?"
    with store.batch():
        return {t: store._conn().execute(f"DELETE FROM {t} WHERE job_id IN ({ended})", (*TERMINAL, before)).rowcount
                for t in ("progress", "events", "predictions")}


def newest_finished(store: Store, limit: int) -> list[JobRecord]:
    """The ``limit`` jobs that finished last (state finished: not failed or cancelled), oldest first."""
    rows = store._conn().execute("SELECT * FROM jobs WHERE state = ? ORDER BY end_time DESC, id DESC LIMIT ?",
                                 (FINISHED, limit)).fetchall()
    return [_decode(r, store._records) for r in reversed(rows)]


def job_counts(store: Store) -> dict[str, int]:
    """Jobs per state (the states with none left out)."""
    return dict(store._conn().execute("SELECT state, COUNT(*) FROM jobs GROUP BY state").fetchall())


def event_counts(store: Store, after_id: int = 0) -> tuple[dict[str, int], int]:
    """The store's events after row ``after_id`` counted by kind, and the last row counted (to read on from)."""
    rows = store._conn().execute("SELECT kind, COUNT(*), MAX(id) FROM events WHERE id > ? GROUP BY kind",
                                 (after_id,)).fetchall()
    return {r[0]: r[1] for r in rows}, max((r[2] for r in rows), default=after_id)


def newest_fit_numbers(store: Store, job_id: int, lo: float, hi: float, fit: str,
                       names: tuple[str, ...]) -> tuple[list[float], str] | None:
    """(the numbers ``names``, bands) of the fit at JSON path ``fit`` in the loss fit (``$``: itself;
    ``$.metric_target``) of the job's newest prediction made with ``lo`` <= its fraction done <= ``hi`` that holds
    every one of them, if any (``service.own_calibration``); bands "fit" where the prediction did not say."""
    paths = [f"{fit}.{n}" for n in names]
    held = " AND ".join(["json_type(loss_fit, ?) IN ('real', 'integer')"] * len(paths))
    row = store._conn().execute(
        f"SELECT {', '.join(['json_extract(loss_fit, ?)'] * (len(paths) + 1))} FROM predictions WHERE job_id = ? "
        f"AND fraction_done BETWEEN ? AND ? AND {held} ORDER BY id DESC LIMIT 1",
        (*paths, f"{fit}.bands", job_id, lo, hi, *paths)).fetchone()
    return None if row is None else ([float(v) for v in row[:-1]], row[-1] or "fit")


def member_losses(store: Store, job_id: int) -> dict[str, float]:
    """member -> its newest step row's loss, of an ensemble job (``service.member_losses``)."""
    rows = store._conn().execute("SELECT member, loss FROM progress WHERE id IN (SELECT MAX(id) FROM progress WHERE job_id = ? "
                     "AND member IS NOT NULL AND loss IS NOT NULL GROUP BY member)", (job_id,)).fetchall()
    return {r[0]: float(r[1]) for r in rows if is_number(r[1]) and math.isfinite(r[1])}


def member_reports(store: Store, job_id: int, since: float) -> dict[str, tuple[dict, dict]]:
    """member -> (its first, its newest) step row stored from ``since`` on (the runtime's clock), each ``time``,
    ``member_step`` and ``batch_size``: what ``service.member_progress`` measures an ensemble's members by."""
    c = store._conn()
    ends = c.execute("SELECT member, MIN(id), MAX(id) FROM progress WHERE job_id = ? AND member IS NOT NULL "
                     "AND time >= ? AND member_step IS NOT NULL GROUP BY member", (job_id, since)).fetchall()
    ids = [i for r in ends for i in r[1:]]
    rows = {r["id"]: dict(r) for r in c.execute("SELECT id, time, member_step, batch_size FROM progress WHERE id IN "
                                                "(SELECT value FROM json_each(?))", (json.dumps(ids),))}
    return {r[0]: (rows[r[1]], rows[r[2]]) for r in ends}


def _live_row(c: sqlite3.Connection, job_id: int, columns: str, ended: str) -> sqlite3.Row:
    """The ``columns`` (``state`` among them) of a job that has not ended (``UnknownJob`` if there is none); one that
    has is a ``TransitionError``, ``ended`` formatted with its ``id`` and ``state``. Read inside the caller's
    transaction, on the row it writes."""
    row = Store._job_row(c, job_id, columns)
    if row["state"] in TERMINAL:
        raise TransitionError(ended.format(id=job_id, state=row["state"]))
    return row


def on_rollback(store: Store, undo: Callable[[], None]) -> None:
    """Run ``undo`` should the transaction open on this thread roll back (nothing when none is open: each write
    then commits at once). For books kept in memory beside the store's rows: a round that failed to commit (a full
    disk, a lock) had spent them on rows never stored, and its retry found them spent."""
    if store._conn().in_transaction:
        store._local.__dict__.setdefault("undo", []).append(undo)


class _Transaction:
    """``BEGIN IMMEDIATE`` ... ``COMMIT`` (or ``ROLLBACK``); nests as a no-op inside an open transaction."""

    def __init__(self, conn: sqlite3.Connection, local: threading.local | None = None):
        self.conn, self.local = conn, local
        self.outer = False

    def __enter__(self):
        if not self.conn.in_transaction:
            self.conn.execute("BEGIN IMMEDIATE")
            self.outer = True
        return self.conn

    def __exit__(self, exc_type, exc, tb):
        if not self.outer:
            return False
        try:
            if exc_type is None:
                self.conn.execute("COMMIT")
                self._undo(run=False)
                return False
        except sqlite3.Error:
            # a failed COMMIT (a full disk, an I/O error) may leave the transaction open, and with it the write lock
            # on this thread's connection: every later write of the service would wait on it
            self._rollback()
            raise
        self._rollback()
        return False

    def _rollback(self) -> None:
        # SQLite may have rolled back already (SQLITE_FULL inside the transaction): a second ROLLBACK would raise
        # and hide the error that caused it
        try:
            if self.conn.in_transaction:
                self.conn.execute("ROLLBACK")
        finally:
            self._undo(run=True)

    def _undo(self, run: bool) -> None:
        undo = self.local.__dict__.pop("undo", []) if self.local is not None else []
        for fn in reversed(undo) if run else ():
            fn()
