"""Trace readers: Pollux/Sia workload CSV, the Philly trace, Gavel's TSV trace -> a list of ``WorkloadJob``.

Every bad row is a one-line ``UserError`` naming the file, line, field and value; with ``skip_bad=True`` bad rows
are counted (``Workload.skipped``) and reported instead, never dropped silently.
"""
from __future__ import annotations

import csv
import gzip
import io
import math
import re
import zlib
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from dlsched.errors import UserError, plain
from dlsched.paths import shared_data

POLLUX_COLUMNS = ("name", "time", "application", "num_replicas", "batch_size")
PHILLY_COLUMNS = ("timestamp", "duration", "num_gpus", "gpu_time", "cluster")
# the columns read, and all a trace of one's own needs: gpu_time is duration x num_gpus, and the virtual cluster is
# not modelled (both were required, so a three-column trace was an "unrecognised workload header")
PHILLY_READ = PHILLY_COLUMNS[:3]
# a trace of one's own may name its jobs (the first of these columns it has): the reports carry that name, and a
# job exported twice is a bad row; without one a job is philly-LINE (the ids were dropped, a duplicate ran twice)
PHILLY_IDS = ("job_id", "jobid", "id", "name")
GAVEL_FIELDS = ("job_type", "command", "working_directory", "num_steps_arg", "needs_data_dir", "total_steps",
                "scale_factor", "priority_weight", "SLO", "arrival_time")


@dataclass(frozen=True)
class WorkloadJob:
    """One job of a workload. Trace-driven (``app`` + ``batch_size``: progress from the Pollux traces),
    duration-driven (``duration``: seconds of work when run on ``requested_gpus``) or an ensemble (``ensemble``: its
    members train in flotillas inside the share the policy gives it, ``sim/ensemble_job.py``)."""

    id: str
    submit_time: float
    requested_gpus: int
    app: str | None = None
    batch_size: int | None = None
    duration: float | None = None
    priority: float = 1.0
    ensemble: "EnsembleWork | None" = None   # dlsched.sim.ensemble_job (not imported: it builds WorkloadJobs)


@dataclass
class Workload:
    jobs: list[WorkloadJob]
    source: str = ""
    skipped: list[str] = field(default_factory=list)   # one line per skipped bad row
    assumed: list[str] = field(default_factory=list)   # what the reader assumed that the trace does not say


class _Rows:
    """Collects row errors: raise at once, or count them when skipping."""

    def __init__(self, path: Path, skip_bad: bool):
        self.path, self.skip_bad, self.skipped = path, skip_bad, []

    def bad(self, line: int, fld: str, value: object, why: str) -> None:
        msg = f"{self.path}:{line}: field {fld!r} = {plain(value)!r}: {why}"
        if not self.skip_bad:
            raise UserError(msg)
        self.skipped.append(msg)


def _ragged(rows: _Rows, line: int, row: dict, header: list[str], required: tuple[str, ...] = ()) -> bool:
    """A row with more fields than the header (csv puts the extra ones under None): a bad row, never truncated. A
    row short of a required field (csv gives it None) is one too, named as such: it read "field 'num_gpus' = None:
    not a valid integer", a Python value the file never held."""
    if None in row:
        rows.bad(line, "fields", len(header) + len(row[None]), f"expected {len(header)} comma-separated fields")
        return True
    missing = [c for c in required if row.get(c) is None]
    if not missing:
        return False
    rows.bad(line, "fields", sum(v is not None for v in row.values()),
             f"expected {len(header)} comma-separated fields ({', '.join(missing)} missing)")
    return True


def _unread_columns(path: Path, header: list[str] | None, own: tuple[str, ...], reader: str) -> list[str]:
    """A note for header columns the reader does not read (a ``gpu_type`` or ``job_id`` added to a trace of one's own
    cluster was dropped without a word; the simulator has no per-job GPU type or id column)."""
    extra = [c for c in header or [] if c and c not in own]
    if not extra:
        return []
    return [f"{path}: column(s) {', '.join(extra)} not read: not part of the {reader} format ({', '.join(own)})"]


