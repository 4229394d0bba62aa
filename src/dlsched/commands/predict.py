"""``dlsched predict FILE``: fit the convergence and speed models to a job's observations and print the
predicted remaining time per configuration (rich table), optionally plotting both fits.

FILE is YAML (see ``examples/predict/*.yaml``) or CSV. CSV rows are loss observations (columns ``step``,
``loss``) and, on rows whose step and loss are empty, speed samples (``num_gpus, num_nodes, local_batch,
step_time[, sync_time]`` for all-reduce, or ``ps, workers, steps_per_s`` for a synchronous PS job); the
settings a YAML file holds come from options. A step or loss that is empty, nan or ±inf is a missing point (the
row is skipped) and a loss of 0 is fitted at half the smallest positive loss, as ``predict curve`` reads them; a
negative loss, or one left out of a YAML entry, is bad input. Every bad value is reported as one line naming the file,
the row and the field (``UserError`` → exit code 2).
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from typing import TYPE_CHECKING

import typer
from typer.core import TyperGroup

from dlsched.commands.plot_file import check_plot_path, save_figure
from dlsched.documents import read_yaml_file
from dlsched.errors import UserError

if TYPE_CHECKING:  # numpy/pandas load lazily: every ``dlsched`` start imports this module
    import numpy as np
    import pandas as pd

ALLREDUCE_COLUMNS = ["num_gpus", "num_nodes", "local_batch", "step_time"]
PS_COLUMNS = ["ps", "workers", "steps_per_s"]
DEFAULT_DELTA = 1e-3


@dataclass
class Observations:
    """What a job reported so far, plus the owner's settings."""

    source: str
    steps: np.ndarray
    losses: np.ndarray
    speed_kind: str | None = None               # "allreduce" | "ps-sync" | "ps-async" | None
    speed: pd.DataFrame | None = None
    steps_per_epoch: float | None = None
    delta: float | None = None
    target_loss: float | None = None            # raw loss units
    global_batch: int | None = None
    gpus_per_node: int = 4
    gpu_type: str = "generic"
    batch_sizes: list[int] = field(default_factory=list)
    grad_noise: tuple[float, float] | None = None


# ----------------------------------------------------------------------------------------------- input
def _number(src: str, where: str, name: str, value, *, positive: bool = True, integer: bool = False):
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise UserError(f"{src}: {where}, field {name!r}: expected a number, got {value!r}") from None
    if not math.isfinite(v) or (positive and v <= 0):
        raise UserError(f"{src}: {where}, field {name!r}: must be > 0, got {value!r}")
    if integer:
        if v != int(v):
            raise UserError(f"{src}: {where}, field {name!r}: expected a whole number, got {value!r}")
        return int(v)
    return v


def _missing(col: pd.Series) -> pd.Series:
    import numpy as np
    import pandas as pd

    from dlsched.perf.curve_readers import missing_cells

    num = pd.to_numeric(col, errors="coerce")
    return missing_cells(col) | (num.notna() & ~np.isfinite(num.fillna(0.0)))


def _check_losses(df: pd.DataFrame, src: str, line_of, row_word: str) -> tuple[np.ndarray, np.ndarray]:
    import numpy as np

    from dlsched.perf.profile import check_numeric_frame

    # a row whose step or loss is a missing point is skipped (``predict curve`` reads the same file so); a loss of
    # 0 is kept and fitted at a stand-in (``perf.perfect_points``, in ``predict``); a negative one stays refused
    if "step" in df.columns and "loss" in df.columns:
        df = df[~(_missing(df.step) | _missing(df.loss))]
    df = check_numeric_frame(df, src, ["step", "loss"], nonnegative=["step", "loss"], min_rows=0,
                             line_of=line_of, row_word=row_word)
    if len(df) < 3:
        raise UserError(f"{src}: too few loss points to fit ({len(df)}; need at least 3), field 'loss'")
    if not (df.loss > 0).any():   # a 0 stands in at half the smallest positive loss: there is none
        raise UserError(f"{src}: field 'loss': every loss is 0, no loss to model (a 0 is fitted at half the smallest "
                        "positive loss)")
    steps = df.step.to_numpy(float)
    bad = np.flatnonzero(np.diff(steps) <= 0)
    if bad.size:
        i = int(bad[0]) + 1
        raise UserError(f"{src}: {row_word} {line_of(df.index[i])}, field 'step': steps must increase, "
                        f"got {df.step.iloc[i]:g} after {df.step.iloc[i - 1]:g}")
    return steps, df.loss.to_numpy(float)


