"""The contract between drivers (simulator, live service) and scheduling policies.

Policies are pure functions of immutable snapshots: ``decide(jobs, cluster) -> Allocation``.
No clock, no I/O, no randomness that is not seeded from the inputs. The drivers build the
snapshots; the same policy object therefore runs unchanged in ``sim/`` and ``service/``.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Callable, Mapping, Protocol, runtime_checkable


@runtime_checkable
class ThroughputModel(Protocol):
    """What a policy may ask about a job's speed. Implemented by ``perf/`` models and trace profiles.

    ``throughput`` is in samples/s for the whole job; ``efficiency`` is the statistical
    efficiency of a global batch size in (0, 1] (1.0 where the job does not model it).
    """

    def throughput(self, num_gpus: int, num_nodes: int, global_batch: int, gpu_type: str | None = None) -> float: ...

    def efficiency(self, global_batch: int) -> float: ...


@dataclass(frozen=True)
class NodeView:
    name: str
    num_gpus: int
    gpu_type: str = "generic"
    num_cpus: int = 0


FINISHED_SHOWN = 1000   # the newest finished jobs a driver shows its policy (``ClusterView.finished``)


@dataclass(frozen=True)
class ClusterView:
    """The cluster as the driver sees it at decision time. ``now`` is supplied by the driver."""

    nodes: tuple[NodeView, ...]
    now: float = 0.0
    # jobs that finished, as last seen (oldest first): what a policy without remaining work may learn job sizes
    # from (``policy/gittins.py``), the newest FINISHED_SHOWN. Every driver fills it (the simulator, the live service and
    # its forecast: ``service/finished_jobs.py``); with none yet, such policies age jobs instead.
    finished: tuple["JobView", ...] = field(default=(), compare=False, repr=False)

    @property
    def total_gpus(self) -> int:
        return sum(n.num_gpus for n in self.nodes)

    @property
    def gpu_types(self) -> tuple[str, ...]:
        return tuple(sorted({n.gpu_type for n in self.nodes}))

    def node(self, name: str) -> NodeView:
        for n in self.nodes:
            if n.name == name:
                return n
        raise KeyError(f"unknown node {name!r}")

    @staticmethod
    def homogeneous(num_nodes: int, gpus_per_node: int, gpu_type: str = "generic", now: float = 0.0) -> "ClusterView":
        return ClusterView(tuple(NodeView(f"node{i}", gpus_per_node, gpu_type) for i in range(num_nodes)), now)


def _frozen(m: Mapping | None) -> Mapping:
    return MappingProxyType(dict(m or {}))


@dataclass(frozen=True)
class JobView:
    """One job as a policy sees it.

    Units: time in seconds, work in samples (``remaining_samples``), GPU service in GPU-seconds.
    Fields a driver cannot know are ``None``; policies must say what they need.
    """

    id: str
    submit_time: float
    requested_gpus: int
    batch_size: int | None = None            # the user's (rigid) global batch size
    min_batch_size: int | None = None        # elastic range [min, max] of the global batch
    max_batch_size: int | None = None
    max_local_batch: int | None = None       # per-GPU memory limit
    min_local_batch: int | None = None  # smallest per-GPU batch the job was profiled with
    max_gpus: int | None = None
    min_gpus: int = 1
    attained_service: float = 0.0            # GPU-seconds consumed so far (Tiresias / LAS)
    run_time: float = 0.0                    # wall seconds it has held GPUs
    placement: Mapping[str, int] = field(default_factory=dict)   # node -> GPUs it holds now
    current_batch_size: int | None = None
    remaining_samples: float | None = None   # predicted or oracle work left
    speed: ThroughputModel | None = None
    kind: str = "train"                      # "train" | "ensemble"
    preemptible: bool = True
    attrs: Mapping[str, object] = field(default_factory=dict)   # policy-specific extras, read-only
    # GPUs held now, summed once: policies sort thousands of queued views by it every round (a Philly trace
    # on an overloaded cluster spent a fifth of its time re-summing placements)
    num_gpus: int = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "placement", _frozen(self.placement))
        object.__setattr__(self, "attrs", _frozen(self.attrs))
        object.__setattr__(self, "num_gpus", sum(self.placement.values()))

    @property
    def is_running(self) -> bool:
        return self.num_gpus > 0

    @property
    def kept_batch(self) -> int | None:
        """The global batch the job runs at where a policy chooses none (``JobAllocation.batch_size`` None): its
        current one while its batch range [``min_batch_size``, ``max_batch_size``] admits it, else ``batch_size``,
        the batch it asks for (an operator's held batch narrows the range to itself: ``dlsched resize --batch``)."""
        cur, lo, hi = self.current_batch_size, self.min_batch_size, self.max_batch_size
        if cur is not None and (lo is None or cur >= lo) and (hi is None or cur <= hi):
            return cur
        if self.batch_size is not None or cur is None:
            return self.batch_size
        return min(max(cur, lo if lo is not None else cur), hi if hi is not None else cur)


@dataclass(frozen=True)
class JobAllocation:
    """What one job gets: a GPU count, optionally a batch size, a GPU type and an explicit node map."""

    num_gpus: int
    batch_size: int | None = None
    gpu_type: str | None = None
    nodes: Mapping[str, int] | None = None   # set when the policy places itself
    servers: int | None = None               # parameter-server jobs: how many of num_gpus run servers

    def __post_init__(self) -> None:
        if self.num_gpus < 0:
            raise ValueError(f"num_gpus must be >= 0, got {self.num_gpus}")
        if self.servers is not None and not 0 < self.servers < max(self.num_gpus, 1):
            raise ValueError(f"servers={self.servers} must leave at least one of num_gpus={self.num_gpus} to workers")
        if self.nodes is not None:
            object.__setattr__(self, "nodes", _frozen(self.nodes))
            if sum(self.nodes.values()) != self.num_gpus:
                raise ValueError(f"nodes {dict(self.nodes)} do not add up to num_gpus={self.num_gpus}")


@dataclass(frozen=True)
class Allocation:
    """A policy's decision: job id -> JobAllocation. Jobs absent (or with 0 GPUs) wait."""

    jobs: Mapping[str, JobAllocation] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "jobs", _frozen(self.jobs))

    def gpus(self, job_id: str) -> int:
        a = self.jobs.get(job_id)
        return a.num_gpus if a else 0

    @property
    def total_gpus(self) -> int:
        return sum(a.num_gpus for a in self.jobs.values())


