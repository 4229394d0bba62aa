"""``dlsched predict curve FILE``: when will this run reach a target, and where will it end? (a stable
contract other tools call; the JSON keys below only ever gain siblings).

    dlsched predict curve FILE --x step --y loss --budget N --schedule SPEC \\
        [--observed-until S] [--target VALUE | --target-fraction 0.95] [--metric loss|accuracy|error] \\
        [--regime scratch|finetune] [--like DONE ...] --json

FILE may be left out before the run starts: two or more ``--like`` runs and ``--budget`` predict it then.

``--json`` prints one object: model, final_value, final_value_interval_80, floor, target, target_step,
steps_to_target (remaining x from the last observed point; null if unreachable), interval_80 (for
steps_to_target), p_reach (the chance of reaching the target by the budget, from the calibrated final-value
band), observed_until, budget, regime (the shipped prior's pool: from-scratch or fine-tune runs), like_runs (with
--like: the finished runs the prior came from), bands (what the bands come from: fit, levelled, carried, one_point,
task_runs: the --like runs alone, before the run's first point or from one), and,
when the log has wall-clock times, seconds_to_target (and seconds_to_target_interval_80) and seconds_to_budget
at the speed of the newest points (a run with no timed point yet: at the --like runs' median speed, and
seconds_from: like_runs). Exit codes: 0, 2 bad input (one line), 3 target unreachable (one line on
stderr; with --json the object is still printed).
"""
from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Optional

import typer

from dlsched.commands.plot_file import check_plot_path, save_figure
from dlsched.display import human_duration
from dlsched.errors import UserError
from dlsched.spec import accuracy_target_slip

UNREACHABLE_EXIT = 3

SCHEDULE_HELP = ("LR schedule over [0, budget] in the curve's x units: constant | step:M1,M2:F | cosine[:warmup=W] | "
                 'onecycle[:pct=P] | wsd:warmdown=N[:warmup=W] | poly:power=P[:warmup=W] | linear[:warmup=W] | '
                 'invsqrt:warmup=W[:timescale=T] (sqrt(T/(x-W+T)), T=W unless given) | '
                 'exp:gamma=G[:every=E][:warmup=W] (x G every E) | sgdr:t0=T[:mult=M][:warmup=W] (cosine cycles '
                 'of T, T*M, ..., each restarting at the peak) | steps:X=LR,... (piecewise constant) | '
                 'points:X=LR,... (piecewise linear); cosine, linear, poly, wsd and sgdr take :min=M (decay to M x the '
                 'peak, not 0) | lr-column (the --lr-col of '
                 "every row, also rows past --observed-until; past the log's end, the --like runs' logged LR where the "
                 "log so far follows theirs, else the family its logged decay follows, else its last value). Warm-up "
                 'is linear from 0; a span of x may be a % of the budget (warmup=5%); LR values are relative (only the '
                 'shape matters). '
                 'Default: lr-column when --lr-col is given or the log has one LR column (lr, learning_rate, '
                 "lr-<Optimizer>; of one optimizer's lr/pgN groups the shape most share), else the LR the --like runs "
                 "logged where they share one shape (stretched to the budget), else constant")


LIKE_LR = "the --like runs' logged LR"   # where a run's LR comes from past its log: its recipe's other runs


def _schedule(spec: str | None, budget: float, curve, recipe=None):
    """The run's schedule over the budget, and with ``lr-column`` what its logged LR goes on as (or None): the
    ``recipe`` (the --like runs' shared shape) where the log so far follows it, else the family its decay follows."""
    from dlsched.perf.lr_continuation import logged_lr_schedule
    from dlsched.perf.schedule import parse_schedule

    if spec is None:
        spec = "lr-column" if curve.lr is not None else "constant"
    if spec == "lr-column":
        if curve.lr_name is not None and (curve.lr is None or len(curve.lr) == 0):
            raise UserError(f"--schedule lr-column: {curve.source}: no row of its LR column {curve.lr_name!r} has a "
                            "value of the --x column (give the schedule with --schedule SPEC)")
        if curve.lr is None or len(curve.lr) == 0:
            raise UserError(f"--schedule lr-column: {curve.source} has no LR values (name the column with --lr-col)")
        try:
            return logged_lr_schedule(curve.lr_x, curve.lr, budget, recipe)
        except ValueError as e:
            raise UserError(f"--lr-col {curve.lr_name!r}: {e}") from None
    try:
        return parse_schedule(spec, budget), None
    except ValueError as e:
        raise UserError(f"--schedule: {e}") from None