def _speed_kind(columns) -> str | None:
    if all(c in columns for c in ALLREDUCE_COLUMNS):
        return "allreduce"
    if all(c in columns for c in PS_COLUMNS):
        return "ps-sync"
    return None


def _check_speed(df: pd.DataFrame, kind: str, src: str, line_of, row_word: str) -> pd.DataFrame:
    import numpy as np

    from dlsched.perf.profile import check_numeric_frame

    cols = ALLREDUCE_COLUMNS if kind == "allreduce" else PS_COLUMNS
    df = check_numeric_frame(df, src, cols, positive=cols, optional=["sync_time"], nonnegative=["sync_time"],
                             line_of=line_of, row_word=row_word)
    if kind == "allreduce":
        bad = np.flatnonzero((df.num_nodes > df.num_gpus).to_numpy())
        if bad.size:
            raise UserError(f"{src}: {row_word} {line_of(df.index[bad[0]])}, field 'num_nodes': more nodes than GPUs "
                            f"({df.num_nodes.iloc[bad[0]]:g} > {df.num_gpus.iloc[bad[0]]:g})")
    return df


def load_csv(path: Path) -> Observations:
    from dlsched.perf.profile import csv_line, read_csv_text

    src = str(path)
    raw = read_csv_text(path)
    for c in ("step", "loss"):
        if c not in raw.columns:
            raise UserError(f"{src}: missing column {c!r} (have: {', '.join(raw.columns) or 'none'})")
    is_speed = _missing(raw.step) & _missing(raw.loss)   # "nan,nan,..." too: its speed sample is kept, not skipped
    steps, losses = _check_losses(raw[~is_speed], src, csv_line, "line")
    obs = Observations(src, steps, losses)
    kind = _speed_kind(raw.columns)
    if kind and is_speed.any():
        obs.speed_kind, obs.speed = kind, _check_speed(raw[is_speed], kind, src, csv_line, "line")
    return obs


def load_yaml(path: Path) -> Observations:
    import pandas as pd

    src = str(path)
    doc = read_yaml_file(path)
    if not isinstance(doc, dict):
        raise UserError(f"{src}: expected a mapping with 'losses' (and 'speed') at the top level")
    if "losses" not in doc:
        raise UserError(f"{src}: missing field 'losses'")
    items = doc["losses"]
    if not isinstance(items, list) or not all(isinstance(x, dict) for x in items):
        raise UserError(f"{src}: field 'losses' must be a list of {{step, loss}} mappings")
    entry = lambda i: int(i) + 1  # noqa: E731  (1-based position in the list)
    for i, x in enumerate(items):   # a key left out is a typo to name, not a missing point (``loss: .nan`` is one)
        if lost := [k for k in ("step", "loss") if k not in x]:
            raise UserError(f"{src}: losses entry {entry(i)}: missing field {lost[0]!r} (have: {', '.join(map(str, x)) or 'none'})")
    steps, losses = _check_losses(pd.DataFrame(items, columns=sorted({k for x in items for k in x}) or ["step", "loss"]),
                                  src, entry, "losses entry")
    obs = Observations(src, steps, losses)
    where = "top level"
    if "steps_per_epoch" in doc:
        obs.steps_per_epoch = _number(src, where, "steps_per_epoch", doc["steps_per_epoch"])
    target = doc.get("target") or {}
    if not isinstance(target, dict):
        raise UserError(f"{src}: field 'target' must be a mapping like {{delta: 0.001}} or {{loss: 0.2}}")
    if "delta" in target:
        obs.delta = _number(src, "target", "delta", target["delta"])
    if "loss" in target:
        obs.target_loss = _number(src, "target", "loss", target["loss"])
    sp = doc.get("speed")
    if sp is not None:
        if not isinstance(sp, dict) or not isinstance(sp.get("samples"), list) or not all(isinstance(x, dict) for x in sp["samples"]):
            raise UserError(f"{src}: field 'speed' must be a mapping with a list 'samples'")
        frame = pd.DataFrame(sp["samples"])
        kind = sp.get("kind") or _speed_kind(frame.columns)
        if kind not in ("allreduce", "ps-sync", "ps-async"):
            raise UserError(f"{src}: speed, field 'kind': expected allreduce, ps-sync or ps-async, got {kind!r}"
                            if kind else f"{src}: speed samples need columns {ALLREDUCE_COLUMNS} or {PS_COLUMNS}")
        obs.speed_kind = kind
        obs.speed = _check_speed(frame, "allreduce" if kind == "allreduce" else "ps", src, entry, "speed.samples entry")
        for key, integer in (("global_batch", True), ("gpus_per_node", True)):
            if key in sp:
                setattr(obs, key, _number(src, "speed", key, sp[key], integer=integer))
        obs.gpu_type = str(sp.get("gpu_type", obs.gpu_type))
        if "batch_sizes" in sp:
            bs = sp["batch_sizes"] if isinstance(sp["batch_sizes"], list) else [sp["batch_sizes"]]
            obs.batch_sizes = [_number(src, "speed", "batch_sizes", b, integer=True) for b in bs]
        if "grad_noise" in sp:
            g = sp["grad_noise"] if isinstance(sp["grad_noise"], dict) else {}
            obs.grad_noise = (_number(src, "speed.grad_noise", "sqr", g.get("sqr"), positive=False),
                              _number(src, "speed.grad_noise", "var", g.get("var"), positive=False))
    return obs


