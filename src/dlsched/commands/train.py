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
        strategy: str = typer.Option("allreduce", help="allreduce or ps (parameter server)"),
        servers: int = typer.Option(1, help="ps: parameter-server processes (fixed per run)"),
        sync: str = typer.Option("sync", help="ps: sync, ssp:<staleness> or async"),
    ) -> None:
        """Train a job with elastic all-reduce workers or a parameter server (--strategy ps); resize via control.json."""
        from dlsched.train.run import main

        argv = ["--job-dir", str(job_dir), "--entry", entry, "--workers", str(workers), "--batch-mode", batch_mode,
                "--ckpt-every", str(ckpt_every), "--standby", str(standby), "--strategy", strategy,
                "--servers", str(servers), "--sync", sync]
        if batch_size:
            argv += ["--batch-size", str(batch_size)]
        for p in param:
            argv += ["--param", p]
        raise typer.Exit(main(argv))  # run.main already printed a bad-input error as one line
