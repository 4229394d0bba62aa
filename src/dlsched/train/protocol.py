"""The runtime protocol, defined once: the coordinator <-> worker records in the job's TCPStore, and the job
folder's files (control.json in; progress.jsonl and status.json out). Prose and examples: ``docs/runtime.md``.

Store records are frozen dataclasses with ``to_json``/``from_json``; store keys are functions of the
generation or worker. Job-folder records are pydantic models, so their JSON schemas come from one place
(``python -m dlsched.train.protocol`` prints them).
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

# -- store keys -------------------------------------------------------------------------------------------
SCRIPT_JOB = "script"  # the job name in a user script's checkpoints
PROGRESS_QUEUE = "progress"  # rank 0 pushes step records and events; the coordinator drains them in order
STOP_RESIZE, STOP_PREEMPT = "1", "2"  # values of stop_key(g): regroup after this step / checkpoint and leave
GATE_RUN, GATE_CANCEL = "run", "cancel"  # the first to set gate_key(g) decides whether the generation trains


def plan_key(generation: int) -> str:
    return f"plan/{generation}"


def end_key(generation: int) -> str:
    return f"end/{generation}"


def stop_key(generation: int) -> str:
    return f"stop/{generation}"


def gate_key(generation: int) -> str:
    return f"gate/{generation}"


def arrived_key(generation: int) -> str:
    return f"arrived/{generation}"


def ready_key(worker_id: int) -> str:
    return f"ready/{worker_id}"


def survivor_key(generation: int, worker_id: int) -> str:
    """Where a worker whose peer died mid-step reports the state it holds (``Held``)."""
    return f"survivor/{generation}/{worker_id}"


def lost_key(generation: int) -> str:
    """The node IPs of the peers the coordinator declared lost, for the survivors to cut (``peer_cut``)."""
    return f"lost/{generation}"


def group_prefix(generation: int) -> str:
    """Prefix of the c10d process group's own keys for a generation."""
    return f"pg/{generation}"


class _Json:
    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, raw: bytes | str):
        return cls(**json.loads(raw))


@dataclass(frozen=True)
class Plan(_Json):
    """What one generation trains: its workers (rank = index), where it starts and with which batches.

    ``table``: the partition table snapshot (``dlsched.train.data``), None = the script builds a fresh one.
    ``restore``: checkpoint to load (after a worker loss or a move), None = rank 0 broadcasts its memory.
    ``carried``: the state lives only in memory, so a cancelled generation must checkpoint it.
    ``local_batches``: per-rank batches, None = the script's own batch size (no request from the scheduler).
    ``reference_batch``: the global batch at which the job's LR is given (None = the script's batch).
    """

    generation: int
    wids: list[int]
    step: int
    table: dict | None
    local_batches: list[int] | None
    ramp: dict | None  # ``dlsched.train.scaling.LrRamp`` fields
    epoch_loss: list[float]
    restore: str | None
    carried: bool
    devices: list[str]
    ckpt_every: int
    record_samples: bool
    reference_batch: int | None = None
    run: str | None = None  # the coordinator run: tells its steps from a resumed run's (same generations)
    checkpoint_uri: str | None = None  # where rank 0 saves (``dlsched.train.storage``); None = the job folder's ckpt/


@dataclass(frozen=True)
class Held(_Json):
    """What a worker holds after its collective failed (a peer died): the last committed step's state. The
    survivors all hold the same one, or the coordinator recovers from the checkpoint instead."""

    step: int
    table: dict
    epoch_loss: list[float]
    lr: float
    error: str = ""


@dataclass(frozen=True)
class End(_Json):
    """How a generation ended, written by its rank 0.

    ``finished``: the job is done. ``preempted``: stopped with a checkpoint. Otherwise a stop-free resize:
    ``table``/``epoch_loss``/``lr`` carry the state the next plan continues from."""

    finished: bool
    step: int
    preempted: bool = False
    cancelled: bool = False
    table: dict | None = None
    epoch_loss: list[float] | None = None
    lr: float | None = None


@dataclass(frozen=True)
class Ready(_Json):
    """A worker built its model and waits for a plan naming it; what it really sees, for status.json."""

    cuda_visible_devices: str | None = None


# -- job folder -------------------------------------------------------------------------------------------
class _Record(BaseModel):
    model_config = ConfigDict(extra="allow")


class Control(_Record):
    """DIR/control.json, written by the backend: a level, not a queue; a higher generation is applied."""

    model_config = ConfigDict(extra="forbid")
    workers: int
    batch_size: int | None = None
    generation: int
    devices: list[str] | None = None


class Status(_Record):
    """DIR/status.json, written by the coordinator (``killed``: by the service, for one that died saying ``running``)."""

    state: Literal["running", "finished", "failed", "stopped", "killed"]
    pid: int
    workers: int
    error: str | None = None
    generation: int | None = None
    worker_pids: list[int] = []
    standby_ready: int = 0
    devices: list[str] = []
    worker_devices: list[str | None] = []


