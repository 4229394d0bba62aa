"""Read a training curve (x, metric, and optionally LR and wall-clock time) from the logs people have.

* CSV with named columns, including Lightning's ``metrics.csv`` (sparse: each row fills some columns) and
  timm's ``summary.csv``; rows without the metric still give the LR (the planned schedule ahead);
* TensorBoard event files (a file or a folder), via ``tbparse`` or else ``tensorboard``'s own reader;
  ``--y``/``--lr-col`` name scalar tags (``RUN/TAG`` for runs in subfolders), x is the event step, time the
  event wall time;
* Hugging Face ``trainer_state.json`` (``log_history``; budget = ``max_steps``, over epochs where it falls);
* a folder: the first of ``FOLDER_LOGS`` in it (Ultralytics' ``results.csv`` last), else the newest
  ``checkpoint-N/trainer_state.json``, else Lightning's newest ``version_N/metrics.csv`` (in it or in its
  ``save_dir``'s ``lightning_logs/``), else its TensorBoard
  events;
* TSV (``.tsv``), as CSV; DAWNBench's entries are TSV;
* plain-text logs, any other name: MLPerf ``:::MLLOG`` lines, or printed ``name:value`` pairs
  (``perf.text_logs``; a ``step:N/M`` total is the budget);
* a job folder's ``progress.jsonl`` (``dlsched.train.protocol.StepRecord``: one record per step with
  ``loss``, ``lr``, ``time``, the user's ``metrics``; ``metrics`` events add evaluations, ``epoch_end`` events
  each epoch's ``mean_loss``; the step budget is
  ``step + (total_samples − samples) / batch_size`` of the last record, or a ``budget`` field, the samples budget
  its ``total_samples``, the epoch budget its ``epochs``; a record's ``epoch`` is the one it trains in, from 0;
  its ``lr`` is the schedule's, the logged LR over the LR rule's ``lr_factor`` where a
  record says it (not read where the batch changed and a step record does not); a running job's ``lr_plan.json`` beside it adds the LR still to come,
  ``dlsched.torch.lr_plan``; over ``--x epoch``, not the epoch a running job is still in). A job whose batch
  changed is read over ``--x samples`` (a step at twice the batch trains twice the samples): over steps, the curve bends at every change (``CurveData.note`` says so).

An epoch x that its logger numbers from 0 (Keras' CSVLogger and TensorBoard ``epoch_*`` tags, timm, Lightning) is
marked (``CurveData.epochs_from_zero``): ``predict curve`` reads it as finished epochs, x + 1.
Empty, nan and ±inf cells are missing points; a time column may hold seconds or ISO-8601 timestamps, or another
unit its name says (``TIME_UNITS``: ``hours``, ``minutes``, ``*_ms``). A budget
the log names is only returned in the units of ``x`` (steps, or HF's epochs).
Every bad input is a ``UserError``: one line naming the file and the field, and a bad cell's row as the other
readers name it (a CSV's "line N" with the header as line 1, ``perf.profile.csv_line``; else the Nth record read).
"""
from __future__ import annotations

import dataclasses
import json
import math
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from dlsched.errors import UserError, plain
from dlsched.perf.profile import csv_line, read_csv_text
from dlsched.perf.text_logs import read_text_log
from dlsched.train.files import planned_samples, planned_schedule_lr, read_json_lines, read_lr_plan
from dlsched.train.progress_log import LIVE, iter_records, removed_bytes


@dataclass(frozen=True)
class CurveData:
    source: str
    x: np.ndarray
    y: np.ndarray
    time: np.ndarray | None = None          # wall-clock seconds per point of (x, y)
    lr_x: np.ndarray | None = None          # the LR where logged: may run past the last metric point
    lr: np.ndarray | None = None
    budget: float | None = None             # from the log itself (HF max_steps, progress.jsonl budget)
    lr_name: str | None = None              # the column (tag) the LR came from: --lr-col, else ``logged_lr_column``
    # the logger that wrote it, where x is its epoch, it numbers the first finished epoch 0 and the log starts
    # there (``zero_based_epochs``): x + 1 counts finished epochs
    epochs_from_zero: str | None = None
    note: str | None = None                 # what the reader saw that the user should know (one line)
    # per point of (x, y), the run that wrote it: a restart (a new event file, a new coordinator run, a CSV's x
    # going back) starts another; the speed is read within one, never across a stop
    session: np.ndarray | None = None


