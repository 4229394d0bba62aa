"""Service commands, shaped after Slurm/kubectl habits: ``serve``, ``submit FILE``, ``status`` (squeue-like,
``--watch``), ``show ID``, ``cancel ID`` (scancel), ``logs ID [-f]``, ``events``. Clients talk to the REST API
at ``--server`` / ``$DLSCHED_SERVER`` with ``$DLSCHED_TOKEN`` as bearer token when set."""
from __future__ import annotations

import json
import logging
import os
import shlex
import sys
import time
from pathlib import Path
from typing import Optional

import httpx
import typer
from rich.console import Console, Group
from rich.live import Live
from rich.progress_bar import ProgressBar
from rich.table import Table

from dlsched.errors import UserError
from dlsched.service.fleet_status import summary

DEFAULT_SERVER = "http://127.0.0.1:8642"
TERMINAL = ("finished", "failed", "cancelled")
STATE_STYLE = {"queued": "yellow", "running": "green", "rescaling": "cyan", "finished": "blue", "failed": "red",
               "cancelled": "magenta"}


class Client:
    """Thin HTTP client; every failure becomes one ``UserError`` line."""

    def __init__(self, server: str | None = None, token: str | None = None, timeout: float = 10.0):
        self.base = (server or os.environ.get("DLSCHED_SERVER") or DEFAULT_SERVER).rstrip("/")
        token = token or os.environ.get("DLSCHED_TOKEN")
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.http = httpx.Client(base_url=self.base, headers=headers, timeout=timeout)

    def request(self, method: str, path: str, **kw) -> httpx.Response:
        try:
            r = self.http.request(method, path, **kw)
        except httpx.HTTPError as e:
            raise UserError(f"cannot reach the dlsched service at {self.base}: {e} (is `dlsched serve` running?)") from None
        if r.status_code >= 400:
            try:
                msg = r.json().get("error", r.text)
            except ValueError:
                msg = r.text
            raise UserError(f"{method} {path}: HTTP {r.status_code}: {msg}")
        return r

    def get(self, path: str, **kw):
        return self.request("GET", path, **kw).json()

    def submit(self, body: bytes, fmt: str) -> dict:
        ctype = "application/json" if fmt == "json" else "application/yaml"
        return self.request("POST", "/jobs", content=body, headers={"content-type": ctype}).json()


def _fmt_eta(ts: float | None) -> str:
    if not ts:
        return "-"
    left = ts - time.time()
    return time.strftime("%H:%M:%S", time.localtime(ts)) + (f" ({left:+.0f}s)" if abs(left) < 86400 else "")


def jobs_table(jobs: list[dict], title: str = "dlsched jobs") -> Table:
    t = Table(title=title, expand=False)
    for col in ("ID", "NAME", "STATE", "GPUS", "BATCH", "PROGRESS", "LOSS", "SAMPLES/S", "PREDICTED FINISH"):
        t.add_column(col, justify="right" if col in ("ID", "GPUS", "BATCH", "LOSS", "SAMPLES/S") else "left")
    for j in jobs:
        frac = j.get("fraction_done")
        bar = Group(ProgressBar(total=1.0, completed=frac or 0.0, width=20)) if frac is not None else "-"
        pct = f" {100 * frac:5.1f}%" if frac is not None else ""
        style = STATE_STYLE.get(j["state"], "")
        name = j["name"] + (f"\n[dim]{summary(j['ensemble'])}[/]" if j.get("ensemble") else "")
        t.add_row(str(j["id"]), name, f"[{style}]{j['state']}[/]", str(j["num_gpus"]), str(j.get("batch_size") or "-"),
                  Group(bar, pct) if frac is not None else "-",
                  f"{j['last_loss']:.4g}" if j.get("last_loss") is not None else "-",
                  f"{j['samples_per_s']:.0f}" if j.get("samples_per_s") else "-",
                  _fmt_eta(j.get("predicted_finish")) if j["state"] not in TERMINAL else
                  (time.strftime("done %H:%M:%S", time.localtime(j["end_time"])) if j.get("end_time") else "-"))
    return t


