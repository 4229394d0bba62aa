"""A plain PyTorch training script ported to dlsched.torch (the tests' bring-your-own-loop job).

No checkpoint code: the model, AdamW/SGD and OneCycleLR are registered by dlsched.torch on their own.
``--step-s`` slows each step (while ``--slow-file`` exists) so tests can resize it mid-epoch.
"""
import argparse
import hashlib
import os
import random
import sys
import time

PRELOADED = "torch" in sys.modules   # a worker forked with torch loaded (dlsched.train.script.run_forked)

import numpy as np
import torch
from torch import nn
from torch.utils.data import Dataset, TensorDataset

import dlsched.torch as dt

ap = argparse.ArgumentParser()
ap.add_argument("--samples", type=int, default=96)
ap.add_argument("--batch", type=int, default=8)
ap.add_argument("--epochs", type=int, default=2)
ap.add_argument("--optimizer", choices=["adamw", "sgd"], default="adamw")
ap.add_argument("--lr", type=float, default=0.01)
ap.add_argument("--step-s", type=float, default=0.0)
ap.add_argument("--backward-s", type=float, default=0.0, help="sleep before each optimizer step (a long backward)")
ap.add_argument("--slow-file", default="", help="sleep --step-s per step only while this file exists")
ap.add_argument("--ckpt-every", type=int, default=5)
ap.add_argument("--label-noise", type=float, default=0.1)
ap.add_argument("--autoscale", type=int, default=0, help="opt in to the adaptive batch, up to this global batch")
ap.add_argument("--noise-every", type=int, default=None, help="ElasticDataParallel's noise_every")
ap.add_argument("--report-lr", action="store_true", help="report the scheduler's LR with every step's loss")
ap.add_argument("--report-mae", action="store_true", help="report the batch's train_mae with every step's loss")
ap.add_argument("--max-local-batch", type=int, default=None, help="accumulate a larger local share (no_sync)")
ap.add_argument("--scaler", action="store_true", help="step through a GradScaler (loss scaled by 2**10)")
ap.add_argument("--zero-grad-last", action="store_true", help="zero_grad after the step, not before the forward")
ap.add_argument("--max-steps", type=int, default=0, help="break out of the loader after this many batches an epoch")
ap.add_argument("--steps-per-epoch", type=int, default=None, help="the loader's steps_per_epoch")
ap.add_argument("--batch-norm", action="store_true", help="a BatchNorm1d after the first layer")
ap.add_argument("--hold-file", default="", help="rank 1 writes its pid here and waits to be killed ...")
ap.add_argument("--hold-at-step", type=int, default=0, help="... after this step's first micro-batch (once: the file)")
ap.add_argument("--warmup-cosine", action="store_true", help="SequentialLR: 5 steps of LinearLR, then CosineAnnealingLR")
ap.add_argument("--epoch-schedule", action="store_true", help="StepLR halving the LR, stepped after each epoch")
ap.add_argument("--fail-at-step", type=int, default=0, help="rank 0 raises in this step, once: ...")
ap.add_argument("--fail-once-file", default="", help="... this file, made then, says it did")
ap.add_argument("--rank1-breaks-at-epoch", type=int, default=-1,
                help="rank 1 alone breaks out of remaining_epochs after this epoch's evaluation")
ap.add_argument("--flag-lands-at-epoch-end", default="",
                help="rank 0 (alone in its group) waits in epoch 0's last step for the coordinator's stop flag, so a "
                     "resize lands there; once: this file, made then, says it did")
ap.add_argument("--eval-all-reduce", action="store_true",
                help="the evaluation sums its squared error over the ranks (dist.all_reduce), as DDP scripts do")
ap.add_argument("--steps-from-len", action="store_true", help="size OneCycleLR from len(loader), as docs/porting.md")
ap.add_argument("--slow-worker", type=int, default=-1, help="this worker (id) sleeps --slow-s before each forward")
ap.add_argument("--slow-s", type=float, default=0.0)
ap.add_argument("--slow-in", choices=["forward", "backward", "step"], default="forward",
                help="where the slow worker sleeps: before its forward, in its backward, before its optimizer step")
ap.add_argument("--dropout", type=float, default=0.0, help="a Dropout after the hidden layer")
ap.add_argument("--augment", action="store_true", help="jitter each batch with numpy's and Python's random draws")
ap.add_argument("--print-rng", action="store_true",
                help="print a digest of this rank's random streams as each step begins and ends")