def load_observations(path: Path) -> Observations:
    if path.suffix.lower() in (".yaml", ".yml"):
        return load_yaml(path)
    if path.suffix.lower() == ".csv":
        return load_csv(path)
    raise UserError(f"{path}: unknown input type {path.suffix!r} (use .yaml, .yml or .csv)")


def loss_rises(losses) -> bool:
    """The loss ended higher than it started over the points (the median of the last 3 over that of the first 3,
    ``perf.metric_names.against_the_grain``; the last point over the first for 3 points): diverging, or a metric
    that is no loss. The Optimus curve only falls, so its fit of such points is flat and says converged."""
    from dlsched.perf.metric_names import against_the_grain

    return against_the_grain(losses, "loss") if len(losses) > 3 else bool(losses[-1] > losses[0])


# ----------------------------------------------------------------------------------------------- model
@dataclass
class Report:
    fit: object
    k_now: float
    steps: object          # Estimate, remaining steps
    unit: str              # "PS" | "GPUs"
    rows: list             # best ConfigPrediction per PS count (its best workers in the budget) / per GPU count
    speed_error: float
    unbounded_workers: dict = field(default_factory=dict)  # PS: p -> argmin over w with no budget (the seed curve)


def predict(obs: Observations, gpus: int) -> Report:
    import numpy as np

    from dlsched.perf.convergence import fit_curve
    from dlsched.perf.efficiency import GradientNoise
    from dlsched.perf.perfect_points import with_stand_in
    from dlsched.perf.predict import (allreduce_configurations, best_workers, leave_one_out_error, ps_configurations,
                                      relative_error, remaining_steps)
    from dlsched.perf.speed import AllReduceSpeedModel, fit_optimus_async, fit_optimus_sync, fit_step_time

    fit = fit_curve(obs.steps, with_stand_in(obs.losses, obs.target_loss))   # a loss of 0: ``perf.perfect_points``
    k_now = float(obs.steps[-1])
    E = obs.steps_per_epoch or float(np.median(np.diff(obs.steps)))
    if obs.target_loss is not None:
        steps = remaining_steps(fit, k_now, target_loss=obs.target_loss / fit.curve.scale)
    else:
        steps = remaining_steps(fit, k_now, delta=obs.delta or DEFAULT_DELTA, steps_per_epoch=E)
    rows, err, unit, unbounded = [], 0.0, "GPUs", {}
    if obs.speed is not None and len(obs.speed):
        s = obs.speed
        if obs.speed_kind == "allreduce":
            sync = s["sync_time"] if "sync_time" in s and s["sync_time"].notna().all() else None
            r, n, m, t = (s[c].to_numpy(float) for c in ("num_gpus", "num_nodes", "local_batch", "step_time"))
            y = None if sync is None else sync.to_numpy(float)
            params = fit_step_time(r, n, m, t, y)

            def loo(mask, i):
                p = fit_step_time(r[mask], n[mask], m[mask], t[mask], None if y is None else y[mask])
                return float(p.step_time(r[i], n[i], m[i])), t[i]

            err = leave_one_out_error(len(s), loo) if len(s) >= 4 else relative_error(params.step_time(r, n, m), t)
            batch = obs.global_batch or int(round(float(np.median(s.num_gpus * s.local_batch))))
            noise = GradientNoise(*obs.grad_noise) if obs.grad_noise else None
            model = AllReduceSpeedModel({obs.gpu_type: params}, obs.gpu_type, noise, base_batch=batch)
            sizes = sorted(set(obs.batch_sizes) | {batch}) if noise else [batch]
            work = steps.scaled(float(batch))
            configs = allreduce_configurations(model, work, gpus, obs.gpus_per_node, sizes, obs.gpu_type, err)
            key = lambda c: c.num_gpus  # noqa: E731
        else:
            M = obs.global_batch or 1
            p, w, f = s.ps.to_numpy(), s.workers.to_numpy(), s.steps_per_s.to_numpy()
            fitter = (lambda pp, ww, ff: fit_optimus_sync(pp, ww, ff, M)) if obs.speed_kind == "ps-sync" else fit_optimus_async
            model = fitter(p, w, f)
            err = (leave_one_out_error(len(f), lambda mask, i: (float(fitter(p[mask], w[mask], f[mask]).speed(p[i], w[i])), f[i]))
                   if len(f) >= 4 else relative_error(model.speed(p, w), f))
            configs = ps_configurations(model, steps, gpus, err)  # servers count: p + w <= the budget
            key, unit = (lambda c: c.ps), "PS"  # noqa: E731
            unbounded = {p: best_workers(model, p, 4 * gpus) for p in range(1, gpus)}
        best = {}
        for c in configs:  # sorted fastest first: the first seen per count is that count's best
            best.setdefault(key(c), c)
        rows = [best[k] for k in sorted(best)]
    return Report(fit, k_now, steps, unit, rows, err, unbounded)


