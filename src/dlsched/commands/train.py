"""``dlsched train``: run one elastic training job locally (the same coordinator the service backends start)."""
from __future__ import annotations

from pathlib import Path

import typer


# the engine's options: given without --autoscale they were ignored without a word
AUTOSCALE = {"--autoscale-every": 20, "--spawn-size": 1, "--max-workers": 8, "--threshold": 0.1,
                      "--price-per-worker-hour": 1.0, "--utility": ""}


# the options a --spec sets (its entry or command, params, gpus, batch_size, max_local_batch, strategy, servers, sync,
# sparse, autoscale)
SPEC_SETS = ("param", "workers", "batch_size", "max_local_batch", "strategy", "servers", "sync", "sparse",
             "autoscale", *(flag[2:].replace("-", "_") for flag in AUTOSCALE))


def register(app: typer.Typer) -> None:
    @app.command()
    def train(
        ctx: typer.Context,
        entry: list[str] = typer.Argument(None, help="path/to/job.py:make_job or module:make_job; or after '--' "
                                          "your own dlsched.torch script: -- python train.py --epochs 10"),
        job_dir: str = typer.Option(None, "--job-dir", help="job folder (control.json, progress.jsonl, ckpt/): a "
                                    "path or file:// URI; default for a script: dlsched-runs/<script>-<time>"),
        workers: int = typer.Option(1, help="worker processes"),
        batch_size: int = typer.Option(None, help="global batch (default: the job's); a re-run of a stopped job "
                                                  "resumes at it"),
        max_local_batch: int = typer.Option(None, "--max-local-batch", help="a script's: the most samples per "
                                            "forward/backward (ElasticDataLoader's default; past it, accumulated)"),
        param: list[str] = typer.Option([], help="job parameter key=value (repeatable)"),
        batch_mode: str = typer.Option("fixed-global", help="fixed-global or fixed-local"),
        ckpt_every: int = typer.Option(20, help="checkpoint interval in steps (0 = never); ps: global batches per "
                                       "committed round (>= 1)"),
        standby: int = typer.Option(0, help="prepared spare workers for instant scale-out"),
        strategy: str = typer.Option("allreduce", help="allreduce or ps (parameter server)"),
        servers: int = typer.Option(1, help="ps: parameter-server processes (fixed per run)"),
        sync: str = typer.Option("sync", help="ps: sync, ssp:<staleness> or async"),
        sparse: bool = typer.Option(False, help="ps: push/pull only the embedding rows each batch reads"),
        autoscale: bool = typer.Option(False, help="size the job itself by Or et al.'s rules (all-reduce, no scheduler)"),
        autoscale_every: int = typer.Option(AUTOSCALE["--autoscale-every"], help="autoscale: decide every K steps"),
        spawn_size: int = typer.Option(AUTOSCALE["--spawn-size"],
                                       help="autoscale: workers added or removed per decision (N)"),
        max_workers: int = typer.Option(AUTOSCALE["--max-workers"], help="autoscale: never more workers than this"),
        threshold: float = typer.Option(AUTOSCALE["--threshold"], help="autoscale: scaling-efficiency threshold S"),
        price_per_worker_hour: float = typer.Option(AUTOSCALE["--price-per-worker-hour"],
                                                    help="autoscale: cost of a worker-hour (utility units)"),
        utility: str = typer.Option(AUTOSCALE["--utility"], help="autoscale: VALUE:SECONDS, worth VALUE now and 0 "
                                    "at SECONDS (linear); empty = efficiency alone"),
        max_restarts: int = typer.Option(3, "--max-restarts", help="worker-loss recoveries (from the last "
                                         "checkpoint) before the job fails"),
        replace_stragglers: bool = typer.Option(True, "--replace-stragglers/--no-replace-stragglers",
                                                help="replace a worker the EWMA rule flags as slow (all-reduce; ps sync and "
                                                "SSP, at a round's end: docs/ps.md)"),
        threads: int = typer.Option(0, help="torch threads per worker (0 = CPU cores // workers)"),
        record_samples: bool = typer.Option(False, "--record-samples", help="all-reduce: write each step's sample "
                                            "ids to JOB_DIR/samples/ (an exactly-once audit)"),
        checkpoint_uri: str = typer.Option(None, "--checkpoint-uri", help="checkpoint location: a path or fsspec "
                                           "URI (file://, s3://... with its driver); default JOB_DIR/ckpt"),
        spec: Path = typer.Option(None, "--spec", help="a job spec (YAML/JSON): its entry, params, gpus, batch_size, "
                                  "max_local_batch, strategy/servers/sync and autoscale; --param, --workers and "
                                  "--batch-size override its own, the other options it sets are refused beside it"),
    ) -> None:
        """Train a job with elastic all-reduce workers or a parameter server (--strategy ps); resize via control.json."""
        import sys
        import time

        from dlsched.entry_check import check_entry, check_script, parse_params
        from dlsched.errors import UserError
        from dlsched.train.scaling import BatchMode
        from dlsched.train.script import script_name
        from dlsched.train.storage import job_folder

        script = "--" in sys.argv  # like torchrun: the rest of the line is the script's command
        reference_batch = None
        # typer hands the words before '--' and after it over as one list: an entry before a script was taken
        # as the command's program ("'x.py:make_job' not found on PATH")
        if script and entry and len(entry) > len(sys.argv) - sys.argv.index("--") - 1:
            raise UserError(f"{entry[0]!r} and a script after '--': give one (an entry file.py:make_job, or the "
                            "script: dlsched train -- python x.py)")
        if spec is not None:
            from dlsched.commands.service import spec_with_overrides

            # an option the spec sets, typed beside it, was dropped without a word (--workers 5 trained at the spec's
            # gpus): --param, --workers and --batch-size override it as `dlsched submit`'s do, the others are refused
            typed = {name for name in SPEC_SETS if getattr(ctx.get_parameter_source(name), "name", "DEFAULT")
                     not in ("DEFAULT", "DEFAULT_MAP")}   # typer vendors its own click: the source by name
            refused = sorted(typed - {"param", "workers", "batch_size"})
            if refused or entry:
                flag = "--" + refused[0].replace("_", "-") if refused else repr(" ".join(entry))
                raise UserError(f"{flag} and --spec {spec}: the spec sets it; give it in the spec, or drop --spec")
            js = spec_with_overrides(spec, None, None, param)
            script = js.command is not None
            entry = list(js.command) if script else [js.entry]
            param = [f"{k}={v}" for k, v in js.params.items()]
            batch_size = batch_size if "batch_size" in typed else js.batch_size
            reference_batch = js.batch_size   # the spec's lr is the LR at its batch_size, as under the service
            max_local_batch = js.max_local_batch if script else None  # a make_job job's limit is its TrainJob's
            strategy, servers, sync, sparse = js.strategy, js.num_servers or 1, js.sync, js.sparse
            checkpoint_uri = js.checkpoint_uri or checkpoint_uri
            if "workers" not in typed:
                workers = js.gpus - js.num_servers  # the spec's gpus are slots: a ps job's servers hold some
            if js.autoscale is not None:
                a = js.autoscale
                autoscale, autoscale_every, spawn_size, max_workers = True, a.every_steps, a.spawn_size, a.max_workers
                threshold, price_per_worker_hour = a.threshold, a.price_per_worker_hour
                utility = f"{a.utility_value}:{a.utility_seconds}" if a.utility_value is not None else ""
        # the runtime's argparse refused these with its own 17-line usage, naming python -m dlsched.train.run
        for flag, value, allowed in (("--strategy", strategy, ("allreduce", "ps")),
                                     ("--batch-mode", batch_mode, tuple(m.value for m in BatchMode))):
            if value not in allowed:
                raise UserError(f"{flag} {value!r}: expected {' or '.join(allowed)}")
        if standby < 0:   # was accepted: no spare, exit 0
            raise UserError(f"--standby {standby}: must be >= 0")
        if not entry or (not script and len(entry) != 1):
            raise UserError("give one entry (file.py:make_job), or a script after '--' (dlsched train -- python x.py)")
        if not script and ":" not in entry[0] and entry[0].endswith(".py"):   # was "--entry ...", an option train lacks
            raise UserError(f"{entry[0]}: a script runs after '--' (dlsched train -- python {entry[0]}); "
                            "an entry names its factory (file.py:make_job)")
        if not script and ":" in entry[0]:   # a make_job entry: a typo'd --param is one line with a suggestion
            check_entry(entry[0], parse_params(param), Path.cwd(), "dlsched train")
        if script and len(entry) >= 2 and Path(entry[0]).name in ("python", "python3") and entry[1].endswith(".py"):
            # as `submit` refuses it: a missing script made the job folder, started a worker and failed it
            check_script(entry, Path.cwd(), "dlsched train")
        if job_dir is not None:
            job_dir = job_folder(job_dir, "--job-dir")
        else:
            if not script:
                raise UserError("--job-dir: required with an entry")
            job_dir = Path("dlsched-runs") / f"{script_name(entry)}-{time.strftime('%Y%m%d-%H%M%S')}"
            print(f"job folder: {job_dir} (a stopped run resumes with --job-dir {job_dir})")
        argv = ["--job-dir", str(job_dir), "--workers", str(workers), "--batch-mode", batch_mode,
                "--ckpt-every", str(ckpt_every), "--standby", str(standby), "--strategy", strategy,
                "--servers", str(servers), "--sync", sync]
        if sparse:
            argv += ["--sparse"]
        # the runtime takes these from any job (a backend's runtime command carries them for every job); asked
        # of `dlsched train` for a ps job they would do nothing: one line
        for flag, value, given, why in (
                ("--record-samples", "", record_samples, "a ps job records each batch's samples in ps/records/"),
                ("--threads", threads, threads != 0, "a ps rank runs one torch thread")):
            if given and strategy == "ps":
                raise UserError(f"{flag} {value}".strip() + f": not for --strategy ps ({why})")
        if max_restarts != 3:
            argv += ["--max-restarts", str(max_restarts)]
        for flag, given in (("--no-replace-stragglers", not replace_stragglers), ("--record-samples", record_samples)):
            if given:
                argv += [flag]
        if threads:
            argv += ["--threads", str(threads)]
        if not script:
            argv += ["--entry", entry[0]]
        if batch_size is not None:   # `if batch_size:` dropped --batch-size 0: trained at the script's batch, exit 0
            argv += ["--batch-size", str(batch_size)]
        if reference_batch is not None:
            argv += ["--reference-batch-size", str(reference_batch)]
        if checkpoint_uri:
            argv += ["--checkpoint-uri", checkpoint_uri]
        if max_local_batch is not None:
            argv += ["--max-local-batch", str(max_local_batch)]
        for p in param:
            argv += ["--param", p]
        if script:
            argv += ["--", *entry]
        given = {"--autoscale-every": autoscale_every, "--spawn-size": spawn_size, "--max-workers": max_workers,
                 "--threshold": threshold, "--price-per-worker-hour": price_per_worker_hour, "--utility": utility}
        for flag, value in given.items():
            if not autoscale and value != AUTOSCALE[flag]:
                raise UserError(f"{flag} {value}: an autoscale option; add --autoscale (or drop it)")
        if autoscale:
            raise typer.Exit(_autoscaled(argv, job_dir, strategy, autoscale_every, spawn_size, workers, max_workers,
                                         threshold, price_per_worker_hour, utility))
        from dlsched.train.run import main  # torch: loaded once the options are checked (a refusal was 1.5 s)

        raise typer.Exit(main(argv))  # run.main already printed a bad-input error as one line