class Policy(Protocol):
    """A scheduling policy. ``name`` is its registry key. Policies subclass this to inherit the defaults below,
    which every driver reads directly (``dlsched.round``)."""

    name: str
    rigid: bool = False          # everyone fits -> everyone gets exactly their request, running jobs keep nodes
    event_driven: bool = False   # the decision changes only when a job arrives or finishes
    # a job that arrives while another waits changes no decision: it queues behind (strict FIFO)
    arrival_queues_behind: bool = False
    resize_in_place: bool = True  # a resized job keeps the GPUs it holds (placement.resized); False: placed afresh
    placement: Callable | None = None  # (GPUs, free per node) -> node map for jobs it does not place; None: the driver's
    places_own: bool = False     # decide() names the nodes of every job it runs: a driver's placement has no effect
    # what it does with a job that is not an ensemble, when that is not what the job asks (a comparison says it)
    ordinary_jobs: str | None = None
    reads_remaining: bool = True  # decide() reads JobView.remaining_samples (a comparison says when it does not)

    def decide(self, jobs: tuple[JobView, ...], cluster: ClusterView) -> Allocation: ...

    def queue_window_gpus(self, cluster: ClusterView) -> int | None:
        """The queued jobs a decision can depend on, besides every running one: in submission order, those asking
        for at most this many GPUs together, and the next; None (the default): every queued job. A driver may pass
        only those (the simulator does)."""
        return None

    def validate(self, job: JobView, cluster: ClusterView) -> None:
        """Submit-time check: raise UserError (one line: job, field, value) if ``job`` can never run here."""


_REGISTRY: dict[str, Callable[..., Policy]] = {}


def register(name: str) -> Callable:
    """Class/factory decorator: ``@register("fifo")`` makes ``--policy fifo`` work everywhere."""

    def deco(factory: Callable[..., Policy]) -> Callable[..., Policy]:
        if name in _REGISTRY:
            raise ValueError(f"policy {name!r} registered twice")
        _REGISTRY[name] = factory
        return factory

    return deco


def policy_names() -> list[str]:
    _load_builtin()
    return sorted(_REGISTRY)


def policy_is_rigid(name: str) -> bool:
    """Whether the policy registered as ``name`` runs every job at its request (never inside a GPU range)."""
    _load_builtin()
    return bool(getattr(_REGISTRY.get(name), "rigid", False))


def make_policy(name: str, **kwargs) -> Policy:
    _load_builtin()
    try:
        factory = _REGISTRY[name]
    except KeyError:
        raise ValueError(f"unknown policy {name!r}; known: {', '.join(sorted(_REGISTRY))}") from None
    return factory(**kwargs)


def _load_builtin() -> None:
    """Import every policy module shipped beside this one so they self-register."""
    import importlib
    import pkgutil
    from pathlib import Path

    for mod in pkgutil.iter_modules([str(Path(__file__).parent)]):
        if mod.name != "base":
            importlib.import_module(f"dlsched.policy.{mod.name}")
