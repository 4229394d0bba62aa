"""The training script both sides of bench/torch_overhead.py run: ``--mode ddp`` (plain DDP over torchrun's
environment, DistributedSampler) or ``--mode dlsched`` (the same loop through dlsched.torch, noise on)."""
import argparse
import json
import os
import threading
import time

import torch
from torch import nn
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

ap = argparse.ArgumentParser()
ap.add_argument("--mode", choices=["ddp", "dlsched"], required=True)
ap.add_argument("--steps", type=int, default=80)
ap.add_argument("--batch", type=int, default=128)
ap.add_argument("--width", type=int, default=1024)
ap.add_argument("--out", required=True)
ap.add_argument("--noise-every", type=int, default=None, help="ElasticDataParallel's noise_every (default: its own)")
ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu", help="cuda: each rank on its own GPU, NCCL")
ap.add_argument("--pin", action="store_true", help="pin each rank to CPU rank %% cpus once its rank is known")
ap.add_argument("--step-s", type=float, default=0.0, help="sleep per step (bench/torch_resize.py: time to resize)")
args = ap.parse_args()
torch.set_num_threads(1)
g = torch.Generator().manual_seed(0)
data = TensorDataset(torch.randn(args.steps * args.batch, 256, generator=g),
                     torch.randint(0, 10, (args.steps * args.batch,), generator=g))
torch.manual_seed(0)
net = nn.Sequential(nn.Linear(256, args.width), nn.ReLU(), nn.Linear(args.width, args.width), nn.ReLU(),
                    nn.Linear(args.width, 10))
cuda = args.device == "cuda"
if args.mode == "ddp":
    import torch.distributed as dist

    dev = torch.device("cuda", int(os.environ["LOCAL_RANK"])) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(dev)
    dist.init_process_group("nccl" if cuda else "gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    model = nn.parallel.DistributedDataParallel(net.to(dev), device_ids=[dev.index] if cuda else None)
    loader = DataLoader(data, batch_size=args.batch // world, sampler=DistributedSampler(data, shuffle=True))
    epochs = range(1)
else:
    import dlsched.torch as dt

    dt.init(ckpt_every=0)
    dev = dt.device()
    if cuda and dev.type != "cuda":
        raise SystemExit("--device cuda: this worker was given no GPU")
    model = dt.ElasticDataParallel(net.to(dev), noise_every=args.noise_every)
    loader = dt.ElasticDataLoader(data, batch_size=args.batch)
    epochs = dt.remaining_epochs(1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
stamps, cpu, main_cpu = [], [], []
own_cpu_at_11 = 0.0


def own_threads_cpu_s() -> float:
    """CPU time of dlsched's helper threads in this process (flag watch, progress outbox)."""
    return sum(time.clock_gettime(time.pthread_getcpuclockid(t.ident)) for t in threading.enumerate()
               if t.name.startswith("dlsched") and t.is_alive())


for _ in epochs:
    for x, y in loader:
        if args.pin and not stamps:  # both sides alike: after the first batch, when dlsched's rank is known
            pin_rank = int(os.environ["RANK"]) if args.mode == "ddp" else dt.rank()
            os.sched_setaffinity(0, {pin_rank % os.cpu_count()})
        x, y = x.to(dev, non_blocking=True), y.to(dev, non_blocking=True)
        optimizer.zero_grad()
        nn.functional.cross_entropy(model(x), y).backward()
        optimizer.step()
        if cuda and len(stamps) in (10, args.steps - 1):  # the timed span's ends: the GPU's queued work done
            torch.cuda.synchronize()
        stamps.append(time.perf_counter())
        cpu.append(time.process_time())  # this process, all its threads (gloo's, dlsched's)
        main_cpu.append(time.thread_time())  # the training thread alone: where the wrapper's Python runs
        if len(stamps) == 11:
            own_cpu_at_11 = own_threads_cpu_s()
        if args.step_s:
            time.sleep(args.step_s)
rank = int(os.environ.get("RANK", "0")) if args.mode == "ddp" else dt.rank()
if rank == 0:
    gaps = [b - a for a, b in zip(stamps[10:], stamps[11:])]  # after warm-up (on a GPU: their sum is what is timed)
    with open(args.out, "w") as f:
        json.dump({"mode": args.mode, "device": torch.cuda.get_device_name(dev) if cuda else "cpu", "step_s": sum(gaps) / len(gaps), "median_step_s": sorted(gaps)[len(gaps) // 2],
                   "cpu_step_s": (cpu[-1] - cpu[10]) / len(gaps),
                   "main_cpu_step_s": (main_cpu[-1] - main_cpu[10]) / len(gaps),
                   "own_threads_cpu_step_s": (own_threads_cpu_s() - own_cpu_at_11) / len(gaps)}, f)
