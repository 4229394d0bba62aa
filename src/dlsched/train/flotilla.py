"""FLEET runtime: one producer preprocesses each batch once into shared memory; every model of the flotilla trains on it.

* ``BatchRing`` -- K slots of torch shared-memory tensors. The producer writes batch i into slot i % K and stamps
  it with the bitmask of active consumers; a consumer trains on a *view* of the slot (no per-consumer copy) and
  clears its bit when done. A slot is rewritten only when its mask is 0: backpressure by the slowest consumer.
* ``Compose``/``RandomCrop``/``RandomHorizontalFlip``/``Normalize`` -- torchvision-style per-sample transforms in
  torch ops (torchvision itself is not usable with this torch).
* ``run_flotillas`` -- per flotilla one shared pipeline (a producer process per planned core) + one process per
  member rank; a member that stops improving on validation (early stopping) checkpoints and leaves; the others are
  stopped at the next step, checkpointed, and ``fleet_job.train_ensemble`` re-forms flotillas for the rest.
"""
from __future__ import annotations

import datetime
import importlib
import importlib.util
import multiprocessing as mp
import os
import queue
import time
import uuid
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Mapping, Sequence

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel

from dlsched.errors import UserError
from dlsched.train.files import atomic_file
from dlsched.train.forking import inheriting_no_garbage, load_lazy_training_modules
from dlsched.train.no_space import is_no_space, no_space
from dlsched.train.parent_death import die_with

# fork: workers start in milliseconds instead of re-importing torch (CPU only; no CUDA context exists yet).
CTX = mp.get_context("fork")


# ---------------------------------------------------------------- data and transforms

# a member leaves the ensemble when it converged (no val gain for `patience` epochs) or hit its epoch cap
LEFT = ("converged", "max_epochs")

