"""``python -m dlsched.train.run``: start (or resume) one elastic training job; see docs/runtime.md for the contract."""
from __future__ import annotations

if __name__ == "__main__":  # first of all: main's imports take seconds (torch), and a SIGTERM meanwhile must
    from dlsched.train import preemption  # end as "stopped" (exit 143), not kill the job unrecorded

    preemption.install()

import argparse
import os
import sys
import traceback
from pathlib import Path
from typing import TYPE_CHECKING

from dlsched.entry_check import parse_params
from dlsched.errors import JobFailed, UserError
from dlsched.train import fence, storage
from dlsched.train.files import job_program, read_status, write_status
from dlsched.train.fleet_spec import FleetOptions
from dlsched.train.no_space import EXIT_NO_SPACE, is_no_space, say_no_space
from dlsched.train.scaling import BatchMode

if TYPE_CHECKING:
    from dlsched.train.coordinator import Options
    from dlsched.train.ps_runner import PSOptions
# The coordinator and the ps runner (torch, ~1.5 CPU-s) are imported once the options are checked: a refused
# option of `dlsched train` was answered after loading torch.


def parse_args(argv: list[str] | None = None) -> Options | PSOptions | FleetOptions:
    """``... --entry FILE:make_job`` or ``... -- python train.py ARGS`` (the user's own dlsched.torch script)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    command = argv[argv.index("--") + 1 :] if "--" in argv else None
    argv = argv[: argv.index("--")] if "--" in argv else argv
    ap = argparse.ArgumentParser(prog="python -m dlsched.train.run", description=__doc__)
    ap.add_argument("--job-dir", required=True, help="job folder: a path or file:// URI (docs/storage.md)")
    ap.add_argument("--entry", help="path/to/file.py:make_job or module:make_job (or: -- python train.py ...)")
    ap.add_argument("--workers", required=True, type=int)
    ap.add_argument("--batch-size", type=int, default=None, help="global batch (default: the job's)")
    ap.add_argument("--reference-batch-size", type=int, default=None,
                    help="global batch the job's lr is given at (default: the job's batch_size); the spec's batch_size")
    ap.add_argument("--max-local-batch", type=int, default=None,
                    help="a script's: the most samples per forward/backward, ElasticDataLoader's default (past it a "
                         "worker's share is accumulated); the spec's max_local_batch")
    ap.add_argument("--param", action="append", default=[], metavar="KEY=VALUE")
    ap.add_argument("--batch-mode", choices=[m.value for m in BatchMode], default=BatchMode.FIXED_GLOBAL.value)
    ap.add_argument("--ckpt-every", type=int, default=20, help="checkpoint interval in steps (0 = never)")
    ap.add_argument("--checkpoint-uri", default=None,
                    help="checkpoint location: a path or fsspec URI (file://, s3://...); default JOB_DIR/ckpt")
    ap.add_argument("--threads", type=int, default=0, help="torch threads per worker (0 = cpus // workers)")
    ap.add_argument("--record-samples", action="store_true", help="log sample ids per step (exactly-once audit)")
    ap.add_argument("--no-replace-stragglers", action="store_true", help="keep workers the EWMA rule flags")
    ap.add_argument("--max-restarts", type=int, default=3, help="worker-loss recoveries before the job fails")
    ap.add_argument("--standby", type=int, default=0, help="prepared spare workers for instant scale-out")
    ap.add_argument("--strategy", choices=["allreduce", "ps", "fleet"], default="allreduce",
                    help="fleet: the entry makes an EnsembleSpec, trained with FLEET inside the share of --workers slots")
    ap.add_argument("--servers", type=int, default=1, help="ps: parameter-server processes")
    ap.add_argument("--sync", default="sync", help="ps: sync, ssp:<staleness> or async")
    ap.add_argument("--sparse", action="store_true", help="ps: push/pull only the embedding rows each batch reads")
    a = ap.parse_args(argv)
    a.job_dir = storage.job_folder(a.job_dir, "--job-dir")
    if (a.entry is None) == (command is None):
        raise UserError("give either --entry FILE:make_job or a script after '--' (e.g. -- python train.py)")
    if command == []:
        raise UserError("'--' must be followed by the script's command, e.g. -- python train.py")
    if command is not None and a.strategy == "ps":
        raise UserError("--strategy ps: a script after '--' is not supported; give the make_job form (FILE.py:make_job)")
    if a.checkpoint_uri is not None and (a.strategy != "allreduce" or not a.checkpoint_uri):
        raise UserError(f"--checkpoint-uri {a.checkpoint_uri!r}: a non-empty path or URI, for an all-reduce job only")
    if a.max_restarts < 0 or a.threads < 0:
        flag, value = ("--max-restarts", a.max_restarts) if a.max_restarts < 0 else ("--threads", a.threads)
        raise UserError(f"{flag} {value}: must be >= 0")
    if a.ckpt_every < 0:   # -1 checkpointed on every step (step % -1 == 0)
        raise UserError(f"--ckpt-every {a.ckpt_every}: must be >= 0 (0 = never)")
    for flag, value in (("--batch-size", a.batch_size), ("--reference-batch-size", a.reference_batch_size),
                        ("--max-local-batch", a.max_local_batch)):
        if value is not None and value < 1:
            raise UserError(f"{flag} {value}: must be >= 1")
    if a.max_local_batch is not None and command is None:
        raise UserError(f"--max-local-batch {a.max_local_batch}: for a script after '--' (a make_job job sets "
                        "TrainJob.max_local_batch)")
    _refuse_other_strategies_options(a)
    if a.strategy == "ps":
        from dlsched.train.ps import SyncMode
        from dlsched.train.ps_runner import PSOptions

        return PSOptions(job_dir=a.job_dir, entry=a.entry, params=parse_params(a.param), workers=a.workers,
                         servers=a.servers, mode=SyncMode.parse(a.sync), batch_size=a.batch_size,
                         ckpt_every=a.ckpt_every, max_restarts=a.max_restarts, sparse=a.sparse,
                         reference_batch=a.reference_batch_size, replace_stragglers=not a.no_replace_stragglers)
    if a.workers < 1:
        raise UserError(f"--workers {a.workers}: must be >= 1")
    if a.strategy == "fleet":
        return FleetOptions(job_dir=a.job_dir, entry=a.entry, params=parse_params(a.param), workers=a.workers,
                            max_restarts=a.max_restarts)
    from dlsched.train.coordinator import Options

    return Options(job_dir=a.job_dir, entry=a.entry, command=command, workers=a.workers, batch_size=a.batch_size, reference_batch=a.reference_batch_size,
                   params=parse_params(a.param), batch_mode=BatchMode(a.batch_mode), ckpt_every=a.ckpt_every,
                   threads=a.threads, record_samples=a.record_samples, checkpoint_uri=a.checkpoint_uri,
                   standby=a.standby, max_restarts=a.max_restarts, replace_stragglers=not a.no_replace_stragglers,
                   max_local_batch=a.max_local_batch)


def _refuse_other_strategies_options(a: argparse.Namespace) -> None:
    """An option the chosen strategy has no use for was ignored without a word (``--sparse`` on an all-reduce job
    trained dense, ``--standby 2`` on a ps job started no spare): one line naming it, as the job spec refuses."""
    if a.strategy != "ps":
        for flag, value, given in (("--servers", a.servers, a.servers != 1), ("--sync", a.sync, a.sync != "sync"),
                                   ("--sparse", "", a.sparse)):
            if given:
                raise UserError(f"{flag} {value}".strip() + f": a parameter-server option, not for --strategy "
                                f"{a.strategy}; add --strategy ps")
        return
    for flag, value, given, why in (
            ("--standby", a.standby, a.standby != 0, "a ps job adds workers at a round boundary, no spare prepared"),
            ("--batch-mode", a.batch_mode, a.batch_mode != BatchMode.FIXED_GLOBAL.value,
             "a ps job keeps its global batch and splits it over its workers"),
            ("--ckpt-every", a.ckpt_every, a.ckpt_every == 0, "a ps job commits a round every N global batches; "
             "give N >= 1")):
        if given:
            raise UserError(f"{flag} {value}".strip() + f": not for --strategy ps ({why})")


def _folder_strategy(job_dir) -> str | None:
    """How the folder's job trains: its status says (a ps run's, or any run's with a program: all-reduce's), or
    a ps run's state file does (runs before status.json named it); None for a folder no run has trained in."""
    status = read_status(job_dir) or {}
    if status.get("strategy") or (Path(job_dir) / "ps" / "state.json").exists():
        return status.get("strategy") or "ps"
    return "allreduce" if status.get("program") else None