def _num(rows: _Rows, line: int, row: dict, fld: str, kind=float, minimum: float | None = None,
         above: float | None = None):
    raw = row.get(fld)
    try:
        value = kind(raw)
        if kind is float and not math.isfinite(value):
            raise ValueError
    except (TypeError, ValueError):
        rows.bad(line, fld, raw, f"not a valid {'integer' if kind is int else 'number'}")
        return None
    if minimum is not None and value < minimum:
        rows.bad(line, fld, raw, f"must be >= {minimum}")
        return None
    if above is not None and value <= above:
        rows.bad(line, fld, raw, f"must be > {above}")
        return None
    return value


def read_trace_text(path: Path) -> str:
    """The trace's text, gunzipped when it is gzip; one line when it cannot be read or decoded."""
    try:
        raw = path.read_bytes()
    except OSError as e:
        raise UserError(f"{path}: cannot read: {e.strerror}") from None
    if raw[:2] == b"\x1f\x8b":
        try:
            raw = gzip.decompress(raw)
        except (OSError, EOFError, zlib.error) as e:
            raise UserError(f"{path}: gzip data is damaged ({e})") from None
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise UserError(f"{path}: byte {e.start} ({raw[e.start:e.start + 1]!r}) is not UTF-8; expected a UTF-8 "
                        f"CSV/TSV trace, plain or gzipped") from None


def _open_csv(path: Path, required: tuple[str, ...], text: str | None) -> csv.DictReader:
    # a line of spaces is a blank line, as csv skips an empty one (it was a bad row "expected 3 fields")
    lines = (read_trace_text(path) if text is None else text).splitlines()
    reader = csv.DictReader([line if line.strip() else "" for line in lines])
    if reader.fieldnames:   # "name, time, ..." is the same header (read_workload picks the reader that way)
        reader.fieldnames = [c.strip() for c in reader.fieldnames]
    missing = [c for c in required if c not in (reader.fieldnames or [])]
    if missing:
        raise UserError(f"{path}:1: header lacks column(s) {', '.join(missing)} (has {reader.fieldnames})")
    return reader


def read_pollux(path: str | Path, skip_bad: bool = False, known_apps: set[str] | None = None, *,
                text: str | None = None, batch_range=None) -> Workload:
    """``name,time,application,num_replicas,batch_size`` (shared/data/pollux/workloads/workload-*.csv).
    ``batch_range(app)`` -> (smallest, largest) batch size the app's traces validate, when given."""
    path = Path(path)
    rows, jobs, seen = _Rows(path, skip_bad), [], set()
    reader = _open_csv(path, POLLUX_COLUMNS, text)
    for row in reader:
        line = reader.line_num   # the file's line: counting rows named the wrong one after a blank line
        if _ragged(rows, line, row, reader.fieldnames, POLLUX_COLUMNS):
            continue
        name = (row.get("name") or "").strip()
        if not name:
            rows.bad(line, "name", row.get("name"), "empty")
            continue
        if name in seen:
            rows.bad(line, "name", name, "duplicate job name")
            continue
        app = (row.get("application") or "").strip()
        if known_apps is not None and app not in known_apps:
            rows.bad(line, "application", app, f"unknown application (known: {', '.join(sorted(known_apps))})")
            continue
        t = _num(rows, line, row, "time", float, 0)
        n = t is not None and _num(rows, line, row, "num_replicas", int, 1)
        b = n and _num(rows, line, row, "batch_size", int, 1)
        if t is None or not n or not b:
            continue
        if batch_range is not None and not batch_range(app)[0] <= b <= batch_range(app)[1]:
            lo, hi = batch_range(app)
            rows.bad(line, "batch_size", row.get("batch_size"), f"outside the batch sizes {lo}..{hi} the {app} "
                     f"traces validate")
            continue
        seen.add(name)
        jobs.append(WorkloadJob(name, t, n, app=app, batch_size=b))
    return Workload(_by_arrival(jobs), str(path), rows.skipped,
                    _unread_columns(path, reader.fieldnames, POLLUX_COLUMNS, "Pollux"))


# the last second a date-time can name: a number beyond it is no time in seconds
_LAST_SECOND = datetime(9999, 12, 31, 23, 59, 59, tzinfo=timezone.utc).timestamp()


