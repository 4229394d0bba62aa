"""``python -m dlsched.train.run``: start (or resume) one elastic training job; see ``dlsched.train`` for the contract."""
from __future__ import annotations

if __name__ == "__main__":  # first of all: the imports below take seconds (torch), and a SIGTERM meanwhile must
    from dlsched.train import preemption  # end as "stopped" (exit 143), not kill the job unrecorded

    preemption.install()

import argparse
import os
import sys
import traceback
from pathlib import Path

from dlsched.errors import UserError
from dlsched.train.coordinator import Coordinator, Options
from dlsched.train.files import write_status
from dlsched.train.job import load_entry, parse_params
from dlsched.train.scaling import BatchMode


def parse_args(argv: list[str] | None = None) -> Options:
    ap = argparse.ArgumentParser(prog="python -m dlsched.train.run", description=__doc__)
    ap.add_argument("--job-dir", required=True, type=Path)
    ap.add_argument("--entry", required=True, help="path/to/file.py:make_job or module:make_job")
    ap.add_argument("--workers", required=True, type=int)
    ap.add_argument("--batch-size", type=int, default=None, help="global batch (default: the job's)")
    ap.add_argument("--param", action="append", default=[], metavar="KEY=VALUE")
    ap.add_argument("--batch-mode", choices=[m.value for m in BatchMode], default=BatchMode.FIXED_GLOBAL.value)
    ap.add_argument("--ckpt-every", type=int, default=20, help="checkpoint interval in steps (0 = never)")
    ap.add_argument("--threads", type=int, default=0, help="torch threads per worker (0 = cpus // workers)")
    ap.add_argument("--record-samples", action="store_true", help="log sample ids per step (exactly-once audit)")
    ap.add_argument("--no-replace-stragglers", action="store_true", help="keep workers the EWMA rule flags")
    ap.add_argument("--max-restarts", type=int, default=3, help="worker-loss recoveries before the job fails")
    ap.add_argument("--standby", type=int, default=0, help="prepared spare workers for instant scale-out")
    a = ap.parse_args(argv)
    if a.workers < 1:
        raise UserError(f"--workers {a.workers}: must be >= 1")
    if a.batch_size is not None and a.batch_size < 1:
        raise UserError(f"--batch-size {a.batch_size}: must be >= 1")
    return Options(job_dir=a.job_dir, entry=a.entry, workers=a.workers, batch_size=a.batch_size,
                   params=parse_params(a.param), batch_mode=BatchMode(a.batch_mode), ckpt_every=a.ckpt_every,
                   threads=a.threads, record_samples=a.record_samples,
                   standby=a.standby, max_restarts=a.max_restarts, replace_stragglers=not a.no_replace_stragglers)


def ensemble_of(opts: Options):
    """The EnsembleSpec when the entry makes one (a ``kind: ensemble`` job runs FLEET), else None."""
    from dlsched.train.fleet_spec import EnsembleSpec

    made = load_entry(opts.entry)(**opts.params)
    return made if isinstance(made, EnsembleSpec) else None


def main(argv: list[str] | None = None) -> int:
    try:
        opts = parse_args(argv)
        ensemble = ensemble_of(opts)
        if ensemble is not None:
            from dlsched.train.fleet_job import run_job

            return run_job(opts.job_dir, ensemble, opts.workers)
        return Coordinator(opts).run()
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        if "opts" in locals():
            write_status(opts.job_dir, "failed", os.getpid(), 0, str(e))
        return 2
    except Exception as e:  # noqa: BLE001 - the backend reads status.json; the log keeps the trace
        traceback.print_exc()
        return 1


if __name__ == "__main__":
    sys.exit(main())