ap.add_argument("--loader-workers", type=int, default=0, help="the loader's num_workers (DataLoader processes)")
ap.add_argument("--item-augment", action="store_true",
                help="the dataset's __getitem__ jitters each sample with torch's, numpy's and Python's draws")
ap.add_argument("--weighted-sampler", action="store_true",
                help="a WeightedRandomSampler (with replacement) over the samples, weighted 1, 2, 3, 1, 2, 3...")
ap.add_argument("--init", default="", help="a warm start: the model's weights loaded from this file at the top")
ap.add_argument("--rank-before-loop", action="store_true", help="print dt.rank() and dt.world_size() before the loop")
args = ap.parse_args()


def print_rng(where: str) -> None:
    """``rng {begin|end} RANK STEP DIGEST``: torch's, numpy's and Python's streams, drawing nothing."""
    if args.print_rng:
        _, keys, pos, *_ = np.random.get_state()
        state = torch.get_rng_state().numpy().tobytes() + keys.tobytes() + repr((pos, random.getstate())).encode()
        print(f"rng {where} {dt.rank()} {dt.current_session().step + 1} {hashlib.sha1(state).hexdigest()[:12]}",
              flush=True)


def hold(path: str) -> None:
    """Wait to be SIGKILLed holding half a step's gradient; the pid in ``path`` tells the test whom."""
    with open(path + ".tmp", "w") as f:
        f.write(str(os.getpid()))
    os.replace(path + ".tmp", path)
    parent, end = os.getppid(), time.monotonic() + 300
    while os.getppid() == parent and time.monotonic() < end:  # bounded: an orphan ends
        time.sleep(0.05)
    sys.exit(1)


dt.init(ckpt_every=args.ckpt_every)
print(f"torch preloaded: {PRELOADED}", flush=True)
g = torch.Generator().manual_seed(0)
x = torch.randn(args.samples, 8, generator=g)
y = (x @ torch.randn(8, 1, generator=g)).squeeze(1) + args.label_noise * torch.randn(args.samples, generator=g)
torch.manual_seed(0)
SLOW = os.environ.get("DLSCHED_WORKER_ID") == str(args.slow_worker)


class SlowBackward(torch.autograd.Function):
    """Identity; the slow worker sleeps in its backward (a slow device, a costly layer's gradient)."""
    @staticmethod
    def forward(ctx, h):
        return h

    @staticmethod
    def backward(ctx, grad):
        time.sleep(args.slow_s)
        return grad


class SlowIn(nn.Module):
    def forward(self, h):
        return SlowBackward.apply(h) if SLOW and args.slow_in == "backward" and torch.is_grad_enabled() else h


layers = [nn.Linear(8, 16), *([nn.BatchNorm1d(16)] if args.batch_norm else []), nn.Tanh(),
          *([nn.Dropout(args.dropout)] if args.dropout else []),
          *([SlowIn()] if args.slow_in == "backward" else []), nn.Linear(16, 1)]
model = dt.ElasticDataParallel(nn.Sequential(*layers), noise_every=args.noise_every)
if args.init:
    model.module.load_state_dict(torch.load(args.init))
if args.optimizer == "adamw":
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr)
else:
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)


class ItemAugmented(Dataset):
    """Each sample jittered as it is loaded (in the DataLoader's processes with --loader-workers)."""
    def __len__(self):
        return len(x)

    def __getitem__(self, i):
        jitter = 0.1 * random.random() + 0.05 * torch.randn(8) + 0.05 * torch.from_numpy(np.random.standard_normal(8))
        return x[i] * (1 + jitter.float()), y[i]


sampler = torch.utils.data.WeightedRandomSampler([1.0 + i % 3 for i in range(args.samples)], args.samples) \
    if args.weighted_sampler else None
loader = dt.ElasticDataLoader(ItemAugmented() if args.item_augment else TensorDataset(x, y), batch_size=args.batch,
                              sampler=sampler, max_local_batch=args.max_local_batch, num_workers=args.loader_workers,
                              steps_per_epoch=args.steps_per_epoch)