def run_curve(file: Path | None, x: str, y: str, budget: float | None, schedule: str | None, observed_until: float | None,
              target: float | None, target_fraction: float | None, metric: str | None, lr_col: str | None,
              time_col: str | None, as_json: bool, plot_path: Path | None, regime: str = "scratch",
              x_from_zero: bool | None = None, like: list[Path] | None = None) -> int:
    import dataclasses

    import numpy as np

    from dlsched.commands.like_runs import finished_run, like_prior, read_like_run
    from dlsched.perf.curve_predict import METRICS, MetricSpace, predict_curve
    from dlsched.perf.curve_readers import CurveData, read_curve, seconds_per_x
    from dlsched.perf.lr_continuation import lr_logged_until
    from dlsched.perf.prior import REGIMES
    from dlsched.perf.schedule import shared_shape, stretched

    if metric is not None and metric not in METRICS:
        raise UserError(f"--metric: expected one of {', '.join(METRICS)}, got {metric!r}")
    if regime not in REGIMES:
        raise UserError(f"--regime: expected one of {', '.join(REGIMES)}, got {regime!r}")
    if target is not None and target_fraction is not None:
        raise UserError("--target and --target-fraction: give one, not both")
    if target is not None and not math.isfinite(target):
        raise UserError(f"--target: must be a finite number, got {target}")
    if target_fraction is not None and not 0 < target_fraction <= 1:
        raise UserError(f"--target-fraction: must be in (0, 1], got {target_fraction}")
    if plot_path is not None:
        check_plot_path(plot_path)
    # the options' own errors before the log is read: its notes on stderr came first, the error line after them
    if budget is not None and not (math.isfinite(budget) and budget > 0):
        raise UserError(f"--budget: must be > 0, got {budget:g}")
    if schedule not in (None, "lr-column"):
        _schedule(schedule, budget or 1e12, None)   # the spec's syntax (a budget read from the log: any will do)
    if file is None:   # before the run starts: its task's finished runs alone
        if len(like or ()) < 2:
            raise UserError("FILE: required (the run's log), unless two or more finished runs of its task (--like) "
                            "predict it before it starts")
        if budget is None:
            raise UserError("--budget: required (the run has no log to read it from)")
        if schedule == "lr-column":
            raise UserError("--schedule lr-column: the run has no log to read its LR from; give its schedule as a SPEC")
        curve = CurveData("the run (not started)", np.empty(0), np.empty(0))
    else:
        curve = read_curve(file, x=x, y=y, lr_col=lr_col, time_col=time_col)
    if curve.note:
        typer.echo(f"note: {curve.note}", err=True)
    metric = _metric(metric, y, curve.y if file is not None else None)
    # None: as the log's own format says (``zero_based_epochs``); a user's CSV that starts at 0 is told how to choose
    known = curve.epochs_from_zero
    if x_from_zero is None:
        x_from_zero = known is not None
        if known is None and "epoch" in x.lower() and len(curve.x) and float(np.min(curve.x)) == 0:
            typer.echo(f"note: {x} starts at 0, read as an evaluation before any training (not fitted); if the "
                       "log numbers the first finished epoch 0, pass --x-from-zero", err=True)
    def shift(c):   # the logger numbers the first finished epoch 0: x is read as finished epochs, its own + 1
        return dataclasses.replace(c, x=c.x + 1, lr_x=None if c.lr_x is None else c.lr_x + 1) if x_from_zero else c
    curve = shift(curve)
    if x_from_zero:
        observed_until = None if observed_until is None else observed_until + 1
    budget = budget if budget is not None else curve.budget
    if budget is None:
        raise UserError(f"--budget: required ({curve.source} does not name its budget in {x!r})")
    if not (math.isfinite(budget) and budget > 0):
        raise UserError(f"--budget: must be > 0, got {budget}")
    keep = np.ones(len(curve.x), bool) if observed_until is None else curve.x <= observed_until
    if keep.sum() == 0 and len(like or ()) < 2:   # none: the task's finished runs alone (perf/curve_predict.py)
        raise UserError(f"{curve.source}: no point to predict from (none with {x} <= {observed_until}), field {y!r}; "
                        "two or more finished runs of its task (--like) predict it before its first")
    if keep.any() and curve.x[keep][-1] > budget:
        raise UserError(f"--budget: {budget:g} is before the last observed {x} ({curve.x[keep][-1]:g}); "
                        "use --observed-until to cut the curve")
    if metric == "error" and target is not None and 0 < target < 1 and len(curve.y) and np.nanmax(curve.y) > 1:
        # an accuracy target is read on the data's scale; an error's is not: 0.07 % and 7 % are both errors one
        # may want, so it says how it read it
        typer.echo(f"note: --target {target:g} on {y} logged in % (up to {np.nanmax(curve.y):g}): read as "
                   f"{target:g} %; for {100 * target:g} % give --target {100 * target:g}", err=True)
    if len(curve.x) and curve.x[-1] > budget:   # the run logged past its budget: more likely a budget in other units
        typer.echo(f"note: {curve.source} goes on to {x} {curve.x[-1]:g}, past the --budget {budget:g}: the budget is "
                   f"in {x} (the --x column)", err=True)
    prior = "shipped"
    if like and file is not None and (same := next((f for f in like if Path(f).resolve() == Path(file).resolve()),
                                                   None)) is not None:
        raise UserError(f"--like {same}: is the run predicted; give finished runs of its task")
    rate = seconds_per_x(type(curve)(curve.source, curve.x[keep], curve.y[keep],
                                     None if curve.time is None else curve.time[keep],
                                     session=None if curve.session is None else curve.session[keep]))
    # each --like run read once; with its times where the run has no timed point of its own yet (their speed is its)
    logs = [read_like_run(f, x, y, lr_col, time_col if rate is None else None) for f in like or ()]
    for f, log in zip(like or (), logs):   # a finished run, by the option's word; its log's own budget can say not
        if log.budget is not None and len(log.x) and lr_logged_until(log.x, log.budget) is not None:
            typer.echo(f"note: --like {f} ends at {x} {log.x[-1]:g} of its budget {log.budget:g} (still training, "
                       "or stopped early): taken as ended there", err=True)
    # an accuracy's scale (0-1 or %): the run's points, else its log's, else (no log) the first --like run's
    scale = MetricSpace.of(metric, curve.y[keep] if keep.any() else curve.y if len(curve.y) else
                           logs[0].y if logs else curve.y).top
    if (zeros := int((MetricSpace(metric, scale).down(curve.y[keep]) == 0).sum())) and keep.any():
        left = "error" if metric == "accuracy" else metric   # ``perf.perfect_points``: said, as it moves the fit
        typer.echo(f"note: {zeros} point{'s' * (zeros > 1)} of {y} at {scale if metric == 'accuracy' else 0:g} "
                   f"{'leave' if zeros > 1 else 'leaves'} no {left} to model: fitted as half the smallest {left} "
                   "logged (or half the target's, if lower)", err=True)
    if target is not None:   # out of range on the data's scale: the option, not the log's column, is what to fix
        # 1.5 on a log in fractions read as 1.5 %, "already reached" without a word (as submit --target refuses it)
        if metric == "accuracy" and (why := accuracy_target_slip(target, scale)):
            raise UserError(f"--target {target:g}: {why}")
        try:
            read = MetricSpace(metric, scale).target(target)
        except ValueError as e:
            raise UserError(f"--target {target:g}: {e}") from None
        if read != target:   # how it was read, where that is not as given
            typer.echo(f"note: --target {target:g} read as {read:g}: {y} is logged "
                       f"{'in %' if scale == 100.0 else 'as a fraction'}", err=True)
    fits = [finished_run(f, log, y, metric, regime,   # each one's own LR where it logs one, else the SPEC at its budget
                         lambda c, b: _schedule(schedule if c.lr is None else "lr-column", b, c)[0], shift, scale)
            for f, log in zip(like or (), logs)]
    # where the run's logged LR ends, where that is before the budget (a run still training); None: to its end, or none
    logged_until = None if curve.lr is None else lr_logged_until(curve.lr_x, budget)
    # one recipe: the LR the --like runs logged, where they share one shape, stretched to this run's budget
    recipe = None
    if logs and all(log.lr is not None for log in logs):
        if (shared := shared_shape([f.curve.schedule for f in fits])) is not None:
            recipe = stretched(shared, budget, LIKE_LR)
        elif schedule is None and curve.lr is None:
            typer.echo("note: the --like runs' logged LRs differ in shape: the run's is taken as constant (give it "
                       "with --schedule SPEC)", err=True)
        elif schedule in (None, "lr-column") and logged_until is not None:
            typer.echo("note: the --like runs' logged LRs differ in shape: past its log, the run's LR goes on as its "
                       "own decay does, or is held", err=True)
    sched, continued = _schedule(schedule, budget, curve, recipe if schedule in (None, "lr-column") else None)
    if (past := [k for k in sched.xs if k > budget]) and sched.spec.split(":")[0] in ("step", "steps", "points"):
        # the LR does not change there within the run: more likely a schedule (or budget) in other units of x
        typer.echo(f"note: --schedule {sched.spec}: {', '.join(f'{k:g}' for k in past)} past the --budget {budget:g} "
                   f"(in {x}): no LR change there is in the run; are both in {x}?", err=True)
    if schedule is None and curve.lr is None and recipe is not None:   # none given, none logged: the recipe's
        sched = dataclasses.replace(recipe, spec=f"as {LIKE_LR}")
    elif recipe is not None and sched.spec == "lr-column" and logged_until is not None \
            and (continued is None or continued.spec != LIKE_LR):
        typer.echo("note: the run's logged LR does not follow the --like runs' so far: past its log it goes on as "
                   f"{continued.spec if continued else 'its last value'}", err=True)
    if like:
        prior = like_prior(fits, metric, regime, sched)
    try:
        pred = predict_curve(curve.x[keep], curve.y[keep], sched, metric=metric, target=target,
                             target_fraction=target_fraction, regime=regime, prior=prior, scale=scale)
    except ValueError as e:
        raise UserError(f"{curve.source}: field {y!r}: {e}") from None
    out = pred.as_json()
    out["metric"] = metric
    out["beyond_final"] = pred.beyond_final(metric)
    out["schedule"] = sched.spec
    out["regime"] = regime
    if like:
        out["like_runs"] = len(like)
    if x_from_zero:
        out["x_from_zero"] = True
        if known is not None:
            out["x_from_zero_because"] = f"{known} numbers the first finished epoch 0"
    if sched.spec == "lr-column":   # which column: it may have been found, not named (``logged_lr_column``)
        out["lr_column"] = curve.lr_name
        if logged_until is not None:   # a run still training
            out["lr_logged_until"] = logged_until
            out["lr_continued_as"] = None if continued is None else continued.spec   # None: held at its last value
    if rate is None and like and time_col:   # no timed points of its own yet: the --like runs' median speed
        rates = [r for log in logs if (r := seconds_per_x(log)) is not None]
        if rates:
            rate = float(np.median(rates))
            out["seconds_from"] = "like_runs"
    if rate is not None:
        out["seconds_to_budget"] = rate * (budget - pred.x_now)
        out["seconds_to_target"] = None if pred.steps_to_target is None else rate * pred.steps_to_target
        out["seconds_to_target_interval_80"] = None if pred.interval_80 is None else \
            [rate * v for v in pred.interval_80]
    if as_json:
        print(json.dumps(out))
    else:
        _render(out, x, metric)
    if plot_path is not None:
        until = out.get("lr_logged_until")
        label = sched.spec if until is None else \
            f"logged to {x} {until:g}, then {out['lr_continued_as'] or 'held'}"
        _plot(curve, keep, pred, plot_path, x, y, sched, label, quiet=as_json)
    if not pred.reachable:
        # an accuracy's bound is a ceiling, as the text above says it (the JSON's ``floor``)
        bound = "ceiling" if metric == "accuracy" else "floor"
        best = "highest" if metric == "accuracy" else "lowest"
        if pred.x_now >= budget:   # a finished run: nothing is predicted, the log says it
            typer.echo(f"target {pred.target:g} is unreachable: the run is at its budget ({x} {budget:g}), and the "
                       f"{best} its log got to is {pred.floor:.4g} (a 3-point running median)", err=True)
            return UNREACHABLE_EXIT
        typer.echo(f"target {pred.target:g} is unreachable within the budget {budget:g}: the fitted {bound} is "
                   f"{pred.floor:.4g} ({metric} at {x} {budget:g}, the {best} the calibrated errors allow)", err=True)
        return UNREACHABLE_EXIT
    return 0


