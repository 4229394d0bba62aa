"""What every command prints: tables that never cut a cell, JSON with ISO 8601 times, human durations.

Tables follow ``kubectl get``: at a narrow width the low-value columns go first (``--wide`` keeps them),
and a cell that still does not fit wraps onto a second line; no cell is ever cut with an ellipsis."""
from __future__ import annotations

import json
import math
import sys
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Iterable, Sequence

from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from dlsched.numbers import is_number

# fields that hold POSIX times anywhere in the API's answers; shown as ISO 8601 in --json output
TIME_FIELDS = frozenset({"time", "submit_time", "start_time", "end_time", "predicted_start", "predicted_finish",
                         "made_at", "last_seen", "since", "target_time", "forecast_time", "stalled_since",
                         "policy_finish", "target_time_80", "time_80",
                         "predicted_finish_range"})   # the last three: [early, late] bands


@dataclass(frozen=True)
class Column:
    header: str
    justify: str = "left"
    drop_rank: int = 0      # 0 = always shown; higher ranks are dropped first when the terminal is narrow


def human_duration(seconds: float | None) -> str:
    """``45s``, ``3m 12s``, ``1h 23m``, ``2d 4h``; ``-`` when unknown."""
    if seconds is None or not math.isfinite(seconds):
        return "-"
    s = int(round(abs(seconds)))
    sign = "-" if seconds < 0 else ""
    days, rem = divmod(s, 86400)
    hours, rem = divmod(rem, 3600)
    minutes, secs = divmod(rem, 60)
    if days:
        return f"{sign}{days}d {hours}h"
    if hours:
        return f"{sign}{hours}h {minutes:02d}m"
    if minutes:
        return f"{sign}{minutes}m {secs:02d}s"
    return f"{sign}{secs}s"


def iso(ts: float | None) -> str | None:
    if ts is None or not isinstance(ts, (int, float)) or not math.isfinite(ts):
        return None
    return datetime.fromtimestamp(ts, tz=timezone.utc).isoformat(timespec="seconds")


def local_clock(ts: float | None) -> str:
    if ts is None:
        return "-"
    return datetime.fromtimestamp(ts).strftime("%H:%M:%S")


def readable_numbers(obj: Any, digits: int = 4) -> Any:
    """A copy with each fractional float to ``digits`` significant digits, or to its units where it is larger:
    a person reads 0.9764 and 14918.0, not 0.9764092975012859 and 14918.039354368873 (``--json`` keeps them)."""
    if isinstance(obj, dict):
        return {k: readable_numbers(v, digits) for k, v in obj.items()}
    if isinstance(obj, list):
        return [readable_numbers(x, digits) for x in obj]
    if isinstance(obj, float) and math.isfinite(obj) and obj != 0 and not obj.is_integer():
        return round(obj, max(0, digits - 1 - math.floor(math.log10(abs(obj)))))
    return obj


def with_iso_times(obj: Any) -> Any:
    """A copy of an API answer with every known time field as ISO 8601 (UTC)."""
    if isinstance(obj, dict):
        return {k: (iso(v) if k in TIME_FIELDS and is_number(v)
                    else [iso(t) for t in v] if k in TIME_FIELDS and isinstance(v, list) and all(map(is_number, v))
                    else with_iso_times(v)) for k, v in obj.items()}
    if isinstance(obj, list):
        return [with_iso_times(x) for x in obj]
    return obj


def print_json(obj: Any, iso_times: bool = True) -> None:
    print(json.dumps(with_iso_times(obj) if iso_times else obj, indent=2, default=str, allow_nan=False))


def console() -> Console:
    return Console(highlight=False)


# C0 controls but newline and tab, DEL and C1, each shown as one visible character (a cell's spans keep their places)
_CONTROLS = {c: (0x2400 + c if c < 0x20 else 0x2421 if c == 0x7F else 0xFFFD)
             for c in [*range(0x20), *range(0x7F, 0xA0)] if c not in (0x09, 0x0A)}


def visible(text: str) -> str:
    """``text`` with its terminal controls shown, not obeyed (ESC as ``␛``): a failed job's error ends with its last
    output line, which job code writes, and ``dlsched status`` printed an escape sequence in it to the reader's
    terminal (rich strips only BEL, BS, VT, FF and CR): a cleared screen, a rewritten title, a forged line."""
    return text.translate(_CONTROLS)


def _as_text(cell: Any) -> Text:
    text = cell if isinstance(cell, Text) else Text.from_markup(str(cell))
    shown = visible(text.plain)
    if shown != text.plain:
        text.plain = shown   # one character for one: the styles stay where they were
    return text


def fit_columns(columns: Sequence[Column], rows: Sequence[Sequence[Text]], width: int, wide: bool) -> list[int]:
    """Indices of the columns to show within ``width`` characters (all of them with ``wide``)."""
    keep = list(range(len(columns)))
    if wide:
        return keep
    need = [max(len(line) for cell in [Text(columns[i].header)] + [r[i] for r in rows]
                for line in cell.plain.splitlines() or [""]) for i in keep]

    def total(idx: list[int]) -> int:
        return sum(need[i] for i in idx) + 3 * (len(idx) - 1)   # a divider and a space each side

    for rank in sorted({c.drop_rank for c in columns if c.drop_rank > 0}, reverse=True):
        if total(keep) <= width:
            break
        keep = [i for i in keep if columns[i].drop_rank != rank]
    return keep


def make_table(columns: Sequence[Column], rows: Iterable[Sequence[Any]], title: str | None = None,
               wide: bool = False, width: int = 80, show_all: str = "a wider terminal shows them") -> Table:
    """A rich table of ``rows`` fitted to ``width`` (see the module docstring); ``show_all``: how the reader gets
    the columns left out (the command's own flag, where it has one)."""
    cells = [[_as_text(c) for c in r] for r in rows]   # markup parsed once, for measuring and for drawing
    keep = fit_columns(columns, cells, width, wide)
    # a dropped column may hold what the reader came for (a failed job's reason): say which, and how to see it
    hidden = [" ".join(c.header.split()) for i, c in enumerate(columns)   # a header broken over lines: one line here
              if i not in keep and any(r[i].plain.strip("- ") for r in cells)]
    caption = f"not shown at {width} columns: {', '.join(hidden)} ({show_all})" if hidden else None
    t = Table(title=title, box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, expand=False, title_justify="left",
              caption=caption, caption_justify="left")
    for i in keep:
        t.add_column(columns[i].header, justify=columns[i].justify, overflow="fold")
    for r in cells:
        t.add_row(*(r[i] for i in keep))
    return t


def table(columns: Sequence[Column], rows: Iterable[Sequence[Any]], title: str | None = None,
          wide: bool = False, out: Console | None = None, show_all: str = "a wider terminal shows them") -> None:
    out = out or console()
    t = make_table(columns, rows, title, wide, out.width, show_all)
    if wide and not out.is_terminal:
        out = Console(highlight=False, width=max(out.width, 10_000), file=out.file)
    out.print(t)


def fail(message: str, code: int = 1) -> None:
    """One line on stderr and exit ``code`` (1: the request was understood but cannot be done)."""
    import typer

    print(f"error: {message}", file=sys.stderr)
    raise typer.Exit(code)
