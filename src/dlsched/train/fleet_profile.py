"""FLEET's profiles, measured: a member's training rate r(g) on g = 1..m worker slots from short real runs, and the
shared pipeline's images/s per core, cached per model and hardware.

r(g) is weak scaling as the flotilla runs it: g data-parallel ranks (gloo on CPU, NCCL on GPUs), each training on a
batch of the member's size per step, so r(g) = g * batch / step time. A g the machine cannot run (more ranks than
devices or cores) is *modelled* -- linear from the largest measured g -- and the profile says so.
"""
from __future__ import annotations

import datetime
import faulthandler
import hashlib
import json
import multiprocessing as mp
import os
import platform
import queue
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel

from dlsched.policy.fleet import ModelProfile
from dlsched.train.files import atomic_write_json
from dlsched.train.forking import preload_in_forkserver
from dlsched.train.flotilla import Augment, MemberSpec, _build, bind_device, cifar_train_transform

CACHE_FILE = "fleet_profiles.json"
# one r(g) measurement is a few steps: seconds, under a minute on a busy machine. A rank still running after
# RANK_STALL_S writes its stack to the job's log and the measurement starts again, once: a rank hung with ~1 s of
# CPU in a full test run, and the ensemble waited on it until its test timed out
RANK_STALL_S = 90.0
ATTEMPTS = 2
TEARDOWN_S = 10.0   # after the rate, how long a rank may take to leave before it is killed
# a cached rate is one short measurement; what it depends on besides the key (drivers, a neighbour's load when it was
# taken, the node's cooling) drifts: older than this it is measured again (seconds, once a week per model and g)
PROFILE_MAX_AGE_S = 7 * 24 * 3600.0
# Ranks start from a forkserver, not a fork of the caller: a fork copies the caller's threads' locks and a
# used OpenMP pool (the service's, the pipeline measurement's), and a forked rank hung in a full test run.
_CTX = mp.get_context("forkserver")
# this module (torch with it) and what a rank's first optimizer imports (torch._dynamo, ~2 s of CPU), loaded once in
# the server, not once per rank: six measurements paid it six times, 20 s before an ensemble's first flotillas
preload_in_forkserver(__name__)


@dataclass(frozen=True)
class MeasuredProfile:
    profile: ModelProfile
    measured: tuple[bool, ...]   # per g: a real run (True) or the linear model (False)
    note: str                    # why a g was modelled; "" when every g was measured

    def as_record(self) -> dict:
        return {"member": self.profile.name, "rates": list(self.profile.rates), "measured": list(self.measured),
                "note": self.note}


def cache_dir() -> Path:
    return Path(os.environ.get("DLSCHED_PROFILE_CACHE") or Path.home() / ".cache" / "dlsched")


def hardware() -> str:
    """What a rate depends on besides the model: CPU model and usable cores, the granted devices, torch."""
    cpu = platform.processor() or platform.machine()
    try:
        cpu = next(line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return f"{cpu}|cores={len(os.sched_getaffinity(0))}|cuda={os.environ.get('CUDA_VISIBLE_DEVICES', '')}|torch={torch.__version__}"


def _key(spec: MemberSpec, batch: int, shape: tuple[int, ...], g: int) -> str:
    what = json.dumps([spec.model, dict(spec.kwargs), batch, list(shape), g, hardware()], sort_keys=True, default=str)
    return hashlib.sha256(what.encode()).hexdigest()[:24]


def _load_cache(path: Path) -> dict:
    try:
        cache = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return cache if isinstance(cache, dict) else {}


def _fresh_rate(entry, now: float) -> float | None:
    """A cached entry's rate while it is younger than PROFILE_MAX_AGE_S; None to measure again (stale, or an
    entry without its time: the cache's earlier format, a bare rate)."""
    if not isinstance(entry, dict):
        return None
    rate, at = entry.get("rate"), entry.get("measured_at")
    if not isinstance(rate, (int, float)) or not isinstance(at, (int, float)) or rate <= 0:
        return None
    return float(rate) if 0 <= now - at <= PROFILE_MAX_AGE_S else None


def _rank_main(spec: MemberSpec, batch: int, shape: tuple[int, ...], steps: int, rank: int, world: int,
               rendezvous: str, device: str, out: "mp.Queue", stall_s: float) -> None:
    faulthandler.dump_traceback_later(stall_s)   # stderr: the runtime's, i.e. the job's output.log
    torch.set_num_threads(1)
    dev = bind_device(device)
    if world > 1:
        dist.init_process_group("nccl" if dev.type == "cuda" else "gloo", init_method=f"file://{rendezvous}",
                                rank=rank, world_size=world, timeout=datetime.timedelta(seconds=120))
    net, opt = _build(spec)
    net.to(dev)
    model = DistributedDataParallel(net, device_ids=[dev.index] if dev.type == "cuda" else None) if world > 1 else net
    # class 0: a valid target for a model of any number of classes (random 0..9 failed a 2-class model's
    # profiling); the step's time does not depend on the targets' values
    x, y = torch.randn(batch, *shape, device=dev), torch.zeros(batch, dtype=torch.long, device=dev)
    for i in range(steps + 1):           # step 0 warms up (allocations, gloo buckets)
        if i == 1:
            if world > 1:
                dist.barrier()
            t0 = time.perf_counter()
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)
    if world > 1:
        dist.barrier()
    if rank == 0:   # before the teardown, which can hang (a FileStore waited on after its file went, DeepSpeed #7941)
        out.put(world * batch * steps / (time.perf_counter() - t0))
    if world > 1:
        dist.destroy_process_group()