def _metric(given: str | None, y: str, values) -> str:
    """``--metric`` as given, else as the column's name says (``perf.metric_names``), else a loss; a log that goes the
    other way over its points than the metric improves is said so (an accuracy read as a loss is "reached" at once)."""
    from dlsched.perf.metric_names import against_the_grain, metric_from_name

    metric = given or metric_from_name(y) or "loss"
    if given is None and metric != "loss":
        typer.echo(f"note: --metric {metric}, from the column's name {y!r} (give --metric to choose)", err=True)
    if values is not None and against_the_grain(values, metric):
        if metric == "accuracy":
            typer.echo(f"note: {y} falls over the log, read as an accuracy (higher is better): if lower is better, "
                       "give --metric loss or --metric error", err=True)
        else:
            typer.echo(f"note: {y} rises over the log, read as {'a loss' if metric == 'loss' else 'an error'} "
                       "(lower is better): if higher is better, give --metric accuracy", err=True)
    return metric


def _render(out: dict, x: str, metric: str) -> None:
    from rich.console import Console

    con = Console()
    lo, hi = out["final_value_interval_80"]
    column = f" {out['lr_column']!r}" if out.get("lr_column") else ""
    con.print(f"model [bold]{out['model']}[/] (schedule {out['schedule']}{column}, {out['regime']}), observed to {x} {out['observed_until']:g} "
              f"of {out['budget']:g}")
    if out.get("bands") == "task_runs":
        con.print(f"{'before the first point' if out['observed_until'] <= 0 else 'from one point'}: where the task's "
                  "finished runs (--like) would have gone under this schedule (a second point fits the run's own)")
    elif out["model"] == "prior":
        con.print("one point after training starts: the finished runs' curves carried through it "
                  "(wide bands; a second point fits the run's own)")
    if out.get("lr_logged_until") is not None:
        went_on = out["lr_continued_as"]
        if went_on is None:
            rest = "then held at its last value (if it still decays, give the schedule with --schedule SPEC)"
        elif went_on == LIKE_LR:
            rest = f"then as {LIKE_LR} (its log so far follows theirs)"
        else:
            rest = f"then as {went_on} (its logged decay follows it)"
        con.print(f"LR: logged to {x} {_x(out['lr_logged_until'])} of {out['budget']:g}, {rest}")
    if out.get("x_from_zero"):
        why = out.get("x_from_zero_because")
        con.print(f"{x} read as finished epochs, the log's + 1" + (f" ({why})" if why else ""))
    best = "ceiling" if metric == "accuracy" else "floor"   # the JSON's floor: for accuracy the highest reachable
    con.print(f"final {metric}: {out['final_value']:.4g}  (80 % interval {lo:.4g} – {hi:.4g}; {best} {out['floor']:.4g})")
    if out["target"] is not None and out["steps_to_target"] is not None:
        a, b = out["interval_80"]
        s = out.get("seconds_to_target")
        eta = "" if s is None else \
            f"; in ~{human_duration(s)}, " + " – ".join(map(human_duration, out["seconds_to_target_interval_80"])) \
            + (" at the --like runs' speed" if out.get("seconds_from") == "like_runs" else "")
        p = 100 * out["p_reach"]
        chance = f"chance by the budget {'< 1' if 0 < p < 0.5 else f'{p:.0f}'} %"
        if out["steps_to_target"] == 0 and out["p_reach"] == 1:   # already there: where the log got there
            con.print(f"target {out['target']:.4g}: already reached, at {x} {_x(out['target_step'])} of the log")
        elif out["steps_to_target"] == 0:   # the newest point got there, its running median not yet
            con.print(f"target {out['target']:.4g}: at the newest point, {x} {_x(out['target_step'])}, if the next "
                      f"evaluation stays there (the log's running median is not there yet; {chance})")
        elif out["beyond_final"]:   # only a run that beats its prediction gets there (CurvePrediction.beyond_final)
            con.print(f"target {out['target']:.4g}: beyond the predicted final value; reached by {x} "
                      f"{out['budget']:g} only if the run does better than predicted ({chance})")
        else:
            # the band as the x it names, then as x from now: "at step 268 (80 % interval 16.4 – 157" read as steps
            now = out["observed_until"]
            con.print(f"target {out['target']:.4g}: at {x} {_x(out['target_step'])}, {_x(out['steps_to_target'])} from "
                      f"now (80 % interval: {x} {_x(now + a)} – {_x(now + b)}, {_x(a)} – {_x(b)} from now{eta}; {chance})")