def register(app: typer.Typer) -> None:
    @app.command()
    def serve(cluster: Path = typer.Option(..., "--cluster", "-c", help="cluster declaration (YAML/JSON)"),
              state_dir: Path = typer.Option(Path("dlsched-state"), help="SQLite store and job directories"),
              host: str = typer.Option("127.0.0.1", help="bind address; non-loopback needs a token"),
              port: int = typer.Option(8642),
              token_file: Optional[Path] = typer.Option(None, help="file holding the bearer token (else $DLSCHED_TOKEN)"),
              runtime: Optional[str] = typer.Option(None, help="job runtime command prefix (default: python -m dlsched.train.run)"),
              workdir: Optional[Path] = typer.Option(None, help="where job entries like examples/mlp.py resolve (default: cwd)"),
              policy: Optional[str] = typer.Option(None, help="override the cluster file's policy"),
              backend: Optional[str] = typer.Option(None, help="local | ray (default: the cluster file's 'backend')"),
              address: str = typer.Option("auto", help="Ray cluster address for --backend ray: auto, HOST:6379 or ray://HOST:10001"),
              gpu_resource: str = typer.Option("GPU", help="Ray resource one worker needs (--backend ray)")) -> None:
        """Run the scheduler service (API + live loop) in the foreground."""
        from dlsched.service.server import Service, read_token
        from dlsched.spec import load_cluster_spec_file

        logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
        spec = load_cluster_spec_file(cluster)
        if policy:
            spec = spec.model_copy(update={"policy": policy})
        if backend:
            if backend not in ("local", "ray"):
                raise UserError(f"--backend {backend!r}: expected 'local' or 'ray'")
            spec = spec.model_copy(update={"backend": backend})
        rt = shlex.split(runtime or os.environ.get("DLSCHED_RUNTIME", "")) or None
        be = None
        if spec.backend == "ray":
            from dlsched.backends.ray import RayBackend

            be = RayBackend(address=address, gpu_resource=gpu_resource, runtime=rt, cwd=workdir)
        svc = Service(spec, state_dir, host=host, port=port, token=read_token(str(token_file) if token_file else None),
                      runtime=rt, workdir=workdir, backend=be)
        print(f"dlsched service on {svc.url} (policy {spec.policy}, {sum(n.gpus for n in spec.nodes)} GPU slots, "
              f"state in {state_dir})", flush=True)
        svc.run()

    @app.command()
    def submit(files: list[Path] = typer.Argument(..., help="job spec files (YAML or JSON)"),
               server: Optional[str] = typer.Option(None, help=f"service URL (default $DLSCHED_SERVER or {DEFAULT_SERVER})")) -> None:
        """Submit jobs (like sbatch / kubectl apply). Specs are validated locally first, then by the service."""
        from dlsched.spec import load_job_spec_file

        client = Client(server)
        for f in files:
            load_job_spec_file(f)   # one clear line for a bad file before any network traffic
            r = client.submit(f.read_bytes(), "json" if f.suffix == ".json" else "yaml")
            print(f"submitted job {r['id']} ({r['name']})")

    @app.command()
    def status(server: Optional[str] = typer.Option(None), watch: bool = typer.Option(False, "--watch", "-w"),
               interval: float = typer.Option(1.0), all_jobs: bool = typer.Option(True, "--all/--active"),
               as_json: bool = typer.Option(False, "--json")) -> None:
        """Jobs with state, GPUs, progress bars and predicted finish (like squeue / kubectl get -w)."""
        client = Client(server)
        query = {} if all_jobs else {"state": "queued,running,rescaling"}
        if as_json:
            print(json.dumps(client.get("/jobs", params=query), indent=2, default=str))
            return
        console = Console()
        if not watch:
            console.print(jobs_table(client.get("/jobs", params=query)))
            return
        with Live(jobs_table(client.get("/jobs", params=query)), console=console, refresh_per_second=4) as live:
            try:
                while True:
                    time.sleep(interval)
                    live.update(jobs_table(client.get("/jobs", params=query)))
            except KeyboardInterrupt:
                pass

    @app.command()
    def show(job_id: int, server: Optional[str] = typer.Option(None)) -> None:
        """Everything the service knows about one job (JSON)."""
        print(json.dumps(Client(server).get(f"/jobs/{job_id}"), indent=2, default=str))

    @app.command()
    def cancel(job_ids: list[int] = typer.Argument(...), server: Optional[str] = typer.Option(None)) -> None:
        """Cancel jobs (like scancel / kubectl delete)."""
        client = Client(server)
        for j in job_ids:
            r = client.request("POST", f"/jobs/{j}/cancel").json()
            print(f"job {j}: {'cancelled' if r['state'] == 'cancelled' else 'cancel requested (' + r['state'] + ')'}")

    @app.command()
    def logs(job_id: int, follow: bool = typer.Option(False, "--follow", "-f"), server: Optional[str] = typer.Option(None)) -> None:
        """Print a job's output; ``-f`` keeps following until the job ends (like kubectl logs -f)."""
        client = Client(server)
        offset = 0
        while True:
            r = client.request("GET", f"/jobs/{job_id}/logs", params={"offset": offset})
            sys.stdout.write(r.text)
            sys.stdout.flush()
            offset = int(r.headers.get("X-Next-Offset", offset))
            if not follow:
                return
            if not r.text:
                if client.get(f"/jobs/{job_id}")["state"] in TERMINAL:
                    tail = client.request("GET", f"/jobs/{job_id}/logs", params={"offset": offset}).text
                    sys.stdout.write(tail)
                    return
                time.sleep(0.5)

    @app.command()
    def events(job_id: Optional[int] = typer.Argument(None), server: Optional[str] = typer.Option(None)) -> None:
        """Scheduler events (submissions, starts, resizes, preemptions, completions)."""
        client = Client(server)
        rows = client.get(f"/jobs/{job_id}/events" if job_id is not None else "/events")
        for e in rows:
            when = time.strftime("%H:%M:%S", time.localtime(e["time"]))
            print(f"{when}  job {e['job_id'] if e['job_id'] is not None else '-':>4}  {e['kind']:<18} {json.dumps(e['detail'])}")
