"""``dlsched ensemble run SPEC.yaml``: train an ensemble with FLEET's shared pipeline, a live table per model, and
a final report (time per model, flotillas over time as a plot). ``dlsched ensemble simulate``: FLEET vs separate
training vs homogeneous data sharing on a simulated cluster with rates from the H100 table.

Heavy modules (torch, matplotlib) load inside the commands: every ``dlsched`` start imports this file.
"""
from __future__ import annotations

import contextlib
import json
import time
from pathlib import Path

import typer

from dlsched.display import Column, human_duration
from dlsched.display import table as display_table
from dlsched.errors import UserError
from dlsched.service.fleet_status import STOPPED

app = typer.Typer(no_args_is_help=True, help="FLEET ensemble training (shared preprocessing, flotillas).")


def register(root: typer.Typer) -> None:
    root.add_typer(app, name="ensemble")


class _LiveTable:
    """Rows per model, refreshed from the members' progress reports. ``min_delta``: the convergence rule's, so that
    "best val acc" is the kept checkpoint's, as the closing table's is (``train.flotilla`` keeps an epoch's only when
    it beats the best by more): the highest seen said 0.996 above a closing 0.992 for the same member. ``left``: the
    members that left in an earlier run into the folder (``fleet_job.left_earlier``): shown so from the start (each
    said "waiting" until the closing table's "earlier run")."""

    def __init__(self, names: list[str], min_delta: float = 0.0, left: dict[str, dict] | None = None) -> None:
        self.rows = {n: {"status": "waiting", "epoch": 0, "step": 0, "loss": None, "acc": None, "rate": None} for n in names}
        for n, d in (left or {}).items():
            if n in self.rows:
                self.rows[n].update(status=STOPPED if d.get("reason") == "max_epochs" else "converged",
                                    epoch=d.get("epoch", 0),
                                    acc=d["best_acc"] if isinstance(d.get("best_acc"), (int, float)) else None)
        self.flotilla = ""
        self.min_delta = min_delta

    def update(self, msg: tuple) -> None:
        name, status, epoch, step, loss, acc, rate = msg
        row = self.rows[name]
        row.update(status=STOPPED if status == "max_epochs" else status, epoch=epoch, step=step)
        if loss is not None:
            row["loss"] = loss
        if acc is not None and acc >= 0:   # a member's last report (no loss) carries its best itself
            if loss is None or row["acc"] is None or acc > row["acc"] + self.min_delta:
                row["acc"] = acc
        if rate is not None:
            row["rate"] = rate

    def render(self):
        from rich.table import Table

        t = Table(title=f"ensemble -- flotilla now: {self.flotilla}")
        for col in ("model", "status", "epoch", "step", "loss", "best val acc", "samples/s"):
            t.add_column(col, justify="left" if col in ("model", "status") else "right")
        for n, r in self.rows.items():
            t.add_row(n, r["status"], str(r["epoch"]), str(r["step"]),
                      "-" if r["loss"] is None else f"{r['loss']:.3f}",
                      "-" if r["acc"] is None else f"{r['acc']:.3f}",
                      "-" if r["rate"] is None else f"{r['rate']:.0f}")
        return t


