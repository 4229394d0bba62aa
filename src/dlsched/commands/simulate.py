"""``dlsched simulate``: run one or more policies over a workload trace and compare them."""
from __future__ import annotations

import math
from pathlib import Path
from typing import List, Optional

import typer

from dlsched.errors import UserError


def parse_nodes(spec: str) -> "ClusterView":
    """``"8x4:v100,8x4:k80"`` -> 8 nodes of 4 v100 GPUs and 8 nodes of 4 k80 GPUs."""
    from dlsched.policy.base import ClusterView, NodeView

    nodes = []
    for part in spec.split(","):
        try:
            count_gpus, _, gpu_type = part.strip().partition(":")
            count, gpus = (int(x) for x in count_gpus.split("x"))
            if count < 1 or gpus < 1 or any(c in gpu_type for c in ":/= "):   # --gpu-speed parses TYPE/APP=F
                raise ValueError
        except ValueError:
            raise UserError(f"--node-spec: bad entry {part!r}; expected NODESxGPUS[:TYPE] (TYPE without ':', '/', '=' or "
                            f"spaces), e.g. 8x4:v100") from None
        # TYPE-INDEX: TYPE+INDEX named two nodes alike (1x4:a1,11x4:a: both "a10"), and their GPUs were counted as one
        nodes += [NodeView(f"{gpu_type or 'node'}-{len(nodes) + i}", gpus, gpu_type or "generic") for i in range(count)]
    return ClusterView(tuple(nodes))


def parse_speeds(spec: str | None) -> dict[str, float]:
    out = {}
    for part in filter(None, (spec or "").split(",")):
        name, _, value = part.partition("=")
        if name.strip() in out:   # the last one won, silently
            raise UserError(f"--gpu-speed: {name.strip()!r} is given twice ({spec!r})")
        try:
            out[name.strip()] = float(value)
            if not (math.isfinite(out[name.strip()]) and out[name.strip()] > 0):
                raise ValueError
        except ValueError:
            raise UserError(f"--gpu-speed: bad entry {part!r}; expected TYPE=FACTOR with a finite FACTOR > 0") from None
    return out


class ProgressLines:
    """Progress as plain lines, for a stream that is no terminal: one every ``every_s`` seconds of wall clock and
    one when the policy's run ends, with the simulated time reached and the wall time taken."""

    def __init__(self, policy: str, stream, every_s: float = 30.0):
        import time

        self.policy, self.stream, self.every_s = policy, stream, every_s
        self.clock = time.monotonic
        self.started = self.last = self.clock()

    def _line(self, t: float, done: int, total: int) -> None:
        print(f"{self.policy}: {done}/{total} jobs finished, simulated {t / 3600:,.1f} h, "
              f"{self.clock() - self.started:,.0f} s", file=self.stream, flush=True)

    def __call__(self, t: float, done: int, total: int) -> None:
        if self.clock() - self.last >= self.every_s:
            self.last = self.clock()
            self._line(t, done, total)

    def done(self, t: float, done: int, total: int) -> None:
        self._line(t, done, total)