def measure_rate(spec: MemberSpec, batch: int, shape: tuple[int, ...], g: int, devices: Sequence[str],
                 steps: int = 4, scratch: Path | None = None) -> float:
    """r(g) from a real run of g forked ranks (one device each when ``devices`` are given)."""
    for attempt in range(1, ATTEMPTS + 1):
        try:
            return _measure_once(spec, batch, shape, g, devices, steps, scratch)
        except TimeoutError as e:
            if attempt == ATTEMPTS:
                raise RuntimeError(f"{e}; gave up after {ATTEMPTS} attempt(s)") from None
            print(f"{e}: measuring again (its ranks' stacks are above)", file=sys.stderr, flush=True)
    raise AssertionError("unreachable")


def _measure_once(spec: MemberSpec, batch: int, shape: tuple[int, ...], g: int, devices: Sequence[str],
                  steps: int, scratch: Path | None) -> float:
    out = _CTX.Queue()
    rdzv = str((scratch or Path("/tmp")) / f".profile.{os.getpid()}.{uuid.uuid4().hex}")
    procs = [_CTX.Process(target=_rank_main, daemon=True,
                         args=(spec, batch, shape, steps, r, g, rdzv, devices[r] if devices else "cpu", out, RANK_STALL_S))
             for r in range(g)]
    for p in procs:
        p.start()
    wait_s = 1.1 * RANK_STALL_S   # past the ranks' own stack dump
    deadline = time.monotonic() + wait_s
    try:
        while True:
            try:
                rate = out.get(timeout=0.5)
                break
            except queue.Empty:
                if any(p.exitcode not in (None, 0) for p in procs):
                    raise RuntimeError(f"profiling {spec.name} on {g} rank(s) failed: exit codes "
                                       f"{[p.exitcode for p in procs]}") from None
                if time.monotonic() > deadline:
                    raise TimeoutError(f"profiling {spec.name} on {g} rank(s) gave no rate in "
                                       f"{wait_s:.0f} s") from None
    finally:
        for p in procs:   # past the rate, a rank has only its teardown left: a few seconds, else it is stuck there
            p.join(timeout=0 if time.monotonic() > deadline else TEARDOWN_S)
            if p.is_alive():
                p.kill()
                p.join()
        Path(rdzv).unlink(missing_ok=True)
    return float(rate)


def profile_member(spec: MemberSpec, batch: int, shape: tuple[int, ...], max_gpus: int, devices: Sequence[str] = (),
                   steps: int = 4, scratch: Path | None = None) -> MeasuredProfile:
    """r(1..max_gpus): cached measurements younger than PROFILE_MAX_AGE_S, new ones for the rest, the linear model
    where a g cannot run here."""
    path = cache_dir() / CACHE_FILE
    cache = _load_cache(path)
    limit = len(devices) if devices else len(os.sched_getaffinity(0))
    rates: list[float] = []
    measured: list[bool] = []
    for g in range(1, max_gpus + 1):
        key = _key(spec, batch, shape, g)
        if (cached := _fresh_rate(cache.get(key), time.time())) is not None:
            rates.append(cached)
            measured.append(True)
        elif g <= limit or g == 1:
            rates.append(measure_rate(spec, batch, shape, g, devices[:g], steps, scratch))
            measured.append(True)
            cache = {**_load_cache(path), key: {"rate": rates[-1], "measured_at": time.time()}}
            path.parent.mkdir(parents=True, exist_ok=True)
            atomic_write_json(path, cache)
        else:
            last = max(i for i, m in enumerate(measured) if m) + 1
            rates.append(rates[last - 1] * g / last)   # linear (weak) scaling from the largest measured g
            measured.append(False)
    note = ""
    if not all(measured):
        unit = "devices" if devices else "CPU cores"
        note = (f"r(g) for g > {limit} modelled (linear from r({limit})): only {limit} {unit} here, "
                f"so {max_gpus} ranks cannot be measured")
    return MeasuredProfile(ModelProfile(spec.name, tuple(rates)), tuple(measured), note)


def preprocessing_rate(images: torch.Tensor, batch: int, batches: int = 2, augment: Augment = Augment()) -> float:
    """The shared pipeline's images/s on one core: the CIFAR transforms on real images, one thread."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        transform = cifar_train_transform(images.shape[-1], augment)
        g = torch.Generator().manual_seed(0)
        n = min(len(images), batch * batches)
        transform(images[0], g)
        t0 = time.process_time()
        torch.stack([transform(images[i], g) for i in range(n)])
        return n / max(time.process_time() - t0, 1e-6)
    finally:
        torch.set_num_threads(threads)
