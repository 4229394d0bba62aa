"""Step-time overhead of the dlsched elastic worker vs a plain DistributedDataParallel loop.

Same job (model, generated data, global batch, seed), same worker count and threads; both sides
are measured in this one run, interleaved, and the best median of each is compared.
  dlsched: ``python -m dlsched.train.run`` with N workers; step time = gaps between rank 0's
           progress reports (includes the partition table, flat all-reduce, reports, checkpoints off).
  DDP:     N processes (fork), ``DistributedDataParallel`` over gloo (NCCL on CUDA), the same batches.
Target (issue 5): overhead ≤ 3 %. With --h100-table it also prints samples/s next to
shared/data/h100/throughput.csv (fp32 rows) for the same model and batch.
"""
from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))

from dlsched.train.data import PartitionTable, split_global_batch  # noqa: E402
from dlsched.train.job import build_job, parse_params  # noqa: E402
from dlsched.train.scaling import local_batch_sizes  # noqa: E402


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _ddp_backend(world: int, rank: int) -> tuple[str, torch.device]:
    """Plain DDP's usual set-up: rank r on cuda:r when every rank has a GPU (what the runtime's NCCL path
    matches with one pinned GPU per worker), else gloo on the CPU."""
    if torch.cuda.is_available() and torch.cuda.device_count() >= world:
        return "nccl", torch.device("cuda", rank)
    return "gloo", torch.device("cpu")


def _ddp_proc(rank, world, port, entry, params, batch, steps, threads, out):
    torch.set_num_threads(threads)
    store = dist.TCPStore("127.0.0.1", port, is_master=rank == 0, wait_for_workers=False, timeout=timedelta(seconds=60))
    backend, device = _ddp_backend(world, rank)
    dist.init_process_group(backend, store=store, rank=rank, world_size=world)
    job = build_job(entry, params)
    torch.manual_seed(job.seed)
    model = torch.nn.parallel.DistributedDataParallel(job.make_model().to(device),
                                                      device_ids=[device.index] if device.type == "cuda" else None)
    opt = job.make_optimizer(model)
    table = PartitionTable.fresh(job.num_samples, job.seed, 0)
    locals_ = local_batch_sizes(batch, world)
    times = []
    for _ in range(steps):
        if table.remaining < batch:
            table = table.next_epoch()
        t0 = time.perf_counter()
        ids = torch.as_tensor(split_global_batch(table.take(batch), locals_)[rank])
        x, y = job.get_batch(ids)
        opt.zero_grad()
        job.loss_fn(model(x.to(device)), y.to(device)).backward()
        opt.step()
        if device.type == "cuda":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    if rank == 0:
        Path(out).write_text(json.dumps(times))
    dist.destroy_process_group()


def ddp_step_s(entry, params, workers, batch, steps, threads, warmup) -> float:
    out = tempfile.mktemp(suffix=".json")
    method = "spawn" if torch.cuda.is_available() else "fork"  # CUDA cannot be re-initialised in a fork
    mp.start_processes(_ddp_proc, args=(workers, _free_port(), entry, params, batch, steps, threads, out),
                       nprocs=workers, start_method=method)
    return statistics.median(json.loads(Path(out).read_text())[warmup:])


def dlsched_step_s(entry, params, workers, batch, steps, threads, warmup) -> float:
    with tempfile.TemporaryDirectory() as d:
        n = (steps + 1) * batch  # one epoch of `steps` steps (the job is not built here: CUDA stays out of this process)
        cmd = [sys.executable, "-m", "dlsched.train.run", "--job-dir", d, "--entry", entry, "--workers", str(workers),
               "--batch-size", str(batch), "--threads", str(threads), "--ckpt-every", "0", "--no-replace-stragglers"]
        for k, v in {**params, "num_samples": min(n, params["num_samples"])}.items():
            cmd += ["--param", f"{k}={v}"]
        env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
        subprocess.run(cmd, check=True, env=env)
        t = [json.loads(line)["time"] for line in (Path(d) / "progress.jsonl").read_text().splitlines()
             if '"event"' not in line]
    gaps = [b - a for a, b in zip(t, t[1:])]
    return statistics.median(gaps[warmup:])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--entry", default=str(REPO / "examples" / "resnet20.py") + ":make_job")
    ap.add_argument("--param", action="append", default=[])
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--steps", type=int, default=25)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--h100-table", type=Path, default=None, help="shared/data/h100/throughput.csv to compare with")
    a = ap.parse_args()
    params = {"num_samples": 4096, **parse_params(a.param)}
    ddp, ours = [], []
    for r in range(a.repeats):
        ddp.append(ddp_step_s(a.entry, params, a.workers, a.batch, a.steps, a.threads, a.warmup))
        ours.append(dlsched_step_s(a.entry, params, a.workers, a.batch, a.steps, a.threads, a.warmup))
        print(f"repeat {r}: DDP {ddp[-1] * 1e3:.1f} ms/step, dlsched {ours[-1] * 1e3:.1f} ms/step", flush=True)
    backend = _ddp_backend(a.workers, 0)[0]
    best_ddp, best_ours = min(ddp), min(ours)
    print(f"step time ({backend}, {a.workers} workers, global batch {a.batch}, {a.threads} threads/worker): "
          f"DDP {best_ddp * 1e3:.1f} ms, dlsched {best_ours * 1e3:.1f} ms -> overhead "
          f"{(best_ours / best_ddp - 1) * 100:+.1f} % (target <= 3 %)")
    if a.h100_table:
        import pandas as pd

        job = build_job(a.entry, params)
        t = pd.read_csv(a.h100_table)  # shared/data/h100/throughput.csv: synthetic inputs, one H100
        row = t[(t.model == job.name) & (t.dataset == "cifar10") & (t.batch_size == a.batch) & (t.precision == "fp32")]
        ref = float(row.samples_per_s.iloc[0]) if len(row) else float("nan")
        print(f"samples/s {job.name} batch {a.batch}: dlsched {a.batch / best_ours:.0f}, DDP {a.batch / best_ddp:.0f}, "
              f"H100 table {ref:.0f} (ratio dlsched/table {a.batch / best_ours / ref:.2f})")


if __name__ == "__main__":
    main()