# ----------------------------------------------------------------------------------------------- output
def _finite(x: float) -> float | None:
    return float(x) if math.isfinite(x) else None


def report_dict(obs: Observations, rep: Report) -> dict:
    """What ``render`` shows, for ``--json`` (seconds; null where the model says never)."""
    c, s = rep.fit.curve, rep.steps
    best = min(rep.rows, key=lambda r: r.seconds.value) if rep.rows else None
    rows = [{"ps": r.ps, "workers": r.workers, "steps_per_s": r.speed, "unbounded_best_workers": rep.unbounded_workers.get(r.ps)}
            if rep.unit == "PS" else
            {"gpus": r.num_gpus, "nodes": r.num_nodes, "batch": r.global_batch, "goodput_samples_per_s": r.speed}
            for r in rep.rows]
    for d, r in zip(rows, rep.rows):
        d |= {"seconds": _finite(r.seconds.value), "seconds_interval_80": [_finite(r.seconds.low), _finite(r.seconds.high)],
              "best": r is best}
    return {"source": str(obs.source), "points": len(obs.steps), "observed_until_step": rep.k_now,
            "model": "optimus", "curve": {"beta0": c.beta0, "beta1": c.beta1, "beta2": c.beta2, "scale": c.scale,
                                          "rmse": rep.fit.rmse},
            "remaining_steps": _finite(s.value), "remaining_steps_interval_80": [_finite(s.low), _finite(s.high)],
            "unit": rep.unit, "speed_model_error": rep.speed_error, "configurations": rows}


