"""``ElasticDataParallel``: DistributedDataParallel that survives resizes and measures the gradient noise.

Each generation wraps the module in a fresh DDP on that generation's process group (one worker: no DDP at
all), whose own C++ all-reduce averages the gradients. On a measured sync step (``sync_cadence``: about
every second; every rank knows which) gradient hooks add each local |g|², and the session all-reduces its
step scalars (stop flag, local |g|² sum, compute times...) from the optimizer step on (``step_scalars``), acting on
them at the step boundary; unequal local shares get hooks that weight each rank by its share. The other steps are
plain DDP. On one worker, a measured step (every ``noise_every``-th, else one in about every second, as with
several) runs the batch as two halves
(the first through parameter views whose gradient hooks keep that half's gradient), which gives the same two
batch sizes; the halves also see per-half batch-norm statistics on those steps.
"""
from __future__ import annotations

import time
import weakref
from typing import Any

import torch
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from dlsched.errors import UserError

def _cat(a: Any, b: Any, h: int, n: int) -> Any:
    """The two halves' outputs (h and n - h samples) as the whole batch's. A 0-dim float tensor (a loss the model
    computes itself, a mean over its half) joins as the batch mean; a tensor not batched along dim 0 (an RNN's
    (layers, batch, ...) state) cannot be joined."""
    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
        if a.dim() == 0 and a.is_floating_point():
            return a * (h / n) + b * ((n - h) / n)
        if a.dim() > 0 and a.shape[0] == h and b.shape[0] == n - h and a.shape[1:] == b.shape[1:]:
            return torch.cat([a, b])
    elif isinstance(a, (tuple, list)) and type(a) is type(b) and len(a) == len(b):
        joined = [_cat(x, y, h, n) for x, y in zip(a, b)]
        return type(a)(*joined) if hasattr(a, "_fields") else type(a)(joined)  # a namedtuple takes fields
    elif isinstance(a, dict) and a.keys() == b.keys():
        return {k: _cat(a[k], b[k], h, n) for k in a}
    raise TypeError(f"cannot join model outputs of type {type(a).__name__}")


class _DirectCallGuard:
    """A forward pre-hook on the user's model: a training forward inside a step that bypasses the wrapper
    (``model.module(x)``) would skip DDP's all-reduce, the micro-batch weights and the forward count that keeps
    ``zero_grad`` from clearing an accumulation, so it is refused. A copy of the model (``deepcopy``: an EMA or
    target network) is not the wrapped one and runs freely; a pickled one carries no guard."""

    def __init__(self, wrapper: "ElasticDataParallel | None"):
        self.wrapper = weakref.ref(wrapper) if wrapper is not None else type(None)  # None: guards nothing

    def __call__(self, module: nn.Module, args: tuple) -> None:
        edp = self.wrapper()
        if edp is None or module is not edp.module:
            return
        if edp._inside:   # DDP's own forward collectives (its buffer broadcast) are behind us: see _forward
            object.__setattr__(edp, "_entered", time.perf_counter())
            return
        if module.training and torch.is_grad_enabled() and edp._session.open is not None:
            raise UserError("ElasticDataParallel: model.module(...) was called in a training step; call the wrapper, "
                            "model(...): a direct call skips the gradient all-reduce and accumulation (zero_grad "
                            "would clear the step's micro-batches)")

    def __deepcopy__(self, memo: dict) -> "_DirectCallGuard":
        return self

    def __reduce__(self):
        return type(self), (None,)


def _grad_tensor(out: Any) -> torch.Tensor | None:
    """The first tensor of a model's output that backward passes through (a tensor, or one in a tuple, list or
    dict)."""
    if isinstance(out, torch.Tensor):
        return out if out.requires_grad else None
    values = out.values() if isinstance(out, dict) else out if isinstance(out, (tuple, list)) else ()
    return next((t for t in map(_grad_tensor, values) if t is not None), None)


def time_backward_wait(out: Any, step_open: dict) -> None:
    """Add the time this rank's backward waits for its peers to the step's ``waited`` (the straggler rule reads a
    rank's own time as the step's, less its waits). The gradient all-reduce runs beside the backward and is waited
    for by DDP's callback at its end: a callback queued from the output's gradient hook (backward's first) runs
    before DDP's, when this rank's own gradients are done, and queues one that runs after DDP's wait. Timed to the
    optimizer step, every rank looked as slow as the slowest (its peers wait for it there); timed to the forward's
    end only, a rank slow in backward or its optimizer step was never seen. A sync step's last forward only."""
    tensor = _grad_tensor(out)
    if tensor is None:
        return
    engine = torch.autograd.Variable._execution_engine

    def own_gradients_done() -> None:
        done = time.perf_counter()
        engine.queue_callback(lambda: step_open.__setitem__("waited", step_open["waited"] + time.perf_counter() - done))

    def at_backward(grad: torch.Tensor) -> None:
        if not step_open.get("backward_timed"):   # a second backward through the output (retain_graph) counts once
            step_open["backward_timed"] = True
            engine.queue_callback(own_gradients_done)

    tensor.register_hook(at_backward)