def _record(i: int) -> str:
    return f"record {i + 1}"


def _csv_row(i: int) -> str:
    return f"line {csv_line(i)}"


def _frame_to_curve(df: pd.DataFrame, src: str, x: str, y: str, lr_col: str | None, time_col: str | None,
                    budget: float | None = None, row_name=_record, writer: str | None = None) -> CurveData:
    lr_col = lr_col or logged_lr_column(df)   # one default for every format
    for name, col in (("--x", x), ("--y", y), ("--lr-col", lr_col), ("--time-col", time_col)):
        if col is not None and col not in df.columns:
            have = ", ".join(map(str, df.columns)) or "none"
            raise UserError(f"{src}: no column {col!r} for {name} (have: {have})")
    num = lambda c: pd.to_numeric(df[c], errors="coerce")  # noqa: E731
    times = _seconds(df[time_col], seconds_per_unit(time_col)) if time_col else None
    xs = num(x)
    for c in [x, y] + [c for c in (lr_col, time_col) if c]:
        got = times if c == time_col else num(c)
        bad = got.isna() & ~missing_cells(df[c])
        if bad.any():
            i = int(np.flatnonzero(bad.to_numpy())[0])
            what = "seconds or an ISO-8601 time" if c == time_col else "a number"
            raise UserError(f"{src}: {row_name(df.index[i])}, field {c!r}: expected {what}, got {plain(df[c].iloc[i])!r}")
    # ±inf is a logged overflow (AMP's skipped steps log inf as often as nan): a missing point like nan
    finite = lambda s: s.where(np.isfinite(s.astype(float)))  # noqa: E731
    rows = pd.DataFrame({"x": finite(xs), "y": finite(num(y))})
    if time_col:
        rows["t"] = times
        # the writer where the log names it, else a new run wherever x goes back (a resumed run logs again)
        back = xs < xs.ffill().shift()
        rows["run"] = pd.factorize(df[writer])[0] if writer in df.columns else back.cumsum().to_numpy()
    rows = rows[rows.x.notna() & rows.y.notna()]
    note = _goes_back(rows.x, x, row_name)
    # Lightning logs a metric at epoch end and step level under the same step: the last row per x wins
    rows = rows.groupby("x", sort=True).last().reset_index()
    if rows.empty:
        raise UserError(f"{src}: no rows with finite {x!r} and {y!r}")
    lr_x = lr = None
    if lr_col:
        lr_at = xs
        if x != "step" and "step" in df.columns and (xs.isna() & num(lr_col).notna()).any():
            # Lightning's LearningRateMonitor rows carry a step and no epoch: placed where the metric's rows put it
            lr_at = xs.fillna(_x_at_step(num("step"), xs, num(y).notna()))
        lrs = pd.DataFrame({"x": finite(lr_at), "lr": finite(num(lr_col))}).dropna()
        lrs = lrs.groupby("x", sort=True).last().reset_index()
        if (lrs.lr < 0).any():
            raise UserError(f"{src}: field {lr_col!r}: learning rates must be >= 0")
        lr_x, lr = lrs.x.to_numpy(float), lrs.lr.to_numpy(float)
    return CurveData(src, rows.x.to_numpy(float), rows.y.to_numpy(float),
                     rows.t.to_numpy(float) if time_col else None, lr_x, lr, budget, lr_col,
                     session=rows.run.to_numpy() if time_col else None, note=note)


def _goes_back(xs: pd.Series, x: str, row_name) -> str | None:
    """Where the metric's x first goes back in the file's order, said: a run resumed from a checkpoint logs its steps
    again (its rows win), but one whose counter began again from 0 overwrites the run before it, silently."""
    back = np.flatnonzero(np.diff(xs.to_numpy(float)) < 0)
    if not back.size:
        return None
    i = int(back[0])
    return (f"{x} goes back {'once' if back.size == 1 else f'{back.size} times'}, first at "
            f"{row_name(xs.index[i + 1])} ({xs.iloc[i]:g}, then {xs.iloc[i + 1]:g}): of rows with the same {x} the "
            f"last is read (a resumed run's); a run whose {x} began again from 0 needs its own file")


