"""Loaders for the shared measurement traces, turned into tidy pandas frames.

One place that knows the on-disk formats, so models never parse files and every bad cell is reported
the same way: a one-line ``UserError`` naming file, line and field (nothing silently dropped).

Sources (see ``shared/data/README.md``):
* ``pollux/traces/<app>/{scalability,placements,validation-<M>.csv}`` — Pollux OSDI'21 artifact
  (petuum/adaptdl, branch osdi21-artifact, simulator/traces).
* ``h100/throughput.csv`` — single-H100 step times measured for this project.
* ``gpu-training/resnet50-p100-v2_per_epoch_from_log.csv`` — the seed study's per-epoch log (P100).
"""
from __future__ import annotations

import csv

from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Mapping

import numpy as np
import pandas as pd

from dlsched.errors import UserError, plain
from dlsched.paths import shared_data

POLLUX_APPS = ("bert", "cifar10", "deepspeech2", "imagenet", "ncf", "yolov3")
POLLUX_GPU_TYPE = "T4"  # the artifact's traces were measured on AWS g4dn.12xlarge nodes (4x T4 each)
# Trace length the artifact simulates for each app (simulator/applications.py, APPLICATIONS table).
POLLUX_MAX_EPOCHS = {"bert": 2, "cifar10": 100, "ncf": 10, "imagenet": 90, "deepspeech2": 80, "yolov3": 50}
# Per-GPU memory limit the artifact overrides (same table); others use the largest profiled local batch.
POLLUX_MAX_LOCAL_BATCH = {"yolov3": 8}
# Validation metrics that fall as training improves (word error rate, detection loss); others rise.
POLLUX_METRIC_DECREASES = {"deepspeech2": True, "yolov3": True}


def csv_line(row_index: int) -> int:
    """1-based line number in the file of a 0-based data row (line 1 is the header): what an editor shows, so
    every reader of a CSV names a bad row as "line N" with this number."""
    return int(row_index) + 2


def read_numeric_csv(path: str | Path, columns: Iterable[str], *, nonnegative: Iterable[str] = (),
                     positive: Iterable[str] = (), optional: Iterable[str] = (), min_rows: int = 1) -> pd.DataFrame:
    """Read a CSV and check that ``columns`` exist and hold numbers; raise ``UserError`` naming the first bad cell.

    ``optional`` columns are checked when present; empty cells in them are allowed (NaN).
    """
    fast = _read_clean_numeric_csv(path, columns, nonnegative, positive, optional, min_rows)
    if fast is not None:
        return fast
    df = read_csv_text(path)
    return check_numeric_frame(df, str(path), columns, nonnegative=nonnegative, positive=positive,
                               optional=optional, min_rows=min_rows, line_of=csv_line).reset_index(drop=True)


def _read_clean_numeric_csv(path, columns, nonnegative, positive, optional, min_rows) -> pd.DataFrame | None:
    """The common case in one C-parser pass: every checked column parses as finite floats within its bounds, so
    there is nothing to report. None on anything else; the string path then finds and names the bad cell.
    (Reading every trace as strings first made a cold simulation of a Pollux workload ~1 s slower.)"""
    try:
        raw_header = list(pd.read_csv(path, nrows=0, skipinitialspace=True).columns)
        header = [c.strip() for c in raw_header]
        columns = list(columns)
        if any(c not in header for c in columns):
            return None
        checked = set(columns) | (set(optional) & set(header))
        dtypes = {raw: (float if raw.strip() in checked else str) for raw in raw_header}
        df = pd.read_csv(path, dtype=dtypes, keep_default_na=False, na_values={c: [""] for c in dtypes
                                                                              if dtypes[c] is float},
                         skipinitialspace=True)
    except (ValueError, OSError, pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError):
        return None
    df.columns = [c.strip() for c in df.columns]
    if len(df) < min_rows:
        return None
    for c in checked:
        v = df[c].to_numpy(float)
        present = ~np.isnan(v)
        if (c in columns and not present.all()) or not np.isfinite(v[present]).all():
            return None
        if (c in nonnegative and (v[present] < 0).any()) or (c in positive and (v[present] <= 0).any()):
            return None
    return df