def _x(v: float) -> str:
    """An x as a person reads it: whole from 100 up (12,345), else 3 significant digits (an epoch's 2.75)."""
    return f"{v:,.0f}" if abs(v) >= 100 else f"{v:.3g}"


def _plot(curve, keep, pred, out: Path, x: str, y: str, schedule, lr_label: str, quiet: bool = False) -> None:
    import matplotlib.pyplot as plt

    fig = _figure(curve, keep, pred, x, y, schedule, lr_label)
    save_figure(fig, out, dpi=100)
    plt.close(fig)
    if not quiet:   # with --json, stdout is the one JSON object
        print(f"plot written to {out}")


def _figure(curve, keep, pred, x: str, y: str, schedule, lr_label: str):
    """The log, the prediction with its final's band, and on a second axis the LR the prediction assumed (a share of
    its peak: a logged LR continued or held past the log's end shows where it was), ``lr_label`` saying which."""
    import matplotlib
    import numpy as np

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    lr_ax = ax.twinx()
    # from its first knot: before a log's first row its LR is unknown (a SPEC's first knot is 0)
    g = np.linspace(min(schedule.xs[0], schedule.budget), schedule.budget, 400)
    lr = schedule.lr(g)
    lr_ax.plot(g, lr / (lr.max() or 1.0), ":", color="tab:purple", lw=1, label=f"LR: {lr_label}"[:70])
    lr_ax.set(ylabel="LR, share of its peak", ylim=(0, 1.05))
    ax.plot(curve.x, curve.y, "o", ms=3, color="0.6", label="logged")
    if pred.model == "prior":   # finished runs carried through the point(s): nothing of this log is fitted
        ax.plot(curve.x[keep], curve.y[keep], "o", ms=3, label="observed")
    else:   # the law was fitted from its curve's first x on: past a warm-up and a slow start (``perf.fit_window``)
        fitted = keep & (curve.x >= pred.curve_x[0])
        ax.plot(curve.x[fitted], curve.y[fitted], "o", ms=3, label="observed (fitted)")
        if (early := keep & ~fitted).any():
            ax.plot(curve.x[early], curve.y[early], "o", ms=3, mfc="none",
                    label="observed, not fitted (warm-up, slow start)")
    ax.plot(pred.curve_x, pred.curve_y, "-", label=f"predicted ({pred.model})")
    lo, hi = pred.final_value_interval_80
    ax.errorbar([pred.budget], [pred.final_value], yerr=[[pred.final_value - lo], [hi - pred.final_value]], fmt="s",
                capsize=4, label="final, 80 % interval")
    if pred.target is not None:
        ax.axhline(pred.target, ls="--", color="grey", label="target")
    ax.set(xlabel=x, ylabel=y)
    lines = ax.get_legend_handles_labels()
    extra = lr_ax.get_legend_handles_labels()
    ax.legend(lines[0] + extra[0], lines[1] + extra[1], fontsize=8)
    fig.tight_layout()
    return fig