def _x_at_step(steps: pd.Series, xs: pd.Series, metric_rows: pd.Series) -> pd.Series:
    """x at every step, by a line through the (step, x) of the metric's own rows (an epoch counts steps at one
    pace); NaN where fewer than two steps of them say it."""
    both = metric_rows & steps.notna() & xs.notna()
    if steps[both].nunique() < 2:
        return pd.Series(np.nan, index=steps.index)
    slope, intercept = np.polyfit(steps[both].astype(float), xs[both].astype(float), 1)
    return steps * slope + intercept


# a cell that is a missing point, in any case: empty, nan, None/null, ±inf (AMP logs an overflowed step so)
MISSING_CELLS = frozenset({"", "nan", "none", "null", "inf", "+inf", "-inf", "infinity", "+infinity", "-infinity"})


def missing_cells(col: pd.Series) -> pd.Series:
    """True where a cell is a missing point: null, a non-finite float, or a spelling in ``MISSING_CELLS``."""
    return col.isna() | col.map(lambda v: (isinstance(v, float) and not math.isfinite(v))
                                or (isinstance(v, str) and v.strip().lower() in MISSING_CELLS)).astype(bool)


# a wall-clock column's unit, by its name's last word: DAWNBench logs ``hours``, MLPerf ``time_ms``
TIME_UNITS = {"hours": 3600.0, "hour": 3600.0, "hrs": 3600.0, "h": 3600.0, "minutes": 60.0, "mins": 60.0,
              "min": 60.0, "ms": 1e-3, "millis": 1e-3}


def seconds_per_unit(column: str) -> float:
    """1 for seconds and timestamps; else the unit the column's name ends with (``train_hours``, ``time_ms``)."""
    last = str(column).rsplit("/", 1)[-1].lower().replace("-", "_").rsplit("_", 1)[-1]
    return TIME_UNITS.get(last, 1.0)


def _seconds(col: pd.Series, scale: float = 1.0) -> pd.Series:
    """A wall-clock column as seconds: numbers times ``scale`` (their unit in seconds), else ISO-8601 timestamps (W&B, MLflow, loggers'
    ``asctime``) as seconds since the epoch, with naive times taken as UTC; unparseable cells NaN."""
    secs = pd.to_numeric(col, errors="coerce") * scale
    text = secs.isna() & ~missing_cells(col)
    if text.any():
        when = pd.to_datetime(col[text], errors="coerce", utc=True, format="ISO8601")
        secs = secs.astype(float)
        secs[text] = (when - pd.Timestamp(0, tz="UTC")).dt.total_seconds()
    return secs


def _read_trainer_state(path: Path, x: str) -> tuple[pd.DataFrame, float | None]:
    try:
        doc = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise UserError(f"{path}: not valid JSON ({e})") from None
    hist = doc.get("log_history") if isinstance(doc, dict) else None
    if not isinstance(hist, list):
        raise UserError(f"{path}: field 'log_history': expected a list (a Hugging Face trainer_state.json)")
    # the budget in the units of --x: max_steps for step, num_train_epochs for epoch, else none known
    budget = doc.get({"step": "max_steps", "epoch": "num_train_epochs"}.get(x, ""))
    budget = float(budget) if isinstance(budget, (int, float)) and budget > 0 else None
    df = pd.DataFrame([h for h in hist if isinstance(h, dict)])
    steps = doc.get("max_steps")
    if x == "epoch" and budget is not None and isinstance(steps, (int, float)) and steps > 0 \
            and {"epoch", "step"} <= set(df.columns):
        # the Trainer stops at max_steps, and rounds num_train_epochs up to whole epochs: the budget is where
        # max_steps falls at the log's epochs per step (800 steps of 39: 20.5 epochs, not 21); the steps' ratio
        # first, so that a finished run's budget is its last epoch exactly (300/43 * 300 / 300 is 1 ulp short)
        last = df.dropna(subset=["epoch", "step"]).iloc[-1] if df[["epoch", "step"]].notna().all(axis=1).any() else None
        if last is not None and last["step"] > 0:
            budget = min(budget, float(last["epoch"]) * (steps / float(last["step"])))
    return df, budget