def read_csv_text(path: str | Path, sep: str = ",") -> pd.DataFrame:
    """A CSV as strings (empty cells kept as ""), header names stripped, blank lines and the header written again
    (a logger that appends to its file after a restart) dropped with each row keeping its label, so that
    ``csv_line(label)`` is its line in the file; a missing or unreadable file is a one-line ``UserError`` naming it.
    The first step of every checked reader."""
    path = Path(path)
    try:
        df = pd.read_csv(path, sep=sep, dtype=str, keep_default_na=False, skipinitialspace=True,
                         skip_blank_lines=False)
    except FileNotFoundError:
        raise UserError(f"{path}: file not found") from None
    except pd.errors.EmptyDataError:
        raise UserError(f"{path}: empty file") from None
    except (pd.errors.ParserError, UnicodeDecodeError) as e:
        raise UserError(f"{path}: not a readable CSV ({str(e).splitlines()[0]})") from None
    df.columns = [c.strip() for c in df.columns]
    # a line with no value (pandas would skip a blank one and shift every later row's number)
    cells = df.fillna("").apply(lambda col: col.str.strip())
    blank = (cells == "").all(axis=1)
    header = (cells == pd.Series(df.columns, index=df.columns)).all(axis=1)
    return df[~blank & ~header]


def check_numeric_frame(df: pd.DataFrame, source: str, columns: Iterable[str], *, nonnegative: Iterable[str] = (),
                        positive: Iterable[str] = (), optional: Iterable[str] = (), min_rows: int = 1,
                        line_of=csv_line, row_word: str = "line") -> pd.DataFrame:
    """Validate a frame of strings/numbers and return it with float columns (shared by CSV and YAML input)."""
    columns, optional = list(columns), [c for c in optional if c in df.columns]
    for c in columns:
        if c not in df.columns:
            raise UserError(f"{source}: missing column {c!r} (have: {', '.join(map(str, df.columns)) or 'none'})")
    out = df.copy()
    for c in columns + optional:
        raw = out[c]
        vals = pd.to_numeric(raw.replace("", np.nan), errors="coerce")
        bad = vals.isna() & ~(raw.isna() | (raw.astype(str).str.strip() == "")) | ~np.isfinite(vals.fillna(0.0))
        if c in columns:
            bad |= vals.isna()
        if bad.any():
            i = int(np.flatnonzero(bad.to_numpy())[0])
            got = "nothing" if pd.isna(raw.iloc[i]) or str(raw.iloc[i]).strip() == "" else repr(plain(raw.iloc[i]))
            raise UserError(f"{source}: {row_word} {line_of(out.index[i])}, field {c!r}: expected a number, got {got}")
        for name, ok, what in ((nonnegative, vals >= 0, "must be >= 0"), (positive, vals > 0, "must be > 0")):
            if c in name:
                neg = ~ok & vals.notna()
                if neg.any():
                    i = int(np.flatnonzero(neg.to_numpy())[0])
                    raise UserError(f"{source}: {row_word} {line_of(out.index[i])}, field {c!r}: {what}, "
                                    f"got {plain(raw.iloc[i])!r}")
        out[c] = vals.astype(float)
    if len(out) < min_rows:
        raise UserError(f"{source}: needs at least {min_rows} rows, got {len(out)}")
    return out


@dataclass(frozen=True)
class PolluxApp:
    """One Pollux workload: validation curves per global batch size plus step-time measurements.

    ``validation[M]`` has columns progress (epochs of samples, in base-batch steps), iteration, metric,
    grad_sqr, grad_var; ``placements`` gains ``num_nodes``/``num_replicas`` parsed from the placement string
    ("22" = 2 nodes x 2 GPUs), so it stacks with ``scalability``.
    """

    name: str
    validation: Mapping[int, pd.DataFrame]
    scalability: pd.DataFrame
    placements: pd.DataFrame
    max_epochs: int

    @property
    def base_batch(self) -> int:
        """The initial (smallest validated) global batch: efficiency is relative to it."""
        return min(self.validation)

    @property
    def max_batch(self) -> int:
        return max(self.validation)

    @property
    def max_local_batch(self) -> int:
        return POLLUX_MAX_LOCAL_BATCH.get(self.name, int(self.placements.local_bsz.max()))

    def step_samples(self) -> pd.DataFrame:
        """Every measured step: num_nodes, num_replicas, local_bsz, step_time, sync_time, source."""
        cols = ["num_nodes", "num_replicas", "local_bsz", "step_time", "sync_time"]
        a = self.placements[cols].assign(source="placements")
        b = self.scalability[cols].assign(source="scalability")
        return pd.concat([a, b], ignore_index=True)

    def loss_curve(self, batch: int | None = None) -> pd.DataFrame:
        """A decreasing "loss" from the validation metric at ``batch`` (default: the base batch).

        Columns ``step`` (iterations done at the end of the epoch) and ``loss``. Rising metrics
        (accuracy, F1, hit rate; in % for bert) become error = scale − metric; falling ones (WER, detection
        loss) are used as they are. Truncated at the artifact's ``max_epochs``.
        """
        df = self.validation[batch or self.base_batch].iloc[: self.max_epochs]
        m = df.metric.to_numpy(float)
        if not POLLUX_METRIC_DECREASES.get(self.name, False):
            m = (100.0 if m.max() > 1.5 else 1.0) - m
        return pd.DataFrame({"step": df.iteration.to_numpy(float), "loss": m})