def main(argv: list[str] | None = None) -> int:
    try:
        opts = parse_args(argv)
        from dlsched.train.coordinator import Coordinator, Options
        from dlsched.train.ps_runner import PSOptions, PSRunner

        lock = fence.claim(opts.job_dir)   # held until this process ends, however it ends
        if lock is None:
            print(f"error: {fence.lock_path(opts.job_dir)}: another coordinator holds this job folder; "
                  f"leaving it alone ({fence.holder_line(opts.job_dir)})", file=sys.stderr)
            return fence.EXIT_FENCED
        if isinstance(opts, (Options, PSOptions)):   # another job's folder: resuming would load that job's checkpoint
            status = read_status(opts.job_dir) or {}
            was, now = status.get("program"), job_program(opts.entry, getattr(opts, "command", None))
            if was is not None and was != now:   # status.json stays as it is: that job's record
                print(f"error: {opts.job_dir}: its job trains {was}, not {now}; give this one another --job-dir",
                      file=sys.stderr)
                return 2
            # the same job under the other strategy started over in the folder, mixing its records into the first's
            strategy = "ps" if isinstance(opts, PSOptions) else "allreduce"
            was_strategy = _folder_strategy(opts.job_dir)
            if was_strategy is not None and was_strategy != strategy:
                print(f"error: {opts.job_dir}: its job trains with --strategy {was_strategy}, not {strategy}; give "
                      "this one another --job-dir", file=sys.stderr)
                return 2
        if isinstance(opts, FleetOptions):
            from dlsched.train.fleet_job import run_job   # FLEET's runtime (no ensemble job, no import)

            return run_job(opts)
        return PSRunner(opts).run() if isinstance(opts, PSOptions) else Coordinator(opts).run()
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        if "opts" in locals():
            write_status(opts.job_dir, "failed", os.getpid(), 0, str(e))
        return 2
    except JobFailed as e:   # the job's code, not the runtime: its traceback is in the worker's log, not here
        print(f"error: {e}", file=sys.stderr)
        return 1
    except Exception as e:  # noqa: BLE001 - the backend reads status.json; the log keeps the trace
        if is_no_space(e):   # said as it can be: the log is on that disk too
            say_no_space(f"error: the job folder's disk is full ({e}): stopped, its checkpoints stand; it resumes "
                         "from the newest once there is room")
            return EXIT_NO_SPACE
        traceback.print_exc()
        return 1


if __name__ == "__main__":
    sys.exit(main())