def _autoscaled(argv, job_dir, strategy, every, spawn, workers, max_workers, threshold, price, utility) -> int:
    import sys

    from dlsched.errors import UserError
    from dlsched.train.autoscale import LinearUtility, ScheduleConfig
    from dlsched.train.autoscale_engine import AutoscaleConfig, run_autoscaled

    if strategy != "allreduce":
        raise UserError(f"--strategy {strategy}: --autoscale sizes all-reduce jobs (Or et al.'s engine)")
    # each says what it must be ("out of range" did not: --max-workers 2 with --workers 4 read as a bad 2)
    for name, value, ok, must in (("--autoscale-every", every, every >= 1, ">= 1"),
                                  ("--spawn-size", spawn, spawn >= 1, ">= 1"),
                                  ("--max-workers", max_workers, max_workers >= workers, f">= --workers ({workers})"),
                                  ("--threshold", threshold, 0 <= threshold <= 1, "in [0, 1]"),
                                  ("--price-per-worker-hour", price, price >= 0, ">= 0")):
        if not ok:
            raise UserError(f"{name} {value}: must be {must}")
    curve = None
    if utility:
        try:
            value, seconds = (float(x) for x in utility.split(":"))
        except ValueError:
            raise UserError(f"--utility {utility!r}: expected VALUE:SECONDS, e.g. 10:3600") from None
        # as the spec's utility_value/utility_seconds: 5:0 was taken, and the first decision divided by the 0 s
        if not (value > 0 and seconds > 0):
            raise UserError(f"--utility {utility!r}: VALUE and SECONDS must be > 0 (worth VALUE now, 0 at SECONDS)")
        curve = LinearUtility(value, seconds)
    cfg = AutoscaleConfig(every, ScheduleConfig(spawn_size=spawn, min_workers=1, max_workers=max_workers,
                                                threshold=threshold, min_consecutive_passes=1,
                                                min_batches_for_staying=0),
                          utility=curve, price_per_worker_s=price / 3600)
    return run_autoscaled([sys.executable, "-m", "dlsched.train.run", *argv], job_dir, cfg)