def read_validation(app_dir: Path, columns: Iterable[str],
                    nonnegative: Iterable[str] = ()) -> dict[int, pd.DataFrame]:
    """``validation-<global batch>.csv`` files of a Pollux trace folder, checked: {global batch: frame}."""
    validation = {}
    for f in sorted(Path(app_dir).glob("validation-*.csv")):
        try:
            m = int(f.stem.split("-")[-1])
        except ValueError:
            raise UserError(f"{f}: file name must be validation-<global batch>.csv") from None
        validation[m] = read_numeric_csv(f, columns, nonnegative=nonnegative)
    if not validation:
        raise UserError(f"{app_dir}: no validation-<batch>.csv files")
    return validation


def pollux_app(name: str, root: Path | None = None) -> PolluxApp:
    """Load ``pollux/traces/<name>`` from the shared data folder (or ``root``)."""
    d = Path(root or shared_data() / "pollux" / "traces") / name
    if not d.is_dir():
        raise UserError(f"{d}: no such Pollux trace folder (known: {', '.join(POLLUX_APPS)})")
    validation = read_validation(d, ["progress", "iteration", "metric", "grad_sqr", "grad_var"],
                                 nonnegative=["progress", "iteration", "grad_sqr", "grad_var"])
    num = ["local_bsz", "step_time", "sync_time"]
    scal = read_numeric_csv(d / "scalability.csv", ["num_nodes", "num_replicas"] + num, positive=["local_bsz", "step_time"],
                            nonnegative=["sync_time"])
    plc = read_numeric_csv(d / "placements.csv", ["placement"] + num, positive=["local_bsz", "step_time"],
                           nonnegative=["sync_time"])
    digits = plc.placement.astype(int).astype(str)
    plc = plc.assign(num_nodes=digits.str.len().astype(float),
                     num_replicas=digits.map(lambda s: sum(map(int, s))).astype(float))
    return PolluxApp(name, dict(sorted(validation.items())), scal, plc,
                     POLLUX_MAX_EPOCHS.get(name, min(map(len, validation.values()))))


def h100_throughput(path: Path | None = None) -> pd.DataFrame:
    """``h100/throughput.csv``: gpu, model, dataset, batch_size, precision, step_ms_median, samples_per_s, …

    Adds ``gpu_type`` = "H100" and ``step_time`` in seconds (the median).
    """
    path = path or shared_data() / "h100" / "throughput.csv"
    df = read_numeric_csv(path, ["batch_size", "step_ms_median", "samples_per_s"], positive=["batch_size", "step_ms_median"])
    return df.assign(gpu_type="H100", step_time=df.step_ms_median / 1000.0)


def seed_log(name: str = "resnet50-p100-v2", path: Path | None = None) -> pd.DataFrame:
    """Per-epoch log of the seed study (``gpu-training/<name>_per_epoch_from_log.csv``).

    Columns include epoch, steps_cum_assumed (cumulative steps at the end of the epoch), train_loss,
    val_loss, avg_step_time_s, iters_per_epoch.
    """
    path = path or shared_data() / "gpu-training" / f"{name}_per_epoch_from_log.csv"
    return read_numeric_csv(path, ["epoch", "steps_cum_assumed", "train_loss", "val_loss", "avg_step_time_s", "iters_per_epoch"],
                            nonnegative=["steps_cum_assumed", "train_loss", "val_loss"], min_rows=3)


def optimus_table2(path: Path | None = None) -> dict[str, tuple[float, ...]]:
    """Optimus EuroSys'18 Table 2 speed coefficients: {"sync": θ0..θ4, "async": θ0..θ3}."""
    path = path or shared_data() / "tables" / "optimus2018_tables.csv"
    # The notes column holds unquoted commas, so read rows with the csv module and use the first 3 fields.
    with open(path, newline="") as fh:
        rows = {r[0]: r for r in csv.reader(fh) if len(r) >= 3}
    out = {}
    for key, table in (("sync", "T2_sync"), ("async", "T2_async")):
        if table not in rows:
            raise UserError(f"{path}: no row with table={table!r}")
        try:
            out[key] = tuple(float(x) for x in rows[table][2].split(","))
        except ValueError:
            raise UserError(f"{path}: row {table}, field 'value': expected numbers, got {rows[table][2]!r}") from None
    return out