def _halves(x: Any, n: int, h: int) -> tuple[Any, Any]:
    if isinstance(x, torch.Tensor) and x.dim() > 0 and x.shape[0] == n:
        return x[:h], x[h:]
    return x, x


class ElasticDataParallel(nn.Module):
    """Wrap the model once, like DDP; ``module`` is the user's model. ``ddp_kwargs`` go to DDP."""

    def __init__(self, module: nn.Module, noise_every: int | None = None, noise_smoothing: float | None = None,
                 **ddp_kwargs: Any):
        super().__init__()
        from dlsched.torch.session import current_session

        self.module = module
        if noise_every is not None and (not isinstance(noise_every, int) or noise_every < 1):
            raise UserError(f"ElasticDataParallel: noise_every={noise_every!r} must be a positive integer or None")
        self.noise_every = noise_every  # steps between measurements; None: ~NOISE_S apart
        self._splits = True  # False once the model's outputs cannot be joined: one worker then measures nothing
        self._ddp_kwargs = ddp_kwargs
        object.__setattr__(self, "_ddp", None)  # not a submodule: state_dict keys stay the model's
        self._session = current_session()
        if noise_smoothing is not None:
            self._session.noise.smoothing = noise_smoothing
        self._session.models.append(self)
        self._local_sqr: torch.Tensor | None = None  # a measured step's local |g|² sum (the hooks add to it)
        self._weight = 1.0  # the micro-batch's gradient weight: its share of the global batch × workers
        self._hooks: list = []
        self._synced: tuple | None = None  # (|g_B|², GradScaler scale, n, micro-batches): for after the all-reduce
        self._split: tuple | None = None
        self._measured_step = -1
        object.__setattr__(self, "_inside", False)  # in forward: the user's model is called through the wrapper
        object.__setattr__(self, "_entered", 0.0)  # when the user's model's forward began inside DDP's
        module.register_forward_pre_hook(_DirectCallGuard(self))

    # -- generations -----------------------------------------------------------------------------------
    def _wrap(self, world: int) -> None:
        if world == 1:
            object.__setattr__(self, "_ddp", None)
            return
        ddp = DistributedDataParallel(self.module, init_sync=False, **self._ddp_kwargs)  # its C++ all-reduce
        object.__setattr__(self, "_ddp", ddp)

    def _unwrap(self) -> None:
        object.__setattr__(self, "_ddp", None)

    def no_sync(self) -> None:
        # DDP scripts accumulate with it; here the loader must know where an optimizer step ends
        raise UserError("ElasticDataParallel: model.no_sync() is not supported: accumulate with "
                        "ElasticDataLoader(..., max_local_batch=m) instead (docs/porting.md, Gradient accumulation)")

    # -- forward ---------------------------------------------------------------------------------------
    def forward(self, *args: Any, **kwargs: Any) -> Any:
        object.__setattr__(self, "_inside", True)
        try:
            return self._forward(args, kwargs)
        finally:
            object.__setattr__(self, "_inside", False)

    def _forward(self, args: tuple, kwargs: dict) -> Any:
        s = self._session
        training = self.training and torch.is_grad_enabled() and s.open is not None
        micro = s.micro
        if training:
            micro.forwarded = micro.index + 1
        if self._ddp is not None:
            self._arm(s, training, training and s.open["measure"])
            sync = not (training and micro.accumulating)  # DDP.no_sync on the micro-batches before the last
            if self._ddp.require_backward_grad_sync != sync:
                self._ddp.require_backward_grad_sync = sync
            if not training:
                return self._ddp(*args, **kwargs)
            called = time.perf_counter()
            out = self._ddp(*args, **kwargs)
            step_open = s.open
            step_open["waited"] += max(0.0, self._entered - called)   # DDP's buffer broadcast waits for its peers
            if sync and step_open["sync"]:
                time_backward_wait(out, step_open)
            return out
        # one worker syncs every step; its cadence still names a measured step about every NOISE_S
        measuring = training and (s.step % self.noise_every == 0 if self.noise_every else s.open["measure"])
        if training and micro.count > 1:  # accumulated: the micro-batches' own |g|² are the small batch
            self._arm(s, True, measuring)
            return self.module(*args, **kwargs)
        if self._hooks:
            self._arm(s, False, False)
        return self._split_forward(args, kwargs) if measuring and self._splits else self.module(*args, **kwargs)

    def _arm(self, s, training: bool, measure: bool) -> None:
        """Gradient hooks for this step only, and only where it needs them: a measured step adds each local
        (micro-batch) gradient's |g|²; a micro-batch whose share of the global batch differs from an equal
        split's is weighted by it (DDP averages ranks equally; accumulated micro-batches add up). Other
        steps run DDP alone, with no Python on the gradient path."""
        micro = s.micro
        if micro.index == 0 or not training:  # a step's first forward: the last step's hooks go
            if self._hooks:
                for handle in self._hooks:
                    handle.remove()
                self._hooks.clear()
            if self._local_sqr is not None:  # written only when it changes: nn.Module's __setattr__ is slow Python
                self._local_sqr = None
            if not training:
                return
            if measure:  # on the gradients' device: a CPU sum would meet CUDA gradients in the hooks
                self._local_sqr = torch.zeros((), device=next(self.module.parameters()).device)
        weight = micro.size * s.world / s.open["n"]
        if weight != self._weight:
            self._weight = weight
        if not self._hooks and (self._local_sqr is not None or weight != 1.0):
            self._hooks = [p.register_hook(self._on_grad) for p in self.module.parameters() if p.requires_grad]

    def _on_grad(self, grad: torch.Tensor) -> torch.Tensor | None:
        if self._local_sqr is not None:
            flat = grad.reshape(-1)
            self._local_sqr.add_(torch.dot(flat, flat).float())  # no temporary the size of the gradient
        weight = self._weight
        return grad * weight if weight != 1.0 else None

    def _split_forward(self, args: tuple, kwargs: dict) -> Any:
        sizes = [x.shape[0] for x in (*args, *kwargs.values()) if isinstance(x, torch.Tensor) and x.dim() > 0]
        n = self._session.micro.size  # the loader's batch: a sequence-first input's dim 0 is not it
        if n < 2 or not sizes or sizes[0] != n:
            return self.module(*args, **kwargs)
        h = n // 2
        a_args, b_args = zip(*(_halves(x, n, h) for x in args)) if args else ((), ())
        a_kw = {k: _halves(v, n, h)[0] for k, v in kwargs.items()}
        b_kw = {k: _halves(v, n, h)[1] for k, v in kwargs.items()}
        params = {k: p for k, p in self.module.named_parameters() if p.requires_grad}
        views = {k: p.view_as(p) for k, p in params.items()}
        grads: dict[str, torch.Tensor] = {}
        for k, v in views.items():
            v.register_hook(lambda g, k=k: grads.__setitem__(k, g))
        out_a = torch.func.functional_call(self.module, views, tuple(a_args), a_kw, strict=False)
        out_b = self.module(*b_args, **b_kw)
        try:
            out = _cat(out_a, out_b, h, n)
        except TypeError:
            self._splits = False  # outputs it cannot join: this model is not measured on one worker
            return self.module(*args, **kwargs)
        self._split = (grads, params, n, h, self._scale())
        return out

    # -- measurement -----------------------------------------------------------------------------------
    def _scale(self) -> float:
        scalers = [o for o in self._session.objects.values() if isinstance(o, torch.amp.GradScaler)]
        return float(scalers[0].get_scale()) if scalers and scalers[0].is_enabled() else 1.0

    def _measure_before_step(self, s) -> None:
        """Once per step, with the averaged (and unscaled) gradients in ``p.grad``: feed the noise estimate."""
        if self._local_sqr is None and self._split is None:
            return   # not a measured step: skip the gradient norm (a device sync) nobody would use
        if self._measured_step == s.step:
            return
        self._measured_step = s.step
        grads = [p.grad for p in self.module.parameters() if p.grad is not None]
        if not grads:
            return
        total_sqr = float(sum(torch.dot(g.reshape(-1), g.reshape(-1)) for g in grads))
        n, count = s.open["n"], s.micro.count
        if self._ddp is not None:
            self._synced = (total_sqr, self._scale(), n, count)  # the local |g|² sum arrives with the all-reduce
        elif self._split is None:  # one worker, accumulated: k micro-batches of about n/k samples
            s.noise.update(float(self._local_sqr) / count / self._scale() ** 2, n / count, total_sqr, n)
        else:
            half_grads, params, n, h, scale = self._split
            self._split = None
            if len(half_grads) != len(params):
                return
            a_sqr = b_sqr = 0.0
            for k, p in params.items():
                part = half_grads[k].float() / scale  # the first half's share of the batch-mean gradient
                a_sqr += float((part * (n / h)).pow(2).sum())
                b_sqr += float(((p.grad.float() - part) * (n / (n - h))).pow(2).sum())
            s.noise.update((a_sqr + b_sqr) / 2, n / 2, total_sqr, n)

    def _after_sync(self, s, reduced: list[float]) -> None:
        """A sync step's all-reduced scalars are in: feed the noise estimate (several workers). Each rank's
        local sum covers its micro-batches, so the small batch is one micro-batch (AdaptDL's count)."""
        if self._synced is None:
            return
        (total_sqr, scale, n, count), self._synced = self._synced, None
        replicas = s.world * count
        s.noise.update(reduced[1] / replicas / scale ** 2, n / replicas, total_sqr, n)