def _read_progress(path: Path) -> tuple[pd.DataFrame, dict[str, float]]:
    """Step records, ``metrics`` and ``epoch_end`` events as rows; the budget per x it is known in (step, samples, and epoch: the
    job's ``epochs``, else its samples over those of its first epoch, once it ended)."""
    recs, budget, first_epoch, at = [], {}, 0, {}
    # a torn last line is a run still writing: skipped without a warning (stderr is the one error line)
    # a job folder's log: its rotated segments too (``train.progress_log``); another .jsonl as it is
    rows = iter_records(path.parent, warn_torn=False) if path.name == LIVE else read_json_lines(path, warn_torn=False)
    for r in rows:
        # step records, "metrics" events (a report() outside a step, e.g. an evaluation) and "epoch_end" events (the
        # epoch's mean_loss, at the step and samples it ended at); other events skip
        if not isinstance(r, dict) or r.get("event", "metrics") not in ("metrics", "epoch_end"):
            continue
        flat = {k: v for k, v in r.items() if not isinstance(v, (dict, list)) and k != "event"}
        if r.get("event") == "epoch_end":
            flat = {**at, **flat}
        elif "event" not in r:
            at = {k: r[k] for k in ("step", "samples") if k in r}
        if isinstance(r.get("metrics"), dict):
            flat.update({k: v for k, v in r["metrics"].items() if not isinstance(v, (dict, list))})
        if isinstance(r.get("lr"), (int, float)) and isinstance(r.get("lr_factor"), (int, float)) and r["lr_factor"] > 0:
            flat["lr"] = r["lr"] / r["lr_factor"]
        if isinstance(r.get("budget"), (int, float)):
            budget["step"] = float(r["budget"])
        elif "event" not in r and all(isinstance(r.get(k), (int, float)) for k in ("total_samples", "samples", "step")) \
                and r.get("batch_size"):
            # train.protocol.StepRecord: the samples still to train at the current batch, after this step
            budget["step"] = r["step"] + max(0, r["total_samples"] - r["samples"]) / r["batch_size"]
            budget["samples"] = float(r["total_samples"])
            if isinstance(r.get("epochs"), (int, float)) and r["epochs"] > 0:   # a script's (``dlsched.torch``)
                budget["epoch"] = float(r["epochs"])
            elif r.get("epoch") == 0:   # a make_job's: its samples per epoch, where the first epoch ends
                first_epoch = r["samples"]
            elif first_epoch:
                budget["epoch"] = round(r["total_samples"] / first_epoch, 6)
        recs.append(flat)
    return pd.DataFrame(recs), budget


def _says_lr_factor(df: pd.DataFrame) -> bool:
    """Whether every step record (a row with a batch) says its LR rule's factor, so its ``lr`` is the schedule's."""
    if "lr_factor" not in df.columns:
        return False
    factors = pd.to_numeric(df.loc[df["batch_size"].notna() & df["lr"].notna(), "lr_factor"], errors="coerce")
    return bool((factors > 0).all())


def _finished_epochs(df: pd.DataFrame) -> pd.DataFrame:
    """Over ``--x epoch``, a running job's records without the epoch it is still in: a record's epoch is read as
    finished at its last one (x + 1), so the newest record mid-way through an epoch stood at its end (a job 1.25
    epochs in was "observed to epoch 2"). An epoch is in progress where the log ends it with ``epoch_end`` events
    and has none for it yet."""
    if not {"epoch", "mean_loss"} <= set(df.columns):
        return df
    epoch = pd.to_numeric(df["epoch"], errors="coerce")
    ended = set(epoch[df["mean_loss"].notna()])
    newest = epoch.max()
    return df if newest in ended else df[epoch != newest]


def _with_lr_plan(df: pd.DataFrame, job_dir: Path, x: str) -> pd.DataFrame:
    """A running job's step records and, as rows with an LR and no metric, its runtime's plan of the LR still to
    come (``lr_plan.json`` beside them): what ``--schedule lr-column`` reads. Over steps, a plan made at the batch
    it trains at; over samples, one that says its samples (the schedulers' pace counts them: it holds at any
    batch). Its LR over its ``lr_factor`` where it says it, as the records' is."""
    plan = read_lr_plan(job_dir)
    if plan is None or not {"step", "lr", "batch_size", x} <= set(df.columns):
        return df
    trained = df.dropna(subset=["step", "batch_size", x])
    if trained.empty:
        return df
    if x == "step" and trained.batch_size.iloc[-1] == plan["batch_size"]:
        at = plan["steps"]
    elif x == "samples" and "samples" in plan:
        at = planned_samples(plan)
    else:
        return df
    ahead = [(a, lr) for a, lr in zip(at, planned_schedule_lr(plan)) if a > trained[x].max()]
    return pd.concat([df, pd.DataFrame(ahead, columns=[x, "lr"])], ignore_index=True) if ahead else df