def render(obs: Observations, rep: Report, wide: bool = False) -> None:
    from rich.console import Console

    from dlsched.display import Column, human_duration, table

    c = rep.fit.curve
    con = Console()
    con.print(f"[bold]{obs.source}[/]: {len(obs.steps)} loss points up to step {rep.k_now:g}; "
              f"fit l(k)=1/({c.beta0:.4g}·k+{c.beta1:.4g})+{c.beta2:.4g} (normalised by {c.scale:.4g}), RMSE {rep.fit.rmse:.4f}")
    s = rep.steps
    if math.isfinite(s.value):
        con.print(f"remaining steps: {s.value:,.0f}  (80 % interval {s.low:,.0f} – {_when(s.high, '{:,.0f}'.format)}, "
                  "residual bootstrap)")
    else:   # was "inf (80 % interval inf – inf)"
        above = f", above the target {obs.target_loss:g}" if obs.target_loss is not None else ""
        con.print(f"remaining steps: never (the fitted loss levels off at {c.beta2 * c.scale:.4g}{above})")
    if not rep.rows:
        con.print("no speed samples: give some to predict time per configuration")
        return
    best = min(rep.rows, key=lambda r: r.seconds.value)
    title = f"predicted remaining time (speed model leave-one-out median error {100 * rep.speed_error:.1f} %)"
    if rep.unit == "PS":
        title += f"; servers count: PS + workers <= {max(r.ps + r.workers for r in rep.rows)}"
        cols = [Column("PS", "right"), Column("workers", "right"), Column("PS + workers", "right", 2),
                Column("steps/s", "right", 1), Column("w*, no budget", "right", 3)]
    else:
        cols = [Column("GPUs", "right"), Column("nodes", "right", 2), Column("batch", "right", 1),
                Column("goodput (samples/s)", "right", 3)]
    cols += [Column("time", "right"), Column("80 % interval", "right", 1), Column("")]
    rows = []
    for r in rep.rows:
        cfg = ([str(r.ps), str(r.workers), str(r.ps + r.workers), f"{r.speed:.4g}", str(rep.unbounded_workers[r.ps])]
               if rep.unit == "PS"
               else [str(r.num_gpus), str(r.num_nodes), str(r.global_batch), f"{r.speed:,.0f}"])
        mark = "[bold green]best[/]" if r is best else ""
        rows.append(cfg + [_when(r.seconds.value, human_duration),
                           f"{_when(r.seconds.low, human_duration)} – {_when(r.seconds.high, human_duration)}", mark])
    table(cols, rows, title=title, out=con, wide=wide, show_all="--wide shows all")


def _when(seconds: float, fmt) -> str:
    return "never" if not math.isfinite(seconds) else fmt(seconds)


def plot(obs: Observations, rep: Report, out: Path) -> None:
    import matplotlib
    import numpy as np

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    c = rep.fit.curve
    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4))
    end = rep.k_now + (rep.steps.value if math.isfinite(rep.steps.value) else rep.k_now)
    k = np.linspace(0, max(end, rep.k_now) * 1.05, 300)
    a.plot(obs.steps, obs.losses, "o", ms=3, label="observed")
    a.plot(k, c.raw_loss(np.maximum(k, 1e-9)), "-", label="fitted 1/(β0k+β1)+β2")
    a.axvline(end, ls="--", color="grey", label="predicted end")
    a.set(xlabel="step", ylabel="loss", title="convergence", ylim=(0, float(np.max(obs.losses)) * 1.1))
    a.legend()
    if rep.rows:
        x = [r.ps if rep.unit == "PS" else r.num_gpus for r in rep.rows]
        y = np.array([[r.seconds.value, r.seconds.low, r.seconds.high] for r in rep.rows]) / 3600
        b.plot(x, y[:, 0], "o-", label="predicted")
        b.fill_between(x, y[:, 1], y[:, 2], alpha=0.3, label="80 % interval")
        b.set(xlabel=f"#{rep.unit}", ylabel="remaining time (h)", title="time vs resources")
        b.legend()
    else:
        b.text(0.5, 0.5, "no speed samples", ha="center", va="center")
    fig.tight_layout()
    save_figure(fig, out, dpi=100)
    plt.close(fig)


class _FileOrCurve(TyperGroup):
    """``dlsched predict FILE ...`` (the original form) and ``dlsched predict curve FILE ...``: anything that
    is not a sub-command name goes to the hidden ``file`` command."""

    def parse_args(self, ctx, args):
        if args and args[0] not in self.commands and args[0] not in ("--help", "-h"):
            args = ["file", *args]
        return super().parse_args(ctx, args)