def _unit_hint(value: float) -> str:
    """Why a number of seconds past year 9999 is refused: an export in ms, us or ns since 1970 (a Java or
    Prometheus clock) read as seconds put the next job years after the first, the run silently wrong."""
    for unit, per_s in (("milliseconds", 1e3), ("microseconds", 1e6), ("nanoseconds", 1e9)):
        if abs(value) / per_s <= _LAST_SECOND:
            when = datetime.fromtimestamp(value / per_s, timezone.utc)
            if 1990 <= when.year <= 2100:   # else no clock of these (20240310100000 is no ms count)
                return (f"past year 9999 as seconds; as {unit} since 1970 it is "
                        f"{when.isoformat(timespec='seconds')}: give seconds or a date-time")
    return "past year 9999 as seconds; give seconds since 1970 or a date-time (YYYY-MM-DD HH:MM:SS)"


def _instant(text: str) -> float | None:
    """Seconds of a timestamp: a date-time (ISO 8601) or a number of seconds (a Unix time, what many clusters log;
    it was a bad row). None when it is neither."""
    try:
        value = float(text)
        return value if math.isfinite(value) else None
    except ValueError:
        pass
    try:
        ts = datetime.fromisoformat(text.strip())
    except ValueError:
        return None
    # naive times are UTC: .timestamp() would read them in the machine's zone, whose DST changes shift every later
    # submission by an hour (the trace spans 2017's end of US daylight time)
    return (ts if ts.tzinfo else ts.replace(tzinfo=timezone.utc)).timestamp()


def read_philly(path: str | Path, skip_bad: bool = False, limit: int | None = None, *,
                text: str | None = None) -> Workload:
    """``timestamp,duration,num_gpus,gpu_time,cluster`` (shared/data/philly/philly.csv; a trace of one's own needs
    only the first three, and may name its jobs: ``PHILLY_IDS``); submit times are seconds after the earliest
    timestamp; each job runs ``duration`` seconds on ``num_gpus`` GPUs."""
    path = Path(path)
    rows, raw, seen = _Rows(path, skip_bad), [], {}
    reader = _open_csv(path, PHILLY_READ, text)
    id_col = next((c for c in PHILLY_IDS if c in reader.fieldnames), None)
    for row in reader:
        line = reader.line_num   # the file's line: counting rows named the wrong one after a blank line
        if _ragged(rows, line, row, reader.fieldnames, PHILLY_READ + ((id_col,) if id_col else ())):
            continue
        name = f"philly-{line}"
        if id_col:
            name = row[id_col].strip()
            if not name:
                rows.bad(line, id_col, row[id_col], "empty")
                continue
            if name in seen:
                rows.bad(line, id_col, name, f"duplicate job id (first on line {seen[name]})")
                continue
        ts = _instant(row.get("timestamp") or "")
        if ts is None:
            rows.bad(line, "timestamp", row.get("timestamp"), "not a date-time (YYYY-MM-DD HH:MM:SS) or seconds")
            continue
        if abs(ts) > _LAST_SECOND:
            rows.bad(line, "timestamp", row.get("timestamp"), _unit_hint(ts))
            continue
        # a zero duration became 1 s without a word (Philly's own shortest job is 1 s)
        d = _num(rows, line, row, "duration", float, above=0)
        if d is None:
            continue
        g = _num(rows, line, row, "num_gpus", int, 1)
        if g is None:
            continue
        seen[name] = line
        raw.append((ts, name, d, g))
        if limit and len(raw) >= limit:
            break
    t0 = min((r[0] for r in raw), default=0.0)
    jobs = [WorkloadJob(name, ts - t0, g, duration=d) for ts, name, d, g in raw]
    # gpu_time and cluster are the format's own columns: not read, but no surprise to a Philly trace's user
    return Workload(_by_arrival(jobs), str(path), rows.skipped,
                    _unread_columns(path, reader.fieldnames, PHILLY_COLUMNS + ((id_col,) if id_col else ()),
                                    "Philly"))