def _read_tensorboard(path: Path) -> pd.DataFrame:
    """Scalars as one wide frame: step, wall_time and one column per tag. Runs in subfolders (Keras'
    ``train/`` and ``validation/``, ``add_scalars``' sub-writers) are columns ``RUN/TAG``: the same tag in two
    runs would otherwise collide, and the fallback reader saw no subfolder at all."""
    try:
        from tbparse import SummaryReader

        long = SummaryReader(str(path), extra_columns={"wall_time", "dir_name"}).scalars
        run = long["dir_name"].fillna("").astype(str) if "dir_name" in long else pd.Series("", index=long.index)
    except ImportError:
        try:
            from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
        except ImportError:
            raise UserError(f"{path}: reading TensorBoard logs needs the 'tbparse' or 'tensorboard' package "
                            "(pip install tbparse)") from None
        rows = []
        for n, f in enumerate([path] if path.is_file() else sorted(path.rglob("*tfevents*"))):
            acc = EventAccumulator(str(f), size_guidance={"scalars": 0})
            acc.Reload()
            d = "" if path.is_file() or f.parent == path else f.parent.relative_to(path).as_posix()
            rows += [(e.step, e.wall_time, d, tag, e.value, n) for tag in acc.Tags().get("scalars", [])
                     for e in acc.Scalars(tag)]
        long = pd.DataFrame(rows, columns=["step", "wall_time", "run", "tag", "value", "event_file"])
        run = long["run"]
    if long.empty:
        raise UserError(f"{path}: no scalar events")
    long = long.assign(tag=[f"{r}/{t}" if r else t for r, t in zip(run, long["tag"])])
    # a resumed run's new event file logs the steps after its checkpoint again: a step's newest writing is its
    # value, its time and its writer
    long = long.sort_values("wall_time", kind="stable")
    wide = long.pivot_table(index="step", columns="tag", values="value", aggfunc="last")
    wide["wall_time"] = long.groupby("step").wall_time.last()
    if "event_file" in long:
        wide["event_file"] = long.groupby("step").event_file.last()
    return wide.reset_index()


def _is_lr_name(name: str) -> bool:
    last = name.rsplit("/", 1)[-1]
    return last in ("lr", "learning_rate") or last.startswith("lr-")


def _param_group(name: str) -> tuple[str, int] | None:
    """(the LR name, the group's number) of one parameter group's LR column (``lr/pg1``, ``lr-Adam/pg2``), else None."""
    head, _, last = name.rpartition("/")
    group = re.fullmatch(r"pg(\d+)", last)
    return (head, int(group[1])) if group and _is_lr_name(head) else None


def logged_lr_column(df: pd.DataFrame) -> str | None:
    """The LR column a logger writes by default, when exactly one column is one: ``lr`` (timm's summary.csv,
    progress.jsonl, a TensorBoard tag), ``learning_rate`` (Hugging Face; ``train/learning_rate`` in its TensorBoard
    logs), ``lr-<Optimizer>`` (Lightning's LearningRateMonitor). Two of them (two optimizers): the user names one.
    One optimizer's parameter groups (Ultralytics' ``lr/pg0..2``, LearningRateMonitor's ``lr-<Optimizer>/pgN``)
    count as one: the group whose shape most others share (Ultralytics' pg0 is the biases', warmed up *down* from
    ``warmup_bias_lr``; its weights' pg1 and pg2 rise from 0), the lowest-numbered of a tie."""
    names = list(map(str, df.columns))
    found = [c for c in names if _is_lr_name(c)]
    if found:
        return found[0] if len(found) == 1 else None
    groups = {}
    for c in names:
        if (group := _param_group(c)) is not None:
            groups.setdefault(group[0], []).append((group[1], c))
    if len(groups) != 1:
        return None
    cols = [c for _, c in sorted(next(iter(groups.values())))]
    shapes = [pd.to_numeric(df[c], errors="coerce").fillna(0.0).to_numpy(float) for c in cols]
    shapes = [v / v.max() if v.max() > 0 else v for v in shapes]
    agree = [sum(np.abs(a - b).max(initial=0.0) < 1e-3 for b in shapes) for a in shapes]
    return cols[int(np.argmax(agree))]