def register(predict_app: typer.Typer) -> None:
    @predict_app.command("curve")
    def curve_cmd(
        file: Optional[Path] = typer.Argument(None, help="curve log: CSV/TSV, progress.jsonl, trainer_state.json, TensorBoard events, a "
                                              "text log (MLPerf :::MLLOG lines or name:value pairs) or a folder of them (a run folder: Ultralytics', "
                                              "a Hugging Face output folder's newest checkpoint); none before the run starts, with two or more --like runs and --budget"),
        x: str = typer.Option("step", "--x", help="column (or tag) of the progress axis"),
        y: str = typer.Option("loss", "--y", help="column (or tag) of the metric"),
        budget: Optional[float] = typer.Option(None, "--budget", help="total x the run will train (default: from the log)"),
        schedule: Optional[str] = typer.Option(None, "--schedule", help=SCHEDULE_HELP),
        observed_until: Optional[float] = typer.Option(None, "--observed-until", help="use only points with x <= this"),
        target: Optional[float] = typer.Option(None, "--target", help="metric value to reach, in the metric's units (accuracy: 0-1 or %, either is read on the data's scale; 1-10 on 0-1 data is refused as a likely slip)"),
        target_fraction: Optional[float] = typer.Option(None, "--target-fraction", help="fraction of the total improvement (first value -> predicted final)"),
        metric: Optional[str] = typer.Option(None, "--metric", help="loss | error (lower is better) | accuracy (higher; 0-1 or %); default: as the --y column's name says (acc, top1, mAP, f1: accuracy; err, wer: error), else loss. An error or accuracy takes the shape prior of image, speech and recommendation runs, which an LR decay improves a lot: for a language model's token accuracy, predict its loss, or give finished runs with --like"),
        lr_col: Optional[str] = typer.Option(None, "--lr-col", help="column (or tag) of the logged LR"),
        time_col: Optional[str] = typer.Option(None, "--time-col", help="column of wall-clock time (seconds or ISO-8601): gives the time to target"),
        as_json: bool = typer.Option(False, "--json", help="print one JSON object (the stable contract)"),
        plot_path: Optional[Path] = typer.Option(None, "--plot", help="write logged, observed and predicted curves and the LR the prediction assumed here (PNG)"),
        regime: str = typer.Option("scratch", "--regime", help="scratch (trained from random weights) | finetune "
                                   "(from pretrained weights): the shipped prior pools the development runs of this regime"),
        x_from_zero: Optional[bool] = typer.Option(
            None, "--x-from-zero/--x-as-logged", help="the log numbers the first finished epoch 0: read x + 1, "
            "finished epochs (--observed-until too); --x-as-logged: x = 0 is an evaluation before any training. "
            "Default: --x-from-zero for an epoch x in Keras' CSVLogger, timm's summary.csv, Lightning's "
            "metrics.csv and dlsched's progress.jsonl logs and a Keras TensorBoard epoch_* tag that start at 0 (older Ultralytics logs need the "
            "flag), else as logged"),
        like: Optional[list[Path]] = typer.Option(
            None, "--like", metavar="DONE", help="a finished run of the same task (repeat for more), read with the same --x, --y and "
            "--lr-col, under its own logged LR, else --schedule at its last x: its fit sets the shape prior, and two "
            "or more set where this run ends (their finals carried to --schedule)"),
    ) -> None:
        """When will this run reach a target, and where will it end? Schedule-aware, with calibrated 80 % intervals."""
        code = run_curve(file, x, y, budget, schedule, observed_until, target, target_fraction, metric, lr_col,
                         time_col, as_json, plot_path, regime, x_from_zero, like)
        if code:
            raise typer.Exit(code)