def register(app: typer.Typer) -> None:
    @app.command()
    def simulate(
        ctx: typer.Context,
        workload: Path = typer.Option(..., "--workload", "-w", help="Pollux/Sia CSV (name,time,application,"
                                      "num_replicas,batch_size), Philly-style CSV (timestamp,duration,num_gpus[,job_id]) or Gavel TSV trace; 1-4 (or "
                                      "workload-N) names the Pollux artifact's workload N"),
        policy: List[str] = typer.Option(["tiresias"], "--policy", "-p", help="registered policy name; repeatable"),
        nodes: int = typer.Option(16, help="nodes in a homogeneous cluster"),
        gpus_per_node: int = typer.Option(4, help="GPUs per node"),
        cluster_gpus: Optional[int] = typer.Option(None, help="total GPUs (nodes = this / gpus-per-node)"),
        node_spec: Optional[str] = typer.Option(None, help="heterogeneous nodes, e.g. 8x4:v100,8x4:k80"),
        gpu_speed: Optional[str] = typer.Option(None, help="speed factor per GPU type or TYPE/APP, e.g. v100=2,k80=0.5,v100/ncf=1.2"),
        interval: float = typer.Option(60.0, help="scheduling interval (s)"),
        restart_penalty: float = typer.Option(30.0, help="seconds a job makes no progress after (re)starting"),
        placement: str = typer.Option("most-free", help="nodes for jobs a policy does not place: most-free | "
                                      "consolidated | best-fit"),
        remaining: str = typer.Option("predicted", help="remaining work policies see: predicted (the job's own "
                                      "observations through the online predictor) | oracle | none | noise:SIGMA "
                                      "(oracle x log-normal error)"),
        seed: int = typer.Option(0, help="seed of the noise:SIGMA error"),
        horizon: Optional[float] = typer.Option(None, help="stop at this simulated time (s)"),
        limit: Optional[int] = typer.Option(None, help="read only the first N rows of a Philly trace, in file order "
                                            "(philly.csv is not in submission order: --horizon cuts by time)"),
        skip_bad: bool = typer.Option(False, "--skip-bad", help="skip bad trace rows (counted and reported)"),
        report: Optional[Path] = typer.Option(None, help="write CSVs (summary, per job, per decision), plots and "
                                              "report.md (which defines each column) to this folder"),
        as_json: bool = typer.Option(False, "--json", help="the comparison as JSON on stdout, a row a policy with the "
                                     "run's workload, cluster and options: times in s, gpu_utilisation a fraction "
                                     "(progress on stderr)"),
        as_csv: bool = typer.Option(False, "--csv", help="the comparison as CSV on stdout, units as --json "
                                    "(progress on stderr)"),
        wide: bool = typer.Option(False, "--wide", "-o", help="all columns, whatever the terminal width"),
    ) -> None:
        """Simulate scheduling policies on a workload trace and print a comparison table."""
        from rich.console import Console
        from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

        from dlsched.policy.base import ClusterView, make_policy, policy_names
        from dlsched.sim.engine import PLACEMENTS, bad_knob, run
        from dlsched.sim.comparison import print_summary, stale_report_files, summary_frame, write_report
        from dlsched.sim.remaining import mode_label, parse_remaining
        from dlsched.sim.workload import bundled_workload, read_workload

        if as_json and as_csv:
            raise UserError("--json and --csv: choose one")
        try:
            mode = parse_remaining(remaining)
        except UserError as e:
            raise UserError(f"--{e}") from None
        # options given on the command line (typer vendors its own click: compare the source by name)
        given = [name for name in ("nodes", "gpus_per_node", "cluster_gpus", "seed", "placement")
                 if getattr(ctx.get_parameter_source(name), "name", "DEFAULT") != "DEFAULT"]
        clash = [n for n in given if n in ("nodes", "gpus_per_node", "cluster_gpus")] if node_spec else []
        if clash:   # each was silently ignored: the node spec alone sets the cluster
            flag = "--" + clash[0].replace("_", "-")
            raise UserError(f"{flag}: {locals()[clash[0]]} and --node-spec {node_spec!r}: choose one (the node spec "
                            f"sets every node's GPUs)")
        if "cluster_gpus" in given and "nodes" in given:
            raise UserError(f"--cluster-gpus: {cluster_gpus} and --nodes {nodes}: choose one (nodes = cluster GPUs / "
                            f"--gpus-per-node)")
        if "seed" in given and not remaining.strip().startswith("noise:"):
            raise UserError(f"--seed: {seed} applies to --remaining noise:SIGMA only (got --remaining {remaining})")
        bad = bad_knob(interval=interval, restart_penalty=restart_penalty, horizon=horizon, seed=seed)
        if bad:   # SimConfig's own rules, named as this command's options
            name, value, expected = bad
            raise UserError(f"--{name.replace('_', '-')}: {value} is not {expected}")
        if placement not in PLACEMENTS:   # before the workload is read and a warning about it printed
            raise UserError(f"--placement: {placement!r} is not one of {' | '.join(PLACEMENTS)}")
        if limit is not None and limit < 1:
            raise UserError(f"--limit: {limit} is not a row count >= 1")
        if report is not None:   # before the simulation, which can take minutes: its results must not be lost
            if report.exists() and not report.is_dir():
                raise UserError(f"--report: {str(report)!r} is a file, not a folder")
            try:
                report.mkdir(parents=True, exist_ok=True)
            except OSError as e:
                raise UserError(f"--report: cannot create folder {str(report)!r}: {e.strerror}") from None
        machine = as_json or as_csv
        console = Console(stderr=machine)
        known = policy_names()
        for p in policy:
            if policy.count(p) > 1:   # the report's jobs-<policy>.csv of one run overwrote the other's
                raise UserError(f"--policy: {p!r} is given twice")
            if p not in known:
                raise UserError(f"--policy: unknown policy {p!r}; known: {', '.join(known)}")
        if cluster_gpus is not None:
            if cluster_gpus < 1 or cluster_gpus % gpus_per_node:
                raise UserError(f"--cluster-gpus: {cluster_gpus} is not a positive multiple of --gpus-per-node {gpus_per_node}")
            nodes = cluster_gpus // gpus_per_node
        if nodes < 1 or gpus_per_node < 1:
            raise UserError(f"--nodes/--gpus-per-node must be >= 1, got {nodes}/{gpus_per_node}")
        cluster = parse_nodes(node_spec) if node_spec else ClusterView.homogeneous(nodes, gpus_per_node)
        wl = read_workload(workload, skip_bad=skip_bad, limit=limit)
        too_big = [j for j in wl.jobs if j.requested_gpus > cluster.total_gpus]
        if too_big and not skip_bad:   # named with its file before any output (the engine's check named no file)
            raise UserError(f"{workload}: job {too_big[0].id}: requests {too_big[0].requested_gpus} GPUs, the cluster "
                            f"has {cluster.total_gpus} (--skip-bad skips such jobs)")
        if skip_bad:   # a job no placement can hold is a bad row of this cluster (Philly has 128-GPU jobs)
            wl.skipped += [f"job {j.id}: requests {j.requested_gpus} GPUs, the cluster has {cluster.total_gpus}"
                           for j in too_big]
            wl.jobs = [j for j in wl.jobs if j.requested_gpus <= cluster.total_gpus]
        if wl.skipped:
            console.print(f"[yellow]skipped {len(wl.skipped)} bad row(s); first: {wl.skipped[0]}"
                          f"{' (all in the report folder: skipped.txt)' if report and len(wl.skipped) > 1 else ''}[/]")
        speeds = parse_speeds(gpu_speed)
        strange = [k for k in speeds if k.partition("/")[0] not in cluster.gpu_types]
        if strange:   # the engine's own check named "gpu_speed: entry a100=2.0", after the run had begun
            raise UserError(f"--gpu-speed: {strange[0].partition('/')[0]!r} is not a GPU type of the cluster "
                            f"({', '.join(cluster.gpu_types)}); --node-spec names them, e.g. 8x4:"
                            f"{strange[0].partition('/')[0]}")
        unsped = [t for t in cluster.gpu_types if t not in speeds and not any(k.startswith(f"{t}/") for k in speeds)]
        if len(cluster.gpu_types) > 1 and unsped:   # a heterogeneous cluster whose types all ran alike, silently
            wl.assumed.append(f"--gpu-speed gives no factor for GPU type(s) {', '.join(unsped)}: they run at 1.0 "
                              f"(the traced GPU's speed)")
        told, note = mode_label(mode, wl.jobs)
        if note:
            wl.assumed.append(note)
        for note in wl.assumed:
            console.print(f"[yellow]assumed: {note}[/]")
        if not wl.jobs:
            raise UserError(f"{workload}: no jobs to simulate")
        console.print(f"{len(wl.jobs)} jobs from {wl.source or workload} on {_nodes(cluster)}")
        policies = [make_policy(p) for p in policy]
        for pol in policies:
            caveat = getattr(pol, "ordinary_jobs", None)   # a plugin policy need not subclass Policy
            if caveat and any(j.ensemble is None for j in wl.jobs):   # its row reads like the others'
                console.print(f"[yellow]{pol.name} {caveat}[/]")
        if "placement" in given:
            own = [p.name for p in policies if p.places_own or p.placement is not None]
            if own:   # they place their own jobs: the option changes nothing for them, say so
                console.print(f"[yellow]--placement {placement} has no effect on {', '.join(own)}: "
                              f"{'it places its' if len(own) == 1 else 'they place their'} own jobs[/]")
        results = []
        with Progress(TextColumn("{task.description}"), BarColumn(), TextColumn("{task.completed}/{task.total} jobs"),
                      TimeElapsedColumn(), console=console, transient=True) as bar:
            for pol in policies:
                task = bar.add_task(pol.name, total=len(wl.jobs))
                # piped (a script, a CI log), the bar never draws: a long trace ran minutes without a word
                lines = None if console.is_terminal else ProgressLines(pol.name, console.file)
                results.append(run(wl, pol, cluster, interval=interval, restart_penalty=restart_penalty,
                                   remaining=mode, seed=seed,
                                   gpu_speed=speeds, horizon=horizon, placement=placement,
                                   on_progress=lines or (lambda t, done, total, task=task:
                                                         bar.update(task, completed=done))))
                if lines:
                    lines.done(results[-1].end_time, int(results[-1].jobs.finish.notna().sum()), len(wl.jobs))
        # the information each policy had: FIFO's row read "oracle" as if it had been informed (a plugin policy need
        # not subclass Policy); the title names them too, as the column is the first a narrow terminal drops
        blind = [p.name for p in policies if not getattr(p, "reads_remaining", True)]
        frame = summary_frame(results, horizon).assign(remaining=[
            "none (not read)" if p.name in blind else told for p in policies])
        # the file read: `-w 2` titled its table "2, 16 nodes ..."
        title = (f"{bundled_workload(workload).name}, {_nodes(cluster)} "
                 f"(remaining work: {told}{'; not read by ' + ', '.join(blind) if blind else ''})")
        # each row carries the run it came from (--json, --csv, the report's summary.csv): a saved comparison said
        # what, not on which trace or cluster
        frame = frame.assign(workload=str(wl.source or workload), trace_jobs=len(wl.jobs), cluster=_nodes(cluster),
                             cluster_gpus=cluster.total_gpus, interval=interval, restart_penalty=restart_penalty,
                             placement=placement, horizon=horizon)
        if as_json:
            print(frame.drop(columns=["jobs"], errors="ignore").to_json(orient="records", indent=2))
        elif as_csv:
            print(frame.drop(columns=["jobs"], errors="ignore").to_csv(index=False), end="")
        else:
            print_summary(frame, title=title, wide=wide)
        if report:
            try:
                # an earlier report's files this run will not write: removed, not left to pass for this run's
                ours = [report / f"{kind}-{r.policy}.csv" for r in results for kind in ("jobs", "timeline")]
                stale = stale_report_files(report, ours + ([report / "skipped.txt"] if wl.skipped else []), known)
                for p in stale:
                    p.unlink()
                if stale:
                    console.print(f"[yellow]removed {len(stale)} file(s) of an earlier report in {report}: "
                                  f"{', '.join(p.name for p in stale)}[/]")
                files = write_report(results, report, horizon, summary=frame, title=title)
                if wl.skipped:   # the console names only the first
                    (report / "skipped.txt").write_text("".join(f"{line}\n" for line in wl.skipped))
                    files.append(report / "skipped.txt")
            except OSError as e:
                raise UserError(f"--report: cannot write {e.filename or report}: {e.strerror}") from None
            console.print(f"report: {', '.join(str(f) for f in files)}")


def _nodes(cluster) -> str:
    """'1 node / 4 GPUs', '16 nodes / 64 GPUs' (a one-node run said '1 nodes')."""
    n = len(cluster.nodes)
    return f"{n} node{'s' if n != 1 else ''} / {cluster.total_gpus} GPU{'s' if cluster.total_gpus != 1 else ''}"