def plot_flotillas(report, names: list[str], path: Path) -> None:
    """One row per model, one bar per flotilla it trained in, coloured by flotilla."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 0.5 * len(names) + 1.5))
    colours = plt.get_cmap("tab10")
    for i, f in enumerate(report.flotillas):
        for m in f.members:
            ax.broken_barh([(f.start, f.end - f.start)], (names.index(m) - 0.4, 0.8), color=colours(i % 10), alpha=0.8,
                           label=f"flotilla {i}" if m == f.members[0] else None)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1), fontsize=8)
    for m, t in report.finish_s.items():
        ax.plot([t], [names.index(m)], "k|", markersize=14)
    ax.set_yticks(range(len(names)), names)
    ax.set_xlabel("seconds since start")
    ax.set_title("flotillas over time (| = converged)")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


@app.command()
def run(spec_file: Path = typer.Argument(..., help="ensemble YAML (see examples/ensemble/spec.yaml)"),
        output: Path = typer.Option(None, help="report folder (default: the spec's 'output')"),
        live: bool = typer.Option(True, help="live progress table"),
        as_json: bool = typer.Option(False, "--json", help="print report.json on stdout instead of the summary table"),
        wide: bool = typer.Option(False, "--wide", "-o", help="all columns, whatever the terminal width")) -> None:
    """Train every model of the ensemble to convergence with shared preprocessing and flotilla re-formation."""
    from rich.console import Console
    from rich.live import Live

    from dlsched.train import preemption
    from dlsched.train.fleet_job import Share, left_earlier, train_ensemble
    from dlsched.train.fleet_spec import load_data, load_spec

    spec = load_spec(spec_file)
    base = spec.base(spec_file)   # its base_dir, as the service's runtime reads it; else the spec's folder
    members = spec.members(base)
    # the models and the data before the report folder: a bad spec leaves no empty folder behind
    spec.check_models(base, str(spec_file))
    data, val = load_data(spec, base)
    # a relative 'output' is under the working directory, never beside the spec (that may be the source tree)
    out = output or Path(spec.output)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        where = f"--output {str(out)!r}" if output else f"{spec_file}: field output: {spec.output!r}"
        raise UserError(f"{where}: cannot create folder: {e.strerror}") from None
    table = _LiveTable([m.name for m in members], spec.convergence_rule().min_delta,
                       left_earlier(out / "checkpoints"))
    console = Console()
    t0 = time.time()
    plans: list[dict] = []

    def on_plan(record: dict) -> None:
        table.flotilla = " | ".join(", ".join(f["members"]) for f in record["flotillas"])
        plans.append(record)

    with (Live(table.render(), console=console, refresh_per_second=4) if live else contextlib.nullcontext()) as lv:
        def on_report(msg: tuple) -> None:
            table.update(msg)
            if lv is not None:
                lv.update(table.render())

        # Ctrl-C (or SIGTERM) stops at the members' next step, each checkpointed, as in `dlsched train`: it killed
        # every member process (a traceback each) and lost what they trained since the last re-formation
        preemption.install()
        report, done = train_ensemble(members, data, val, spec.batch_size, spec.convergence_rule(),
                                      out / "checkpoints", share=lambda: Share(spec.slots), eps=spec.rate_tolerance,
                                      seed=spec.dataset.seed, stop_requested=preemption.requested,
                                      on_report=on_report, on_plan=on_plan, augment=spec.augment())
    if live and not console.is_terminal:   # rich leaves a piped live table's last line open: the next one ran on
        console.line()
    if not done:
        Console(stderr=True).print(f"stopped: every member still training checkpointed in {out / 'checkpoints'}; "
                                   "the same command resumes there", soft_wrap=True)
        raise typer.Exit(143)
    names = [m.name for m in members]
    plot_flotillas(report, names, out / "flotillas.png")
    # a member that left in an earlier run into this folder (resumed from its checkpoints) has no time in this one
    outcome = {n: STOPPED if report.left.get(n) == "max_epochs" else report.left.get(n, table.rows[n]["status"])
               for n in names}
    finish = {n: report.finish_s.get(n) for n in names}
    cols = [Column("model"), Column("outcome"), Column("time to converge", "right"), Column("epochs", "right"),
            Column("best val acc", "right"), Column("profiled samples/s", "right", 1), Column("checkpoint", drop_rank=2)]
    rows = [[n, outcome[n], "earlier run" if finish[n] is None else human_duration(finish[n]), str(report.epochs[n]),
             f"{report.best_acc[n]:.3f}", f"{report.rates[n]:.0f}", str(out / "checkpoints" / f"{n}.best.pt")]
            for n in names]
    report_doc = {
        "name": spec.name, "outcome": outcome,
        "finish_s": finish, "epochs": report.epochs, "best_acc": report.best_acc,
        "best_checkpoint": {n: str((out / "checkpoints" / f"{n}.best.pt").resolve()) for n in names},
        "profiled_samples_per_s": report.rates, "plans": plans,
        "profiles": [p.as_record() for p in report.profiles.values()],
        "note": "times in seconds since training started (after profiling); null: left in an earlier run into "
                "this folder",
        "flotillas": [{"members": list(f.members), "workers": list(f.workers), "start": f.start, "end": f.end,
                       "producer_cpu_s": f.producer_cpu_s}
                      for f in report.flotillas],
    }
    (out / "report.json").write_text(json.dumps(report_doc, indent=2))
    if as_json:
        print(json.dumps(report_doc, indent=2))
        return
    display_table(cols, rows, title=f"ensemble {spec.name}: done in {human_duration(time.time() - t0)} "
                                    f"(profiling included)", out=console, wide=wide, show_all="--wide shows all")
    console.print(f"report: {out / 'report.json'}, plot: {out / 'flotillas.png'}")


@app.command()
def simulate(models: int = typer.Option(100, min=1, max=10_000), nodes: int = typer.Option(16, min=1),
             gpus_per_node: int = typer.Option(4, min=1), cpus_per_node: int = typer.Option(16, min=2),
             seed: int = 0, restart_s: float = typer.Option(30.0, min=0),
             as_json: bool = typer.Option(False, "--json", help="the three makespans as JSON")) -> None:
    """Simulated ensemble with rates from the H100 table: FLEET vs separate training vs homogeneous sharing."""
    from dlsched.paths import shared_data
    from dlsched.policy.base import ClusterView, NodeView
    from dlsched.sim.fleet import (fleet_planner, h100_profiles, homogeneous_planner, independent_planner,
                                      seeded_ensemble, simulate_ensemble)

    if cpus_per_node <= gpus_per_node:
        raise UserError(f"--cpus-per-node must exceed --gpus-per-node (one trainer core per GPU), got {cpus_per_node}")
    prof = h100_profiles(shared_data() / "h100" / "throughput.csv", max_gpus=gpus_per_node)
    members = seeded_ensemble(prof, models, seed=seed)
    cluster = ClusterView(tuple(NodeView(f"n{i}", gpus_per_node, "h100", cpus_per_node) for i in range(nodes)))
    res = {k: simulate_ensemble(members, cluster, p, restart_s=restart_s).makespan
           for k, p in (("FLEET", fleet_planner()), ("separately", independent_planner), ("homogeneous sharing", homogeneous_planner))}
    if as_json:
        print(json.dumps([{"method": k, "makespan_s": v, "fleet_speedup": v / res["FLEET"]} for k, v in res.items()],
                         indent=2))
        return
    display_table([Column("method"), Column("makespan", "right"), Column("FLEET speed-up", "right")],
                  [[k, human_duration(v), f"{v / res['FLEET']:.2f}x"] for k, v in res.items()],
                  title=f"{models} models on {nodes} x {gpus_per_node} GPUs, {cpus_per_node} cores/node")