class GradientNoiseRecord(BaseModel):
    """EMA gradient statistics at the job's reference batch (Pollux's ``grad_sqr``/``grad_var``)."""

    sqr: float
    var: float
    reference_batch: int


class StepRecord(_Record):
    """One line of DIR/progress.jsonl per optimizer step (extra fields: the user's ``report()`` metrics).

    ``samples`` counts samples trained in all epochs so far; ``total_samples`` is the job's budget
    (samples per epoch x epochs; once a script's loop cut an epoch short, each later epoch as long), null when it may
    end sooner; ``lr`` is the LR the step used, ``lr_factor`` the LR
    rule's factor for its batch (``lr`` over it: the schedule's LR); ``grad_noise`` is null when the job measures
    none; ``control_generation`` is the control.json request the group that took the step was formed for (-1: none
    yet; absent from runtimes that do not say): a group that trains on while a newer request's newcomers prepare
    tags the older one, so a step under a request proves the group that answers it trains, on its slots and at its
    size."""

    time: float
    step: int
    epoch: int
    generation: int
    samples: int
    loss: float | None = None
    samples_per_s: float
    workers: int
    batch_size: int
    lr: float | None = None
    lr_factor: float | None = None
    per_worker_samples_per_s: list[float] = []
    partition_offsets: list[int] | None = None
    total_samples: int | None = None
    epochs: int | None = None
    grad_noise: GradientNoiseRecord | None = None
    metrics: dict[str, float] = {}
    control_generation: int | None = None


EVENTS = ("resized", "checkpoint", "worker_lost", "straggler", "epoch_end", "finished", "stopped", "resize_failed",
          "control_rejected", "resize_abandoned", "metrics", "lr_rule",
          "profiled", "flotillas", "member_converged",   # these three: a FLEET ensemble (train/fleet_job.py)
          "checkpoint_skipped", "resumed", "shrunk",     # a torn checkpoint, a restart, a group shrunk past a loss
          "batch_size", "servers_changed",               # dlsched.torch's adaptive batch, a ps job's servers
          "rejoined",                                    # a shrunk group grown back into the slots it still held
          "progress_line_skipped",                       # a resume passed over a damaged progress.jsonl line
          "progress_segment")                            # a rotated log's live file's first line (train/progress_log.py)


class EventRecord(_Record):
    """Any other line of DIR/progress.jsonl; the fields of each event are listed in docs/runtime.md."""

    event: Literal[EVENTS]  # type: ignore[valid-type]
    time: float | None = None


def is_step(record: dict[str, Any]) -> bool:
    return "event" not in record


def json_schemas() -> dict[str, Any]:
    return {m.__name__: m.model_json_schema() for m in (Control, Status, StepRecord, EventRecord)}


WORKER_ENV = {"store": "DLSCHED_STORE", "worker_id": "DLSCHED_WORKER_ID", "generation": "DLSCHED_GENERATION",
              "job_dir": "DLSCHED_JOB_DIR", "threads": "DLSCHED_THREADS", "max_local_batch": "DLSCHED_MAX_LOCAL_BATCH",
              "reference_batch": "DLSCHED_REFERENCE_BATCH", "joining": "DLSCHED_JOINING"}


@dataclass(frozen=True)
class WorkerEnv:
    """What a script worker gets from the coordinator in its environment (read by ``dlsched.torch.init``)."""

    store: str
    worker_id: int
    generation: int
    job_dir: str
    threads: int = 0
    # the spec's max_local_batch: ElasticDataLoader's default (the loader needs it before the first plan)
    max_local_batch: int | None = None
    # the batch the LR is given at (--reference-batch-size; None: the loader's): len(loader) before the first plan
    reference_batch: int | None = None
    # a newcomer to a running group: its generation's plan is published only once it is ready (in the loop)
    joining: bool = False

    def as_env(self) -> dict[str, str]:
        values = {**{k: getattr(self, k) for k in WORKER_ENV}, "joining": "1" if self.joining else None}
        return {name: "" if values[k] is None else str(values[k]) for k, name in WORKER_ENV.items()}

    @classmethod
    def from_env(cls, env) -> "WorkerEnv | None":
        """None outside the scheduler: the script then runs standalone with one worker."""
        if WORKER_ENV["store"] not in env:
            return None
        max_local = env.get(WORKER_ENV["max_local_batch"])
        reference = env.get(WORKER_ENV["reference_batch"])
        return cls(env[WORKER_ENV["store"]], int(env[WORKER_ENV["worker_id"]]), int(env[WORKER_ENV["generation"]]),
                   env[WORKER_ENV["job_dir"]], int(env.get(WORKER_ENV["threads"], "0")),
                   int(max_local) if max_local else None, int(reference) if reference else None,
                   env.get(WORKER_ENV["joining"]) == "1")


if __name__ == "__main__":
    print(json.dumps(json_schemas(), indent=2))