def zero_based_epochs(columns, x: str) -> str | None:
    """The logger whose CSV this is, if it writes a row after each epoch numbered from 0 and ``x`` is that epoch:
    Lightning's CSVLogger (``epoch`` beside ``step``), timm's ``summary.csv`` (``train_*`` and ``eval_*``), Keras'
    ``CSVLogger`` (``epoch`` first, a metric beside its ``val_`` twin). None for any other log or x."""
    cols = [str(c) for c in columns]
    if x != "epoch" or "epoch" not in cols:
        return None
    if "step" in cols:
        return "Lightning's metrics.csv"
    if any(c.startswith("train_") for c in cols) and any(c.startswith("eval_") for c in cols):
        return "timm's summary.csv"
    if cols[0] == "epoch" and any(c.startswith("val_") and c[4:] in cols for c in cols):
        return "Keras' CSVLogger"
    return None


def _epoch_0_is_before_training(df) -> bool:
    """A CSV with ``epoch`` beside ``step`` whose epoch-0 rows are all at step 0, the next epoch's well after:
    an evaluation before any training (a user's own log), not Lightning's first epoch, whose rows end at its
    last step (a one-step epoch, epoch 1 at step 1, stays Lightning's)."""
    epoch, step = (pd.to_numeric(df[c], errors="coerce") for c in ("epoch", "step"))
    first, second = step[epoch == 0].dropna(), step[epoch == 1].dropna()
    return len(first) > 0 and bool((first == 0).all()) and len(second) > 0 and second.min() > 1


def keras_epoch_tag(y: str, x: str) -> str | None:
    """Keras' TensorBoard callback logs its per-epoch scalars as ``epoch_<metric>`` at step = the epoch from 0."""
    return "Keras' TensorBoard callback" if x == "step" and y.rsplit("/", 1)[-1].startswith("epoch_") else None


def _from_zero(curve: CurveData, logger: str | None, xs: pd.Series) -> CurveData:
    """``curve`` marked as ``logger``'s epochs from 0 where the log starts at 0 (one that starts later is as logged)."""
    starts_at_0 = logger is not None and pd.to_numeric(xs, errors="coerce").min() == 0
    return dataclasses.replace(curve, epochs_from_zero=logger) if starts_at_0 else curve


FOLDER_LOGS = ("progress.jsonl", "trainer_state.json", "metrics.csv", "summary.csv", "results.csv")


def _numbered(name: str) -> int:
    """The number a folder's name ends with (``checkpoint-500``, ``version_3``); -1 if none."""
    tail = re.split(r"[-_]", name)[-1]
    return int(tail) if tail.isdigit() else -1


def _lightning_version(path: Path) -> Path | None:
    """The newest ``version_N/metrics.csv`` of a Lightning logger's folder, or of the ``save_dir`` above it
    (``CSVLogger(save_dir)`` writes ``save_dir/lightning_logs/version_N``); several experiment names there: name one."""
    found = list(path.glob("version_*/metrics.csv"))
    if not found:
        found = list(path.glob("*/version_*/metrics.csv"))
        names = sorted({p.parent.parent.name for p in found})
        if len(names) > 1:
            raise UserError(f"{path}: Lightning logs of {len(names)} experiments ({', '.join(names)}): give one "
                            f"(e.g. {path / names[0]})")
    return max(found, key=lambda p: _numbered(p.parent.name), default=None)


def _tensorboard_curve(path: Path, x: str, y: str, lr_col: str | None, time_col: str | None) -> CurveData:
    """An event file's or a folder's scalars; the time is the event wall time unless ``time_col`` names a tag."""
    df = _read_tensorboard(path)
    curve = _frame_to_curve(df, str(path), x, y, lr_col, time_col or "wall_time", writer="event_file")
    return _from_zero(curve, keras_epoch_tag(y, x), df[x])


