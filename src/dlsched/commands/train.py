"""``dlsched train``: run one elastic training job locally (the same coordinator the service backends start)."""
from __future__ import annotations

from pathlib import Path

import typer


def register(app: typer.Typer) -> None:
    @app.command()
    def train(
        entry: str = typer.Argument(..., help="path/to/job.py:make_job or module:make_job"),
        job_dir: Path = typer.Option(..., "--job-dir", help="job folder (control.json, progress.jsonl, ckpt/)"),
        workers: int = typer.Option(1, help="worker processes"),
        batch_size: int = typer.Option(None, help="global batch (default: the job's)"),
        param: list[str] = typer.Option([], help="job parameter key=value (repeatable)"),
        batch_mode: str = typer.Option("fixed-global", help="fixed-global or fixed-local"),
        ckpt_every: int = typer.Option(20, help="checkpoint interval in steps (0 = never)"),
        standby: int = typer.Option(0, help="prepared spare workers for instant scale-out"),
        ps: int = typer.Option(0, help="run in parameter-server mode with this many server processes"),
        asynchronous: bool = typer.Option(False, "--async", help="parameter-server mode: asynchronous updates"),
    ) -> None:
        """Train a job with elastic all-reduce workers (or a parameter server with --ps); resize via control.json."""
        if ps:
            from dlsched.train.job import build_job, parse_params
            from dlsched.train.ps import run_parameter_server

            params = parse_params(param)
            job = build_job(entry, params)
            logs = run_parameter_server(entry, params, workers, ps, not asynchronous, batch_size or job.batch_size,
                                        job_dir)
            steps = sum(len(w) for w in logs)
            print(f"parameter server ({'async' if asynchronous else 'sync'}, {ps} servers, {workers} workers): "
                  f"{steps} worker steps, final loss {logs[0][-1]['loss']:.4f}")
            return
        from dlsched.train.run import main

        argv = ["--job-dir", str(job_dir), "--entry", entry, "--workers", str(workers), "--batch-mode", batch_mode,
                "--ckpt-every", str(ckpt_every), "--standby", str(standby)]
        if batch_size:
            argv += ["--batch-size", str(batch_size)]
        for p in param:
            argv += ["--param", p]
        raise typer.Exit(main(argv))  # run.main already printed a bad-input error as one line