def register(app: typer.Typer) -> None:
    from dlsched.commands import predict_curve

    predict_app = typer.Typer(cls=_FileOrCurve, no_args_is_help=True, help=(
        "Predict a job's remaining time: `predict FILE.yaml|csv` (Optimus + speed models per configuration) or "
        "`predict curve FILE` (schedule-aware time to a target metric)."))
    app.add_typer(predict_app, name="predict")
    predict_curve.register(predict_app)

    @predict_app.command("file", hidden=True)
    def predict_cmd(
        file: Path = typer.Argument(..., help="YAML or CSV of observed losses and speed samples"),
        plot_path: Optional[Path] = typer.Option(None, "--plot", help="write observed vs fitted loss and time vs #workers here (PNG)"),
        gpus: int = typer.Option(8, "--gpus", min=1, help="resource budget: GPUs (all-reduce) or PS + workers (parameter server)"),
        delta: Optional[float] = typer.Option(None, "--delta", help="converged when the normalised loss drops less than this per epoch (replaces the file's target)"),
        target_loss: Optional[float] = typer.Option(None, "--target-loss", help="predict the time to this (raw) loss instead (replaces the file's target)"),
        steps_per_epoch: Optional[float] = typer.Option(None, "--steps-per-epoch", help="default: median step spacing"),
        batch: Optional[int] = typer.Option(None, "--batch", help="global batch size M of the job"),
        gpus_per_node: Optional[int] = typer.Option(None, "--gpus-per-node", help="GPUs per node the configurations are laid out on (default: the YAML speed section's, else 4)"),
        as_json: bool = typer.Option(False, "--json", help="one JSON object on stdout instead of the table"),
        wide: bool = typer.Option(False, "--wide", "-o", help="all columns, whatever the terminal width"),
    ) -> None:
        """Predict a job's remaining training time per configuration (Optimus convergence + speed models)."""
        if plot_path is not None:
            check_plot_path(plot_path)
        if delta is not None and target_loss is not None:
            raise UserError("--delta and --target-loss: give one, not both")
        obs = load_observations(file)
        for name, flag, value in (("delta", "--delta", delta), ("target_loss", "--target-loss", target_loss),
                                  ("steps_per_epoch", "--steps-per-epoch", steps_per_epoch),
                                  ("global_batch", "--batch", batch), ("gpus_per_node", "--gpus-per-node", gpus_per_node)):
            if value is not None:
                if not value > 0:
                    raise UserError(f"{flag}: must be > 0, got {value:g}")
                setattr(obs, name, value)
        # the command line's target is the one predicted: it replaces the file's target (a delta or a loss)
        if target_loss is not None:
            obs.delta = None
        if delta is not None:
            obs.target_loss = None
        if obs.delta is not None and obs.target_loss is not None:   # the file's, neither flag given
            raise UserError(f"{obs.source}: field 'target': give either a loss or a delta, not both")
        if loss_rises(obs.losses):   # the fit of a rising loss is flat: "remaining steps: 0" read as converged
            first, last = obs.losses[0], obs.losses[-1]
            typer.echo(f"warning: {obs.source}: the loss rises over the points ({first:g} at step {obs.steps[0]:g} "
                       f"to {last:g} at step {obs.steps[-1]:g}): not converged; the fitted curve only falls, so its "
                       "remaining steps are no prediction", err=True)
        if zeros := int((obs.losses == 0).sum()):   # said, as it moves the fit (``predict curve`` says the same)
            typer.echo(f"note: {zeros} point{'s' * (zeros > 1)} of loss at 0 {'leave' if zeros > 1 else 'leaves'} no "
                       "loss to model: fitted as half the smallest loss logged (or half the target's, if lower)",
                       err=True)
        rep = predict(obs, gpus)
        if as_json:
            print(json.dumps(report_dict(obs, rep), indent=2, allow_nan=False))
        else:
            render(obs, rep, wide)
        if plot_path is not None:
            plot(obs, rep, plot_path)
            if not as_json:   # stdout is then the one JSON object
                print(f"plot written to {plot_path}")