def read_curve(path, *, x: str = "step", y: str = "loss", lr_col: str | None = None,
               time_col: str | None = None) -> CurveData:
    """The (x, y) points of ``path`` (format by name/content, see the module docstring), sorted by x."""
    path = Path(path)
    if not path.exists():
        raise UserError(f"{path}: file not found")
    if path.is_dir():
        # Ultralytics' run folder holds results.csv; a Hugging Face output folder often only its checkpoints', of
        # which the last holds the whole log_history
        log = next((path / n for n in FOLDER_LOGS if (path / n).exists()), None) or max(
            path.glob("checkpoint-*/trainer_state.json"), key=lambda p: _numbered(p.parent.name), default=None)
        if log is None:   # Lightning's logger folder: its newest version_N (the run it logged last)
            log = _lightning_version(path)
        if log is not None:
            return read_curve(log, x=x, y=y, lr_col=lr_col, time_col=time_col)
        if not any(path.rglob("events.out.tfevents*")):
            raise UserError(f"{path}: no {', '.join(FOLDER_LOGS)}, checkpoint-N/trainer_state.json, Lightning's "
                            "version_N/metrics.csv or TensorBoard events inside")
        return _tensorboard_curve(path, x, y, lr_col, time_col)
    src, budget, note = str(path), None, None
    if "tfevents" in path.name:
        return _tensorboard_curve(path, x, y, lr_col, time_col)
    if path.suffix == ".jsonl":
        df, budgets = _read_progress(path)
        budget = budgets.get(x)
        df = _finished_epochs(df) if x == "epoch" else _with_lr_plan(df, path.parent, x)
        if time_col is None and "time" in df.columns:
            time_col = "time"
        batches = df["batch_size"].dropna().unique() if "batch_size" in df.columns else []
        if x == "step" and len(batches) > 1:
            note = (f"the batch changed ({', '.join(f'{b:g}' for b in batches)}): a step is not one amount of "
                    "training here, so the curve bends at each change; --x samples reads it over the samples trained")
        if len(batches) > 1 and lr_col is None and "lr" in df.columns and not _says_lr_factor(df):
            # a batch-scaling rule moved the LR with the batch, which is no annealing: without the factor the
            # schedule's LR is unknown (the service's refit: ``logged_schedule``); read as one, 4x the LR of a
            # batch 4x as large read as 4x the progress per sample (the demo's mlp-elastic: 0.034 for 0.20)
            df = df.drop(columns="lr")
            note = "; ".join(n for n in (note, "the batch changed and its records give no lr_factor: their lr may "
                                         "follow the batch, so it is not read as the schedule (give --schedule)") if n)
        if path.name == LIVE and (gone := removed_bytes(path.parent)):
            note = "; ".join(n for n in (note, f"the log's first {gone} bytes were removed once the service stored "
                                         "them (the cluster's progress_keep_days): the curve starts past them") if n)
    elif path.suffix == ".json":
        df, budget = _read_trainer_state(path, x)
    elif path.suffix in (".csv", ".tsv"):
        df = read_csv_text(path, sep="\t" if path.suffix == ".tsv" else ",")
        curve = _frame_to_curve(df, src, x, y, lr_col, time_col, row_name=_csv_row)
        logger = zero_based_epochs(df.columns, x)
        if logger == "Lightning's metrics.csv" and _epoch_0_is_before_training(df):
            logger = None
        return _from_zero(curve, logger, df[x])
    else:
        df, budget = read_text_log(path, x)
        if df.empty:
            raise UserError(f"{path}: no :::MLLOG records or name:value pairs (use .csv, .tsv, .jsonl, "
                            "trainer_state.json or TensorBoard events)")
        if time_col is None and "time" in df.columns and y in df.columns:
            time_col = "time"   # MLPerf's time_ms, or a logged time: the speed without a --time-col
    curve = _frame_to_curve(df, src, x, y, lr_col, time_col, budget, writer="run")
    curve = dataclasses.replace(curve, note="; ".join(n for n in (note, curve.note) if n) or None)
    # a record's epoch is the one it trains in, from 0: the last of epoch 0 is after one finished epoch
    return _from_zero(curve, "dlsched's progress.jsonl", df[x]) if path.suffix == ".jsonl" and x == "epoch" else curve


def seconds_per_x(curve: CurveData, window: int = 20) -> float | None:
    """Wall-clock seconds per unit of x over the newest ``window`` points (the speed as the job runs now), between
    points of one ``session``: the time between a run's last point and its restart's first is no training (a run
    at 1 s a step, resumed after an hour's stop, read 11 s a step)."""
    if curve.time is None or len(curve.x) < 2:
        return None
    ok = np.isfinite(curve.time[-window:])
    x, t = curve.x[-window:][ok], curve.time[-window:][ok]
    run = np.zeros(len(x)) if curve.session is None else curve.session[-window:][ok]
    same = run[1:] == run[:-1]
    dx = float(np.diff(x)[same].sum())
    if dx <= 0:
        return None
    rate = float(np.diff(t)[same].sum()) / dx
    return rate if math.isfinite(rate) and rate > 0 else None