def read_gavel(path: str | Path, skip_bad: bool = False, steps_per_second: dict[str, float] | None = None, *,
               text: str | None = None) -> Workload:
    """Gavel's trace (stanford-futuredata/gavel, scheduler/traces): 10 tab-separated fields per line, no header:
    job_type, command, working_directory, num_steps_arg, needs_data_dir, total_steps, scale_factor (GPUs),
    priority_weight, SLO, arrival_time. Gavel traces count steps, not seconds: ``steps_per_second`` (per job
    type, on the requested GPUs) converts them; 1 step/s where not given."""
    path = Path(path)
    rows, jobs = _Rows(path, skip_bad), []
    rates = steps_per_second or {}
    unrated: set[str] = set()
    with io.StringIO(read_trace_text(path) if text is None else text) as f:
        for line, text in enumerate(f, start=1):
            if not text.strip() or text.startswith("#"):
                continue
            parts = text.rstrip("\n").split("\t")
            if len(parts) != len(GAVEL_FIELDS):
                rows.bad(line, "fields", len(parts), f"expected {len(GAVEL_FIELDS)} tab-separated fields")
                continue
            row = dict(zip(GAVEL_FIELDS, parts))
            steps = _num(rows, line, row, "total_steps", int, 1)
            g = steps is not None and _num(rows, line, row, "scale_factor", int, 1)
            t = g and _num(rows, line, row, "arrival_time", float, 0)
            w = t is not None and g and _num(rows, line, row, "priority_weight", float, 0)
            if steps is None or not g or t is None or w is None or w is False:
                continue
            rate = rates.get(row["job_type"], 1.0)
            jobs.append(WorkloadJob(f"gavel-{line}", t, g, app=None, duration=steps / rate, priority=w))
            if row["job_type"] not in rates:
                unrated.add(row["job_type"])
    assumed = [f"{path}: no steps/s known for {len(unrated)} job type(s) (e.g. {min(unrated)!r}): their "
               f"total_steps are taken as seconds (1 step/s)"] if unrated else []
    return Workload(_by_arrival(jobs), str(path), rows.skipped, assumed)


def _pollux_workloads() -> Path | None:
    try:
        return shared_data() / "pollux" / "workloads"
    except FileNotFoundError:
        return None


def _bundled_numbers() -> list[str]:
    folder = _pollux_workloads()
    names = sorted(folder.glob("workload-*.csv")) if folder else []
    return [p.stem.removeprefix("workload-") for p in names]


def bundled_workload(path: Path) -> Path:
    """``3`` or ``workload-3`` names the Pollux artifact's workload 3 when no such file is here."""
    m = re.fullmatch(r"(?:workload-)?(\d+)(?:\.csv)?", path.name)
    folder = _pollux_workloads()
    if path.exists() or path.parent != Path(".") or not m or folder is None:
        return path
    bundled = folder / f"workload-{m.group(1)}.csv"
    return bundled if bundled.is_file() else path


def read_workload(path: str | Path, skip_bad: bool = False, limit: int | None = None) -> Workload:
    """Pick the reader from the file: a Pollux or Philly CSV header, else Gavel's TSV."""
    path = bundled_workload(Path(path))
    if path.is_dir():
        raise UserError(f"{path}: is a directory, not a workload file")
    if not path.is_file():
        raise UserError(f"{path}: no such workload file "
                        f"(or a Pollux workload's number: {', '.join(_bundled_numbers()) or 'none found'})")
    text = read_trace_text(path)   # read (and gunzipped) once: the header picks the reader, which parses it
    first = text.partition("\n")[0]
    # parsed as CSV: a quoted header ("timestamp","duration",... from a spreadsheet or QUOTE_ALL) was unrecognised
    header = {c.strip() for c in next(csv.reader([first]), [])}
    if limit is not None and not (set(PHILLY_READ) <= header and not set(POLLUX_COLUMNS) <= header):
        raise UserError(f"limit: {limit} (first rows) applies to a Philly trace only; {path} is not one")
    if set(POLLUX_COLUMNS) <= header:
        from dlsched.perf.pollux import load_app
        from dlsched.perf.profile import POLLUX_APPS

        def batch_range(app: str) -> tuple[int, int]:
            return load_app(app).init_batch_size, load_app(app).max_batch_size

        return read_pollux(path, skip_bad, known_apps=set(POLLUX_APPS), text=text, batch_range=batch_range)
    if set(PHILLY_READ) <= header:
        return read_philly(path, skip_bad, limit, text=text)
    if first.count("\t") == len(GAVEL_FIELDS) - 1:
        return read_gavel(path, skip_bad, text=text)
    raise UserError(f"{path}:1: unrecognised workload header {first.strip()[:80]!r}; expected Pollux CSV "
                    f"({','.join(POLLUX_COLUMNS)}), Philly CSV ({','.join(PHILLY_READ)}[,gpu_time,cluster]) or "
                    f"Gavel TSV")


def _by_arrival(jobs: list[WorkloadJob]) -> list[WorkloadJob]:
    return sorted(jobs, key=lambda j: j.submit_time)   # stable: file order breaks ties