def synthetic_images(n: int, classes: int = 10, size: int = 32, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """A learnable CIFAR-shaped uint8 image set: a smooth random template per class plus per-image noise and shift.

    (No image data set ships with the project; this keeps the pipeline's real per-image cost and a real task.)"""
    g = torch.Generator().manual_seed(seed)
    templates = F.interpolate(torch.rand(classes, 3, 4, 4, generator=torch.Generator().manual_seed(12345)) * 255,
                              size=(size, size), mode="bilinear", align_corners=False)
    labels = torch.randint(0, classes, (n,), generator=g)
    shift = torch.randint(-3, 4, (n, 2), generator=g)
    imgs = templates[labels] + torch.randn(n, 3, size, size, generator=g) * 60
    imgs = torch.stack([torch.roll(im, (int(s[0]), int(s[1])), dims=(1, 2)) for im, s in zip(imgs, shift)])
    return imgs.clamp(0, 255).to(torch.uint8), labels


class Compose:
    def __init__(self, transforms: Sequence[Callable]) -> None:
        self.transforms = list(transforms)

    def __call__(self, img: torch.Tensor, g: torch.Generator) -> torch.Tensor:
        for t in self.transforms:
            img = t(img, g)
        return img


class RandomCrop:
    """Zero-pad by ``padding`` then crop ``size`` x ``size`` at a random offset (CHW)."""

    def __init__(self, size: int, padding: int = 4) -> None:
        self.size, self.padding = size, padding

    def __call__(self, img: torch.Tensor, g: torch.Generator) -> torch.Tensor:
        padded = F.pad(img, (self.padding,) * 4)
        top, left = torch.randint(0, padded.shape[1] - self.size + 1, (2,), generator=g).tolist()
        return padded[:, top: top + self.size, left: left + self.size]


class RandomHorizontalFlip:
    def __init__(self, p: float = 0.5) -> None:
        self.p = p

    def __call__(self, img: torch.Tensor, g: torch.Generator) -> torch.Tensor:
        return img.flip(-1) if torch.rand((), generator=g).item() < self.p else img


class ToFloat:
    def __call__(self, img: torch.Tensor, g: torch.Generator) -> torch.Tensor:
        return img.float().div_(255.0)


class Normalize:
    def __init__(self, mean: Sequence[float], std: Sequence[float]) -> None:
        self.mean = torch.tensor(mean).view(-1, 1, 1)
        self.std = torch.tensor(std).view(-1, 1, 1)

    def __call__(self, img: torch.Tensor, g: torch.Generator) -> torch.Tensor:
        return (img - self.mean) / self.std


CIFAR_MEAN, CIFAR_STD = (0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616)


@dataclass(frozen=True)
class Augment:
    """The training augmentation: CIFAR's (pad-4 random crop, horizontal flip) unless the data set says otherwise
    (a pad-4 crop of an 8 x 8 digit and a mirrored digit are no longer the digit)."""

    crop_padding: int = 4     # 0: no random crop
    flip: bool = True


def cifar_train_transform(size: int, augment: Augment = Augment()) -> Compose:
    crop = [RandomCrop(size, augment.crop_padding)] if augment.crop_padding > 0 else []
    flip = [RandomHorizontalFlip()] if augment.flip else []
    return Compose([*crop, *flip, ToFloat(), Normalize(CIFAR_MEAN, CIFAR_STD)])


def eval_transform(images: torch.Tensor) -> torch.Tensor:
    return (images.float() / 255.0 - torch.tensor(CIFAR_MEAN).view(1, -1, 1, 1)) / torch.tensor(CIFAR_STD).view(1, -1, 1, 1)


# ---------------------------------------------------------------- shared-memory ring

class BatchRing:
    """Slots of shared tensors; each batch is written once and read in place by every active consumer."""

    def __init__(self, slots: int, batch: int, shape: tuple[int, ...], consumers: int, start: int = 0,
                 producers: int = 1) -> None:
        if consumers > 62:
            raise ValueError("at most 62 consumers per ring")
        self.slots, self.batch, self.start = slots, batch, start
        self.images = torch.empty((slots, batch, *shape)).share_memory_()
        self.labels = torch.empty((slots, batch), dtype=torch.long).share_memory_()
        self.seq = CTX.Array("q", [-1] * slots, lock=False)
        self.pending = CTX.Array("q", [0] * slots, lock=False)
        self.active = CTX.Value("q", (1 << consumers) - 1, lock=False)
        self.cond = CTX.Condition()
        self.produced_cpu_s = CTX.Array("d", [0.0] * producers, lock=False)   # per producer process

    def put(self, index: int, images: torch.Tensor, labels: torch.Tensor) -> bool:
        """Write batch ``index``; blocks until the slot holds batch ``index - slots`` (several producers write
        interleaved indices) and every consumer released it. False once nobody is left."""
        slot = index % self.slots
        prev = index - self.slots
        with self.cond:
            self.cond.wait_for(lambda: ((prev < self.start or self.seq[slot] == prev) and self.pending[slot] == 0)
                               or self.active.value == 0)
            if self.active.value == 0:
                return False
        self.images[slot].copy_(images)
        self.labels[slot].copy_(labels)
        with self.cond:
            self.seq[slot] = index
            self.pending[slot] = self.active.value
            self.cond.notify_all()
        return True

    def wait_slot(self, index: int) -> int:
        """Block until the producer has written batch ``index``; its slot (without the slot being writable)."""
        slot = index % self.slots
        with self.cond:
            self.cond.wait_for(lambda: self.seq[slot] == index)
        return slot

    def get(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        slot = self.wait_slot(index)
        return self.images[slot], self.labels[slot]

    def release(self, index: int, consumer: int) -> None:
        slot = index % self.slots
        with self.cond:
            self.pending[slot] &= ~(1 << consumer)
            self.cond.notify_all()

    def leave(self, consumer: int) -> None:
        """A consumer is done: drop its bit everywhere so it never holds the producer back."""
        with self.cond:
            self.active.value &= ~(1 << consumer)
            for s in range(self.slots):
                self.pending[s] &= ~(1 << consumer)
            self.cond.notify_all()


def share_fate(parent: int | None) -> None:
    """In a forked member or producer, first thing: die with ``parent`` (the runtime, ``dlsched ensemble run``),
    however it dies. A SIGKILLed runtime's members trained on as orphans, writing the checkpoints the restarted
    runtime resumed from (a member went to epoch 21 of 20)."""
    if parent is not None:
        die_with(parent)


def producer_main(ring: BatchRing, images: torch.Tensor, labels: torch.Tensor, seed: int, start_batch: int = 0,
                  cores: Sequence[int] = (), part: int = 0, parts: int = 1, augment: Augment = Augment(),
                  parent: int | None = None) -> None:
    """Preprocess batches ``start_batch + part``, ``+ parts``, ... in random epoch order with the CIFAR transforms,
    each written once into the ring. ``cores``: the CPU cores the planner gave this producer (affinity); one
    torch thread, so the process never uses more than the cores it was given."""
    share_fate(parent)
    if cores:
        os.sched_setaffinity(0, set(cores))
    torch.set_num_threads(1)
    cpu0 = time.process_time()
    transform = cifar_train_transform(images.shape[-1], augment)
    n, b = len(images), ring.batch
    per_epoch = n // b
    index, epoch, order = start_batch + part, -1, None
    while True:
        e, k = divmod(index, per_epoch)
        if e != epoch:
            epoch, order = e, torch.randperm(n, generator=torch.Generator().manual_seed(seed + e))
        g = torch.Generator().manual_seed(seed * 1_000_003 + index)   # augmentation of batch i: same for any parts
        idx = order[k * b: (k + 1) * b]
        batch = torch.stack([transform(images[i], g) for i in idx.tolist()])
        ring.produced_cpu_s[part] = time.process_time() - cpu0
        if not ring.put(index, batch, labels[idx]):
            break
        index += parts
    ring.produced_cpu_s[part] = time.process_time() - cpu0


# ---------------------------------------------------------------- models and members

def load_model_class(ref: str, base_dir: Path | None = None, where: str | None = None) -> type:
    """``package.module:Class`` or ``path/to/file.py:Class`` (relative to ``base_dir``). A bad one is a ``UserError``
    that begins with ``where`` (the file and field naming it: ``spec.yaml: field models[0].model``) and names the
    file it read."""
    mod_name, _, cls_name = ref.partition(":")
    what = f"{where}: {ref!r}" if where else f"model {ref!r}"
    if not cls_name:
        raise UserError(f"{what}: expected 'module:Class' or 'file.py:Class'")
    if mod_name.endswith(".py"):
        path = Path(mod_name)
        if not path.is_absolute() and base_dir is not None:
            path = base_dir / path
        if not path.is_file():
            raise UserError(f"{what}: file {path} not found")
        spec = importlib.util.spec_from_file_location(f"_ensemble_{path.stem}", path)
        module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
        try:
            spec.loader.exec_module(module)  # type: ignore[union-attr]
        except Exception as e:  # noqa: BLE001 - the user's file: its own error, as one line
            raise UserError(f"{what}: cannot import {path}: {type(e).__name__}: {e}") from None
        source = str(path)
    else:
        try:
            module = importlib.import_module(mod_name)
        except ImportError as e:
            raise UserError(f"{what}: cannot import {mod_name}: {e}") from None
        source = getattr(module, "__file__", None) or mod_name
    try:
        return getattr(module, cls_name)
    except AttributeError:
        raise UserError(f"{what}: {source} has no {cls_name}") from None


@dataclass(frozen=True)
class MemberSpec:
    name: str
    model: str                       # module:Class or file.py:Class
    kwargs: Mapping[str, object] = field(default_factory=dict)
    lr: float = 0.05
    base_dir: str | None = None
    max_epochs: int | None = None    # overrides Convergence.max_epochs for this member
    max_workers: int = 1             # data-parallel workers the FLEET greedy may give this member


@dataclass(frozen=True)
class Convergence:
    """Early stopping on validation accuracy: stop after ``patience`` epochs without ``min_delta`` gain."""

    patience: int = 2
    min_delta: float = 0.002
    max_epochs: int = 20


def _build(spec: MemberSpec) -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    cls = load_model_class(spec.model, Path(spec.base_dir) if spec.base_dir else None)
    model = cls(**dict(spec.kwargs))
    return model, torch.optim.SGD(model.parameters(), lr=spec.lr, momentum=0.9)


def load_member_checkpoint(path: Path) -> dict:
    """A member's epoch checkpoint (its weights, optimizer state and convergence counters: tensors, numbers, lists,
    dicts). Tensors and plain data only (``weights_only``): a pickle load ran whatever a file in the job folder named,
    as the service's user, at the member's next resume."""
    return torch.load(path, weights_only=True)


def _save_atomic(obj: dict, path: Path) -> None:
    with atomic_file(path, "wb") as f:
        torch.save(obj, f)


@dataclass(frozen=True)
class MemberRank:
    """One process of a member: its consumer bit in the ring and its rank among the member's data-parallel workers."""

    consumer: int
    rank: int = 0
    world: int = 1
    rendezvous: str = ""      # file for torch.distributed's FileStore (no TCP port to collide with other jobs)
    device: str = "cpu"       # "cuda:<id>" when the rank was given a GPU (see bind_device)


def bind_device(device: str) -> torch.device:
    """"cuda:<id>" -> this process sees only that GPU (as cuda:0; call before any CUDA use); else the CPU."""
    if device.startswith("cuda:"):
        os.environ["CUDA_VISIBLE_DEVICES"] = device.split(":", 1)[1]
        return torch.device("cuda:0")
    return torch.device("cpu")


def _agree(flag: bool, world: int) -> bool:
    """All ranks of a member take the same decision (stop/converge) at the same step."""
    if world == 1:
        return flag
    t = torch.tensor([float(flag)])
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return bool(t.item())


# a member process's report of the exception that ends it: (name, FAILED, "Type: message", its disk was full)
FAILED = "failed"


def member_main(spec: MemberSpec, worker: MemberRank, ring: BatchRing, start_batch: int, steps_per_epoch: int,
                val: tuple[torch.Tensor, torch.Tensor], conv: Convergence, ckpt_dir: str, reports: "mp.Queue",
                stop: "mp.synchronize.Event", max_batches: int | None = None, shift: int = 0,
                parent: int | None = None) -> None:
    """``_train_member`` (dying with ``parent``: ``share_fate``); an exception is reported first (the job's error then names the member and the cause, not
    only that a process failed), then raised (its traceback goes to the log, the process exits 1)."""
    share_fate(parent)
    try:
        _train_member(spec, worker, ring, start_batch, steps_per_epoch, val, conv, ckpt_dir, reports, stop,
                      max_batches, shift)
    except Exception as e:
        reports.put((spec.name, FAILED, f"{type(e).__name__}: {e}".splitlines()[0], is_no_space(e)))
        raise


def _train_member(spec: MemberSpec, worker: MemberRank, ring: BatchRing, start_batch: int, steps_per_epoch: int,
                  val: tuple[torch.Tensor, torch.Tensor], conv: Convergence, ckpt_dir: str, reports: "mp.Queue",
                  stop: "mp.synchronize.Event", max_batches: int | None = None, shift: int = 0) -> None:
    """Train one member (or one data-parallel rank of it) on the shared batches until it converges (leaves), is
    stopped (re-formation) or has run ``max_batches``. Rank r of g trains on rows r::g of each shared batch (a view)
    and gradients are averaged with DDP over gloo; rank 0 validates, checkpoints and reports."""
    torch.set_num_threads(1)
    torch.manual_seed(zlib.crc32(spec.name.encode()))   # stable across runs (str hash is salted)
    rank, world, device = worker.rank, worker.world, bind_device(worker.device)
    if device.type == "cuda":
        torch.cuda.set_device(device)
    if world > 1:
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo", init_method=f"file://{worker.rendezvous}",
                                rank=rank, world_size=world,
                                timeout=datetime.timedelta(seconds=120))   # a lost rank fails loudly, never hangs
    net, opt = _build(spec)
    net.to(device)
    ckpt = Path(ckpt_dir) / f"{spec.name}.pt"
    state = {"step": 0, "epoch": 0, "best": -1.0, "bad": 0, "history": []}
    if ckpt.exists():
        saved = load_member_checkpoint(ckpt)
        net.load_state_dict(saved["model"]), opt.load_state_dict(saved["opt"])
        state = saved["state"]
    # its step k trains the stream's batch k + shift, whole epochs apart: its epochs are the stream's epochs
    if shift % steps_per_epoch or state["step"] + shift < start_batch:
        raise RuntimeError(f"{spec.name}: step {state['step']} shifted by {shift} is not in a stream of "
                           f"{steps_per_epoch} batches an epoch from batch {start_batch}: it would skip batches")
    model = DistributedDataParallel(net, device_ids=[device.index] if device.type == "cuda" else None) if world > 1 else net
    val_x, val_y = eval_transform(val[0]).to(device), val[1].to(device)
    index, status, t0, seen = start_batch, "training", time.perf_counter(), 0
    try:
        while status == "training":
            if _agree(stop.is_set() or (max_batches is not None and seen >= max_batches), world):
                status = "paused"
                break
            if index < state["step"] + shift:
                # Before this member's place: pass it by until the stream reaches it, so that its epochs stay the
                # stream's epochs (each a shuffle of every sample) and no sample is trained twice or skipped.
                ring.wait_slot(index)
                ring.release(index, worker.consumer)
                index, t0 = index + 1, time.perf_counter()
                continue
            x, y = ring.get(index)
            model.train()
            # rank r of g trains on rows r::g of the shared slot: a view on CPU (no copy), one transfer on a GPU
            loss = F.cross_entropy(model(x[rank::world].to(device)), y[rank::world].to(device))
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            ring.release(index, worker.consumer)
            index, seen = index + 1, seen + 1
            state["step"] += 1
            rate = seen * ring.batch / (time.perf_counter() - t0)
            if state["step"] % steps_per_epoch == 0:
                state["epoch"] += 1
                acc = -1.0
                if rank == 0:
                    net.eval()
                    with torch.no_grad():
                        acc = (net(val_x).argmax(1) == val_y).float().mean().item()
                    state["history"].append(acc)
                    if acc > state["best"] + conv.min_delta:
                        state["best"], state["bad"] = acc, 0
                        _save_atomic({"model": net.state_dict(), "acc": acc, "epoch": state["epoch"]}, Path(ckpt_dir) / f"{spec.name}.best.pt")
                    else:
                        state["bad"] += 1
                    # each epoch's end is a checkpoint (before its report, which the runtime then records as the
                    # member's place): only a pause wrote one, so a SIGKILLed runtime lost all since the last plan
                    _save_atomic({"model": {k: v.detach().cpu() for k, v in net.state_dict().items()},
                                  "opt": opt.state_dict(), "state": state}, ckpt)
                done = state["bad"] >= conv.patience or state["epoch"] >= (spec.max_epochs or conv.max_epochs)
                if _agree(rank == 0 and done, world):
                    # patience ran out: converged; else the epoch cap stopped it first (only rank 0 reports it)
                    status = "converged" if state["bad"] >= conv.patience else "max_epochs"
                    # Pause the others before this member leaves the ring: until it leaves, the ring keeps them
                    # within ``slots`` batches of it, so how far they get before re-forming does not depend on
                    # how fast the parent reads the report.
                    stop.set()
                if rank == 0:
                    reports.put((spec.name, status, state["epoch"], state["step"], loss.item(), acc, rate))
            elif state["step"] % 10 == 0 and rank == 0:
                reports.put((spec.name, "training", state["epoch"], state["step"], loss.item(), None, rate))
    finally:
        ring.leave(worker.consumer)
    if rank == 0:
        _save_atomic({"model": net.cpu().state_dict(), "opt": opt.state_dict(), "state": state}, ckpt)
        reports.put((spec.name, status, state["epoch"], state["step"], None, state["best"], None))
    if world > 1:
        dist.destroy_process_group()
        # Leave without freeing the DDP model: its Reducer's process group, destroyed with the GIL held, waits on
        # gloo's work thread, which waits for the GIL to free a finished all-reduce's tensors (py-spy: a rank hung
        # there until run_flotillas killed it 30 s later, the ensemble holding its slots meanwhile). The reports
        # are flushed first; the checkpoint is written.
        reports.close()
        reports.join_thread()
        os._exit(0)


# ---------------------------------------------------------------- flotillas

def _failure(reports: "mp.Queue", wait_s: float = 2.0) -> tuple | None:
    """The first failure a member reported among the reports still queued (its process exited as it sent it)."""
    deadline = time.monotonic() + wait_s
    while (left := deadline - time.monotonic()) > 0:
        try:
            msg = reports.get(timeout=left)
        except queue.Empty:
            return None
        if msg[1] == FAILED:
            return msg
    return None


class MemberLost(RuntimeError):
    """A flotilla's process was killed by a signal (the OOM killer, a kill by hand) and reported no failure of its
    own: nothing the members do would repeat it, so they resume from their checkpoints (``fleet_job``), as a
    data-parallel job's lost worker does. ``lost``: (member name, or ``producer``; exit code) per process."""

    def __init__(self, lost: list[tuple[str, int]], groups: Sequence[Sequence[MemberSpec]]) -> None:
        super().__init__(f"flotilla process(es) killed by a signal: {lost} (flotillas {[[m.name for m in g] for g in groups]})")
        self.lost = lost


@dataclass(frozen=True)
class FlotillaRun:
    members: tuple[str, ...]
    start: float
    end: float
    workers: tuple[int, ...]      # data-parallel workers per member
    producer_cpu_s: float


def warm_up_torch() -> None:
    """The first optimizer step imports torch's compile machinery (seconds); do it once before forking workers."""
    p = torch.nn.Parameter(torch.zeros(1))
    opt = torch.optim.SGD([p], lr=0.1, momentum=0.9)
    p.grad = torch.zeros(1)
    opt.step()


@dataclass
class LiveFlotilla:
    """A flotilla whose processes run: what ``run_flotillas`` needs to follow it across calls (a re-formation that
    keeps it hands it to the next call in ``running``)."""

    members: tuple[MemberSpec, ...]
    ring: BatchRing
    stop: "mp.synchronize.Event"
    procs: list            # member ranks, ``owners[i]`` the member of ``procs[i]``
    owners: list[str]
    producers: list
    workers: tuple[int, ...]
    start: float
    finished: set[str] = field(default_factory=set)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(m.name for m in self.members)

    def run(self) -> FlotillaRun:
        return FlotillaRun(self.names, self.start, time.time(), self.workers, sum(self.ring.produced_cpu_s))


def _start_flotilla(members: Sequence[MemberSpec], data, val, batch: int, conv: Convergence, ckpt_dir: Path,
                    reports: "mp.Queue", first: int, slots: int, seed: int, max_batches: int | None,
                    workers: Mapping[str, int] | None, cores: Sequence[int], devices: Mapping[str, Sequence[str]],
                    augment: Augment, shift: Mapping[str, int]) -> LiveFlotilla:
    steps = len(data[0]) // batch
    gpus = [(workers or {}).get(m.name, 1) for m in members]
    pinned = [(c,) for c in cores] if cores else [()]
    ring = BatchRing(max(slots, len(pinned)), batch, tuple(data[0].shape[1:]), sum(gpus), start=first,
                     producers=len(pinned))
    stop = CTX.Event()   # its own: a re-formation may stop this flotilla alone
    producers = [CTX.Process(target=producer_main, daemon=True, args=(
        # one order of batches whatever the flotilla: a member re-formed mid-epoch into another goes on
        # with the epoch's same shuffle (a seed per flotilla gave it part of another shuffle)
        ring, data[0], data[1], seed, first, core, part, len(pinned), augment, os.getpid()))
        for part, core in enumerate(pinned)]
    procs, owners, consumer = [], [], 0
    for m, g in zip(members, gpus):
        rdzv = str(Path(ckpt_dir) / f".{m.name}.{os.getpid()}.{uuid.uuid4().hex}.rendezvous") if g > 1 else ""
        ranks = list(devices.get(m.name, ())) + ["cpu"] * g
        for r in range(g):
            procs.append(CTX.Process(target=member_main, daemon=True, args=(
                m, MemberRank(consumer, r, g, rdzv, ranks[r]), ring, first, steps, val, conv, str(ckpt_dir), reports,
                stop, max_batches, shift.get(m.name, 0), os.getpid())))
            owners.append(m.name)
            consumer += 1
    load_lazy_training_modules()
    with inheriting_no_garbage():
        for p in producers + procs:
            p.start()
    return LiveFlotilla(tuple(members), ring, stop, procs, owners, producers, tuple(gpus), time.time())


def _tear_down(f: LiveFlotilla, ckpt_dir: Path) -> None:
    """Every member of ``f`` has reported its final state (rank 0 checkpointed before that report): what is left is
    process tear-down, which must never hang the caller (a forked rank stuck in gloo clean-up once did)."""
    for p in f.procs:
        p.join(timeout=30)
        if p.is_alive():
            p.kill()
    for p in f.producers:
        p.join(timeout=10)
        if p.is_alive():
            p.kill()
    for name in f.names:   # its own rendezvous files only: a flotilla kept running still uses its own
        for r in Path(ckpt_dir).glob(f".{name}.{os.getpid()}.*.rendezvous"):
            r.unlink(missing_ok=True)


def run_flotillas(groups: Sequence[Sequence[MemberSpec]], data: tuple[torch.Tensor, torch.Tensor],
                  val: tuple[torch.Tensor, torch.Tensor], batch: int, conv: Convergence, ckpt_dir: Path, reports: "mp.Queue",
                  *, start_batch: int | Sequence[int] = 0, slots: int = 4, seed: int = 0, max_batches: int | None = None,
                  workers: Mapping[str, int] | None = None,
                  cores: Sequence[Sequence[int]] | None = None,
                  devices: Mapping[str, Sequence[str]] | None = None,
                  should_stop: Callable[[], bool | frozenset[str]] | None = None,
                  on_report: Callable[[tuple], None] | None = None,
                  augment: Augment = Augment(), shift: Mapping[str, int] | None = None,
                  running: list[LiveFlotilla] | None = None) -> tuple[set[str], list[FlotillaRun]]:
    """Run flotillas side by side, each with one shared pipeline and, per member, ``workers[name]`` (default 1)
    data-parallel processes.

    ``cores[i]``: the CPU cores of flotilla i's pipeline, one producer process pinned to each (default: one
    unpinned producer). ``devices[name]``: the device of each of the member's ranks (default CPU).
    ``start_batch`` (per flotilla): the first batch of its stream; ``shift[name]``: whole epochs between a member's
    step and the stream's batch it trains (default 0; ``fleet_job.stream_places`` chooses both). A member passes
    the batches before its own by. Returns when a member converges, when ``should_stop()`` turns true (a new share, a SIGTERM) --
    every member is then paused at its next step and checkpointed -- or when all members stopped (``max_batches``
    each).

    ``running``: flotillas still running from an earlier call (``reports`` the same queue), followed with the new
    ones. ``should_stop()`` may instead name members (a frozenset, empty for none): only their flotillas are
    stopped, the call returns once they stopped, and the others stay in ``running``, training on (an incremental
    re-formation: ``fleet_job.train_ensemble``). Returns the members that left and the runs of the flotillas that
    ended."""
    warm_up_torch()
    live = running if running is not None else []
    for gi, members in enumerate(groups):
        live.append(_start_flotilla(
            members, data, val, batch, conv, ckpt_dir, reports,
            start_batch if isinstance(start_batch, int) else start_batch[gi], slots, seed, max_batches, workers,
            cores[gi] if cores else (), devices or {}, augment, shift or {}))
    converged: set[str] = set()
    stopping: list[LiveFlotilla] = []   # told to stop: the call returns once their members all reported
    next_check = 0.0

    def stop(which: Sequence[LiveFlotilla]) -> None:
        for f in which:
            f.stop.set()
            if f not in stopping:
                stopping.append(f)

    def ended(f: LiveFlotilla) -> bool:
        return len(f.finished) == len(f.members)

    while not (stopping and all(map(ended, stopping))) and not all(map(ended, live)):
        try:
            msg = reports.get(timeout=0.2)
        except queue.Empty:
            msg = None
        if should_stop is not None and time.monotonic() >= next_check:
            next_check = time.monotonic() + 0.2
            which = should_stop()
            if which is True:
                stop(live)
            elif isinstance(which, frozenset):
                stop([f for f in live if which & set(f.names)])
                if not stopping:   # nothing to stop: the caller re-plans (starts flotillas) at once
                    break
        procs = [p for f in live for p in f.procs + f.producers]
        if msg is None and any(p.exitcode not in (None, 0) for p in procs):
            msg = _failure(reports) or (None, FAILED, None)   # its report may be still in the pipe
        if msg is not None and msg[1] == FAILED:
            # read before the kill below: after it every process ended by a signal
            dead = [(o, p.exitcode) for f in live for o, p in zip(f.owners + ["producer"] * len(f.producers),
                                                                 f.procs + f.producers)
                    if p.exitcode not in (None, 0)]
            everyone = [list(f.members) for f in live]
            for f in live:
                f.stop.set()
            for p in procs:
                p.kill()
            live.clear()
            if msg[3:] and msg[3]:   # no failure of the member's: the job stops and resumes once there is room
                raise no_space(f"member {msg[0]}: {msg[2]}")
            killed = [(o, code) for o, code in dead if code < 0]
            if killed and (msg[0] is None or any(o == msg[0] for o, _ in killed)):
                # a process killed by a signal: its own member's other ranks then fail in their collective
                # ("Connection reset by peer"), and that report named the member as failed: the job failed where a
                # lone rank's kill (the OOM killer's pick) resumes from the checkpoint like any other's
                raise MemberLost(killed, everyone)
            raise RuntimeError(f"member {msg[0]} failed: {msg[2]}" if msg[0] else
                               f"a member process failed (flotillas {[[m.name for m in g] for g in everyone]})")
        if msg is None:
            continue
        if on_report:
            on_report(msg)
        name, status = msg[0], msg[1]
        if status in LEFT:
            converged.add(name)
            stop(live)       # re-form: the others checkpoint at their next step
        if msg[4] is None and status in LEFT + ("paused",):
            for f in live:
                if name in f.names:
                    f.finished.add(name)
    runs = []
    for f in [f for f in live if ended(f)]:
        _tear_down(f, ckpt_dir)
        runs.append(f.run())
        live.remove(f)
    return converged, runs
