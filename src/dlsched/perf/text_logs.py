"""Training curves from plain-text logs, as frames of one row per line for ``perf.curve_readers``.

* MLPerf logging (``mlperf_logging.mllog``, rounds 0.7 on): ``:::MLLOG {json}`` lines. A row per event with a
  numeric ``value``, under the event's ``key``, beside its numeric ``metadata`` (``epoch_num``, ``samples_count``,
  ...) and ``time`` (``time_ms`` in seconds). Other lines are the program's own output and are skipped.
* Printed ``name:value`` / ``name=value`` pairs, any number per line (``step:125/1770 val_loss:3.91
  train_time:41230ms``), names and numbers quoted or not (a printed dict, a JSON line). ``N/M`` is a count and its total: the total is the budget when that name is ``--x``.
  A value in ``ms`` reads in seconds. Lines without a pair are skipped, and so are those without ``--x`` where
  any line has it.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

import pandas as pd

from dlsched.errors import UserError
from dlsched.numbers import is_number

MLLOG_PREFIX = ":::MLLOG"
_NUMBER = r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?"
# a name starts a token (line start, space, or a separator), so "x=1" inside "max=1e-3" is not read twice; a name
# and a number may be quoted: a printed dict (the Hugging Face Trainer's {'loss': '0.7773', 'epoch': '6.744'}) or
# a JSON line (DeiT's and MAE's log.txt: {"train_loss": 6.9, "epoch": 0})
PAIR = re.compile(rf"""(?:^|(?<=[\s,;|\[({{]))(["']?)([A-Za-z_][\w.\-/]*)\1\s*[:=]\s*(["']?)({_NUMBER})\3"""
                  r"(?:/(\d+))?(ms|s)?(?!\w|\.\d)")


def read_text_log(path: Path, x: str) -> tuple[pd.DataFrame, float | None]:
    """The log's rows, and the budget it names for ``x`` (a ``x:N/M`` total), if any."""
    try:
        lines = path.read_text().splitlines()
    except UnicodeDecodeError:
        raise UserError(f"{path}: not a text log (use .csv, .tsv, .jsonl, trainer_state.json, TensorBoard events, "
                        "MLPerf :::MLLOG lines or name:value lines)") from None
    if any(line.lstrip().startswith(MLLOG_PREFIX) for line in lines):
        return _mllog_rows(path, lines), None
    return _pair_rows(lines, x)


def _mllog_rows(path: Path, lines: list[str]) -> pd.DataFrame:
    rows = []
    for n, line in enumerate(lines, 1):
        text = line.lstrip()
        if not text.startswith(MLLOG_PREFIX):
            continue
        try:
            event = json.loads(text[len(MLLOG_PREFIX):])
        except json.JSONDecodeError as e:
            raise UserError(f"{path}: line {n}: not a valid {MLLOG_PREFIX} record ({e.msg})") from None
        value = event.get("value") if isinstance(event, dict) else None
        if not is_number(value) or not isinstance(event.get("key"), str):
            continue   # run_start, submission info, hyper-parameters given as strings
        meta = event.get("metadata") if isinstance(event.get("metadata"), dict) else {}
        row = {k: v for k, v in meta.items() if is_number(v)}
        if is_number(event.get("time_ms")):
            row["time"] = event["time_ms"] / 1000.0
        row[event["key"]] = value
        rows.append(row)
    return pd.DataFrame(rows)


def _pair_rows(lines: list[str], x: str) -> tuple[pd.DataFrame, float | None]:
    rows, budget = [], None
    for line in lines:
        row = {}
        for _, name, _, value, total, unit in PAIR.findall(line):
            if name in row:
                continue
            row[name] = float(value) / 1000.0 if unit == "ms" else float(value)
            if name == x and total:
                budget = float(total)
        if row:
            rows.append(row)
    # a log that prints its code and setup first (modded-nanogpt's) has pairs in them too: only lines that give x
    # are the curve's, where any line does (else all, so that a wrong --x is told the names there are)
    if any(x in r for r in rows):
        rows = [r for r in rows if x in r]
    return pd.DataFrame(rows), budget
