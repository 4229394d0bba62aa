"""``dlsched demo`` (what ``make demo`` runs): start the service on the local backend with a small cluster,
submit a staggered mix of real PyTorch jobs over HTTP, show them being scheduled and rescaled live, and write
``demo-report/`` (predicted vs actual completion, allocation Gantt chart, loss fits)."""
from __future__ import annotations

import json
import math
import shlex
import shutil
import time
from pathlib import Path
from typing import Annotated, Optional

import typer
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from rich.console import Console, Group
from rich.live import Live
from rich.markup import escape
from rich.text import Text

from dlsched.documents import read_yaml_file
from dlsched.errors import UserError
from dlsched.paths import REPO_ROOT

DEFAULT_WORKLOAD = REPO_ROOT / "examples" / "demo" / "workload.yaml"


class Arrival(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    at: Annotated[float, Field(ge=0, le=3600)]
    spec: str
    # the name of an earlier job of the workload: this one is also held until that job has trained a step (or
    # ended), so a job that must be running when this one arrives is, however slowly this machine starts it
    after_first_step_of: Optional[str] = None


class Workload(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    cluster: str
    jobs: Annotated[list[Arrival], Field(min_length=1, max_length=1000)]


def load_workload(path: Path) -> Workload:
    doc = read_yaml_file(path)
    try:
        return Workload.model_validate(doc, strict=True)
    except ValidationError as e:
        raise UserError(f"{path}: {' '.join(str(e).split())[:200]}") from None


def run_demo(workload_path: Path, out: Path, timeout_s: float, runtime: list[str] | None, policy: str | None,
             workdir: Path, console: Console) -> int:
    from dlsched.commands.service import TERMINAL, Client, ServiceError, jobs_table
    from dlsched.display import human_duration
    from dlsched.service.run_report import write_report
    from dlsched.service.server import Service, free_port
    from dlsched.spec import load_cluster_spec_file, load_job_spec_file

    if not (math.isfinite(timeout_s) and timeout_s > 0):   # -1 started the service, cancelled every job, exit 1
        raise UserError(f"--timeout {timeout_s}: expected a positive number of seconds")
    state = out / "state"
    if state.exists() and not (state / "dlsched.db").exists():   # --out ~/project deleted ~/project/state
        raise UserError(f"--out {str(out)!r}: {str(state)!r} exists and is not a dlsched state folder (an earlier "
                        "demo's, which the demo replaces); choose another --out")
    wl = load_workload(workload_path)
    base = workload_path.parent
    cluster = load_cluster_spec_file(base / wl.cluster)
    if policy:
        from dlsched.policy import policy_names

        if policy not in policy_names():   # said of the option, as `serve --policy` does (was "cluster spec: policy: ...")
            raise UserError(f"--policy {policy}: unknown policy {policy!r}; known: {', '.join(policy_names())}")
        cluster = cluster.model_copy(update={"policy": policy})
    arrivals = sorted(((a.at, base / a.spec, a.after_first_step_of) for a in wl.jobs), key=lambda x: x[0])
    earlier: set[str] = set()
    for _, f, after in arrivals:
        if after is not None and after not in earlier:
            raise UserError(f"{workload_path}: after_first_step_of {after!r} ({f.name}): expected the name of a job "
                            f"that arrives earlier ({', '.join(sorted(earlier)) or 'none does'})")
        earlier.add(load_job_spec_file(f).name)   # refuse a bad workload before starting anything
    if state.exists():
        shutil.rmtree(state)
    svc = Service(cluster, state, port=free_port(), runtime=runtime, workdir=workdir).start()
    client = Client(svc.url, token=svc.token)
    console.print(f"[bold]dlsched demo[/]: service on {svc.url}, policy [cyan]{cluster.policy}[/], "
                  f"{sum(n.gpus for n in cluster.nodes)} GPU slots on {len(cluster.nodes)} nodes; "
                  f"{len(arrivals)} jobs arriving over {arrivals[-1][0]:.0f}s")
    t0 = time.time()
    pending = list(arrivals)
    recent: list[str] = []
    last_event = 0
    timed_out = False

    def view():
        jobs = client.get("/jobs")
        return jobs, Group(jobs_table(jobs, f"dlsched demo: {human_duration(time.time() - t0)}", console.width), Text("\n".join(recent[-10:])))

    def stepped(name: str) -> bool:
        return any(j["name"] == name and (j["samples"] > 0 or j["state"] in TERMINAL) for j in client.get("/jobs"))

    def step(live) -> bool:
        """One refresh: due submissions, new events, display; True once everything has ended."""
        nonlocal last_event, timed_out
        now = time.time() - t0
        while pending and pending[0][0] <= now and (pending[0][2] is None or stepped(pending[0][2])):
            at, f, _ = pending.pop(0)
            r = client.submit(f.read_bytes(), "json" if f.suffix == ".json" else "yaml")
            note(f"{now:6.1f}s  submitted job {r['id']} ({r['name']}) from {f.name}")
        for e in client.get("/events", params={"after": last_event}):
            last_event = e["id"]
            if e["kind"] in ("running", "rescaling", "queued", "finished", "failed", "cancelled", "reattached"):
                d = {k: v for k, v in e["detail"].items() if k in ("gpus", "gpus_from", "batch_size", "reason", "error")}
                # as `dlsched events` prints a detail (JSON; was Python's repr, and a trailing space with none)
                note(f"{e['time'] - t0:6.1f}s  job {e['job_id']} -> {e['kind']}" + (f" {json.dumps(d)}" if d else ""))
        jobs, renderable = view()
        if live is not None:
            live.update(renderable)
        elif int(now) // 30 != int(now - 0.5) // 30:      # a plain log gets the table every 30 s
            console.print(renderable.renderables[0])
        if not pending and jobs and all(j["state"] in TERMINAL for j in jobs):
            return True
        if now > timeout_s:
            timed_out = True
            for j in jobs:
                if j["state"] not in TERMINAL:
                    try:
                        client.request("POST", f"/jobs/{j['id']}/cancel")
                    except ServiceError as e:   # it ended since it was listed: nothing to cancel
                        if e.status != 409:
                            raise
            time.sleep(2 * cluster.interval_s + 1)
            return True
        return False

    def note(line: str) -> None:
        recent.append(line)
        if not console.is_terminal:      # logs and CI see each event as it happens
            console.print(line, highlight=False)

    try:
        if console.is_terminal:
            with Live(view()[1], console=console, refresh_per_second=2) as live:
                while not step(live):
                    time.sleep(0.5)
        else:
            while not step(None):
                time.sleep(0.5)
        console.print(view()[1].renderables[0])
    finally:
        svc.close()
        stop_all = getattr(svc.backend, "stop_all", None)
        if stop_all:
            stop_all()
    table = write_report(svc.store, out)
    elapsed = time.time() - t0
    ok = (table["state"] == "finished").all() and not timed_out
    console.print(f"\n{'[green]all jobs finished' if ok else '[red]not all jobs finished'}[/] in {elapsed:.0f}s; "
                  f"report in {out}/ (report.md, predicted_vs_actual.csv, allocation_gantt.png, loss_fits.png)")
    print_summary(table, console)
    return 0 if ok else 1


# the report's columns (report.md defines them), the least read dropped first on a narrow terminal: pandas' text was
# soft-wrapped at 80 columns, each row's last three cells on a line of their own under the wrong headers
SUMMARY = (("id", 0), ("name", 0), ("state", 0), ("jct_s", 0), ("resizes", 0), ("preemptions", 1),
           ("jct_error", 0), ("policy_jct_error", 2), ("remaining_error", 3), ("run_remaining_error", 3),
           ("final_loss_in_80", 3))


def print_summary(report, out: Console) -> None:
    """The report's table, one row a job, fitted to ``out``'s width (``display.table``; report.md has every column)."""
    from dlsched.display import Column, table

    cols = [(c, rank) for c, rank in SUMMARY if c in report]
    def cell(v) -> str:   # a job with no prediction at 25 % has no errors: "-", as the other tables say it
        if isinstance(v, float):
            return f"{v:.3f}" if math.isfinite(v) else "-"
        return escape(str(v))

    rows = [[cell(v) for v in r] for r in report[[c for c, _ in cols]].itertuples(index=False)]
    table([Column(c, "left" if c in ("name", "state") else "right", rank) for c, rank in cols], rows, out=out,
          show_all="report.md has every column")


def register(app: typer.Typer) -> None:
    @app.command()
    def demo(workload: Path = typer.Option(DEFAULT_WORKLOAD, help="arrivals + cluster declaration"),
             out: Path = typer.Option(Path("demo-report"), help="report folder"),
             timeout: float = typer.Option(540.0, help="cancel what is still running after this many seconds"),
             runtime: Optional[str] = typer.Option(None, help="job runtime command prefix (default: python -m dlsched.train.run)"),
             policy: Optional[str] = typer.Option(None, help="override the cluster's policy"),
             workdir: Path = typer.Option(REPO_ROOT, help="where job entries such as examples/mlp.py resolve")) -> None:
        """Run the service on this machine with a small cluster and a staggered mix of real PyTorch jobs."""
        rc = run_demo(workload, out, timeout, shlex.split(runtime) if runtime else None, policy, workdir, Console())
        raise typer.Exit(rc)