scaler = torch.amp.GradScaler("cpu", init_scale=2.0 ** 10, growth_interval=10 ** 6) if args.scaler else None
optimizer_steps = []  # the optimizer's own count (a post hook: dlsched gates step() on accumulated micro-batches)
optimizer.register_step_post_hook(lambda *_: optimizer_steps.append(1))
if args.autoscale:  # --max-local-batch m: accumulate past micro-batches of m (AdaptDL's gradient_accumulation)
    loader.autoscale_batch_size(args.autoscale, local_bsz_bounds=(2, args.max_local_batch or 32),
                                gradient_accumulation=bool(args.max_local_batch))
steps = args.epochs * (len(loader) if args.steps_from_len else -(-args.samples // args.batch))
if args.epoch_schedule:
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)
elif args.warmup_cosine:
    scheduler = torch.optim.lr_scheduler.SequentialLR(optimizer, [
        torch.optim.lr_scheduler.LinearLR(optimizer, start_factor=0.1, total_iters=5),
        torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=steps - 5)], milestones=[5])
else:
    scheduler = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=args.lr, total_steps=steps)

if args.rank_before_loop:
    print(f"before the loop: rank {dt.rank()} of {dt.world_size()}", flush=True)
for epoch in dt.remaining_epochs(args.epochs):
    loader_batches = 0  # what the loader yielded this epoch: micro-batches where it accumulates
    for xb, yb in loader:
        if args.max_steps and loader_batches == args.max_steps:
            break
        loader_batches += 1
        print_rng("begin")
        if not args.zero_grad_last:
            optimizer.zero_grad()
        if SLOW and args.slow_in == "forward":
            time.sleep(args.slow_s)   # a straggler: its batch or its device is slow; its peers wait in backward
        if args.augment:   # numpy's and Python's streams, as an augmentation pipeline draws them
            xb = xb * (1 + 0.1 * random.random()) + 0.05 * torch.from_numpy(np.random.standard_normal(xb.shape)).float()
        out = model(xb).squeeze(1)
        loss = nn.functional.mse_loss(out, yb)
        if scaler is not None:
            scaler.scale(loss).backward()
            scaler.unscale_(optimizer)
            scaler.step(optimizer)
            scaler.update()
        else:
            loss.backward()
            time.sleep(args.backward_s + (args.slow_s if SLOW and args.slow_in == "step" else 0.0))
            optimizer.step()
        if not args.epoch_schedule:
            scheduler.step()
        if args.zero_grad_last:
            optimizer.zero_grad()
        dt.report(loss=loss.item(), **({"lr": scheduler.get_last_lr()[0]} if args.report_lr else {}),
                  **({"train_mae": (out - yb).abs().mean().item()} if args.report_mae else {}))
        print_rng("end")
        if (args.hold_file and loader.accumulating and dt.rank() == 1 and not os.path.exists(args.hold_file)
                and dt.current_session().step + 1 == args.hold_at_step):
            hold(args.hold_file)
        if (args.fail_at_step and dt.rank() == 0 and dt.current_session().step + 1 == args.fail_at_step
                and not os.path.exists(args.fail_once_file)):
            open(args.fail_once_file, "w").close()
            raise RuntimeError(f"a failure in step {args.fail_at_step}")
        if args.step_s and (not args.slow_file or os.path.exists(args.slow_file)):
            time.sleep(args.step_s)
        session = dt.current_session()   # one worker reads the flag as its step's boundary commits it
        if (args.flag_lands_at_epoch_end and epoch == 0 and dt.rank() == 0 and session.table.done
                and not os.path.exists(args.flag_lands_at_epoch_end)):
            open(args.flag_lands_at_epoch_end, "w").close()
            while not session.watch.flag(session.generation):
                time.sleep(0.05)
    if args.eval_all_reduce:   # every rank's share of the data, summed: all ranks of the group must be here
        with torch.no_grad():
            sse = torch.tensor([nn.functional.mse_loss(model(x).squeeze(1), y, reduction="sum").item()])
        torch.distributed.all_reduce(sse)
        dt.report(val_sse=sse.item() / dt.world_size())
    with torch.no_grad():
        state = optimizer.state[next(model.parameters())]  # AdamW's count moves with the job's state
        dt.report(val_mse=nn.functional.mse_loss(model(x).squeeze(1), y).item(), optimizer_steps=len(optimizer_steps),
                  loader_batches=loader_batches, accumulating=float(loader.accumulating),
                  **({"adam_steps": state["step"]} if "step" in state else {}))
    if dt.rank() == 1 and epoch == args.rank1_breaks_at_epoch:
        break
    if args.epoch_schedule:
        scheduler.step()
