"""Validated user input: a job specification and a cluster declaration.

Both arrive as YAML or JSON (files, the REST API) and are the only way user text enters the scheduler,
so they are strict: unknown fields, wrong types (``"4"`` for 4, ``true`` for 1), negative or absurdly large
numbers are refused with ONE line naming the source, the field and the value. Bounds are generous for a
real cluster and tight enough that a typo cannot make the scheduler allocate a billion GPUs.
"""
from __future__ import annotations

import difflib
import math
import re
import reprlib
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import (BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, field_validator,
                      model_validator)

from dlsched.documents import MAX_DOCUMENT_BYTES, DocumentError, load_document
from dlsched.errors import UserError

MAX_GPUS = 4096
MAX_BATCH = 1 << 24
MAX_SAMPLES = 10**15
MAX_PARAMS = 64
MAX_SPEC_BYTES = MAX_DOCUMENT_BYTES

NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$"
# path/to/file.py:make_job or package.module:make_job; no spaces, no shell metacharacters
_ENTRY = r"^[A-Za-z0-9_./-]{1,400}:[A-Za-z_][A-Za-z0-9_]{0,99}$"
_PARAM_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")

Gpus = Annotated[int, Field(ge=1, le=MAX_GPUS)]
Batch = Annotated[int, Field(ge=1, le=MAX_BATCH)]
ParamValue = Any   # checked by _check_params: bool, int, float or short str


def _check_params(v: dict[str, Any]) -> dict[str, Any]:
    """Params go to ``make_job(**params)`` and onto a command line: scalars only, bounded."""
    if len(v) > MAX_PARAMS:
        raise ValueError(f"at most {MAX_PARAMS} params, got {len(v)}")
    for k, x in v.items():
        if not _PARAM_KEY.match(k):
            raise ValueError(f"param name {k[:40]!r} is not an identifier")
        if not isinstance(x, (bool, int, float, str)):
            raise ValueError(f"param {k} must be a number, bool or string, got {type(x).__name__}")
        if isinstance(x, int) and not isinstance(x, bool) and abs(x) > MAX_SAMPLES:
            raise ValueError(f"param {k}={x} is out of range (|x| <= {MAX_SAMPLES})")
        if isinstance(x, float) and not math.isfinite(x):
            raise ValueError(f"param {k}={x} is not finite")
        if isinstance(x, str) and (len(x) > 256 or any(c in x for c in "\x00\n\r")):
            raise ValueError(f"param {k} must be a single-line string of <= 256 characters")
    if "regime" in v:   # the service reads it (the curve prior's pool): a typo must not pass for scratch
        _check_regime(v["regime"], "param regime")
    return v


def _check_regime(value: Any, what: str) -> None:
    from dlsched.perf.prior import REGIMES

    if value not in REGIMES:
        raise ValueError(f"{what} must be one of {', '.join(REGIMES)}, got {value!r}")


class SpecError(UserError):
    """A job or cluster specification that does not validate (one line)."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True, allow_inf_nan=False)


class AutoscaleSpec(_Strict):
    """Or et al.'s engine (``train/autoscale_engine``) for a job that sizes itself (``dlsched train --spec``)."""

    every_steps: Annotated[int, Field(ge=1, le=1_000_000)] = 20
    spawn_size: Annotated[int, Field(ge=1, le=MAX_GPUS)] = 1
    max_workers: Gpus = 8
    threshold: Annotated[float, Field(ge=0, le=1)] = 0.1
    price_per_worker_hour: Annotated[float, Field(ge=0, le=1e9)] = 1.0
    utility_value: Annotated[float, Field(gt=0, le=1e12)] | None = None   # linear utility: worth this now ...
    utility_seconds: Annotated[float, Field(gt=0, le=1e9)] | None = None  # ... and 0 at this many seconds

    @model_validator(mode="after")
    def _utility_pair(self) -> "AutoscaleSpec":
        if (self.utility_value is None) != (self.utility_seconds is None):
            raise ValueError("utility_value and utility_seconds go together")
        return self


# An accuracy target above 1 is a percentage (93: 93 %, on fraction or % data alike); one under this many % is
# more likely a slip (1.5 for 0.15, 9.3 for 93) than a target: read as 1.5 %, it was "already reached" on any log
# in fractions. Such a target is given as a fraction (0.015), which reads the same on either scale.
LOWEST_PERCENT_TARGET = 10.0


def accuracy_target_slip(value: float, top: float | None = None) -> str | None:
    """Why an accuracy target ``value`` is refused (None: it is not) on data whose scale ``top`` is 100 (in %: its
    own units, taken as given), 1 (fractions) or None (not known yet: a job's, before its first report)."""
    if top == 100.0 or not 1.0 < value < LOWEST_PERCENT_TARGET:
        return None
    return (f"an accuracy target above 1 is read as a percentage ({value:g} %), and one under "
            f"{LOWEST_PERCENT_TARGET:g} % is more likely a slip: give {value / 100:g} for {value:g} %, "
            f"or a fraction such as 0.93")


class MetricTarget(_Strict):
    """A value of a metric the script reports (``dlsched.torch``'s ``report``: after each evaluation, or inside every
    step) that the service predicts the time to, from the schedule-aware fit of that metric's points."""

    metric: Annotated[str, Field(pattern=NAME_PATTERN)]   # the name it reports, e.g. val_accuracy
    # before value: value's range depends on it (a field validator sees only the fields above it)
    kind: Literal["loss", "error", "accuracy"]             # accuracy: higher is better, 0-1 or %
    value: float

    @field_validator("value")
    @classmethod
    def _value_in_range(cls, v: float, info: ValidationInfo) -> float:
        """An accuracy lies in 0-1 (a fraction) or 0-100 (%); a loss or an error the fit can reach is above 0 (the
        curve models work in log space: 0 is never reached, and below it is no loss at all)."""
        kind = info.data.get("kind")
        if kind == "accuracy" and not 0.0 <= v <= 100.0:
            raise ValueError("an accuracy target must lie in 0-1 (a fraction) or 0-100 (%)")
        # only where it is stated (a stored job's spec is read back as it was accepted)
        if kind == "accuracy" and (info.context or {}).get("stated") and (why := accuracy_target_slip(v)):
            raise ValueError(why)
        if kind in ("loss", "error") and not v > 0.0:
            raise ValueError(f"{'a loss' if kind == 'loss' else 'an error'} target must be > 0")
        return v


class PredictionFacts(_Strict):
    """What the service's predictions know of a run beyond the progress it reports (``service.job_models``):
    any job may state them, and a command job, which takes no params, only here. An entry job's params of
    the same names are read where this leaves one out."""

    # the LR schedule over the run in its steps (``dlsched predict curve --schedule``'s SPEC); else the LR
    # the runtime logs (and plans, ``dlsched.torch``)
    schedule: Annotated[str, Field(min_length=1, max_length=400)] | None = None
    # the predicted time to reach this loss (the run's own rule ends it); > 0, as ``predict --target-loss``
    target_loss: Annotated[float, Field(gt=0)] | None = None
    target: MetricTarget | None = None   # and to this value of a reported metric (an accuracy, ...)
    dataset: Annotated[str, Field(pattern=NAME_PATTERN)] | None = None   # finished runs of the same task
    depth: Annotated[int, Field(ge=1, le=100_000)] | None = None         # lead a new run's prior
    regime: str | None = None            # the shipped prior's pool (``perf.prior.REGIMES``)

    @field_validator("schedule")
    @classmethod
    def _schedule_ok(cls, v: str | None) -> str | None:
        from dlsched.perf.schedule import parse_schedule

        if v is not None and v.strip() == "lr-column":
            raise ValueError("lr-column is what a job without a schedule gets (the LR its runtime logs): leave "
                             "schedule out")
        if v is not None:
            parse_schedule(v, 1e15)   # the grammar; a warm-up past the budget is only known once it is
        return v

    @field_validator("regime")
    @classmethod
    def _regime_ok(cls, v: str | None) -> str | None:
        if v is not None:
            _check_regime(v, "regime")
        return v


class JobSpec(_Strict):
    """One training job as a user submits it.

    ``gpus`` is the rigid request; a job is elastic when ``max_gpus`` > ``min_gpus`` or when it gives a
    batch-size range, and the policy may then choose any count / batch inside the ranges.
    """

    name: Annotated[str, Field(pattern=NAME_PATTERN)]
    entry: Annotated[str, Field(pattern=_ENTRY)] | None = None
    # or the user's own dlsched.torch script, run like `python train.py --epochs 10` on every worker
    command: Annotated[list[Annotated[str, Field(min_length=1, max_length=400, pattern=r"^[^\x00\n\r]*$")]],
                       Field(min_length=1, max_length=MAX_PARAMS)] | None = None
    gpus: Gpus = 1
    min_gpus: Gpus | None = None
    max_gpus: Gpus | None = None
    batch_size: Batch | None = None
    min_batch_size: Batch | None = None
    max_batch_size: Batch | None = None
    max_local_batch: Batch | None = None
    params: dict[str, ParamValue] = Field(default_factory=dict)
    kind: Literal["train", "ensemble"] = "train"
    preemptible: bool = True
    # optional hint for predictions when the runtime does not report its total work
    total_samples: Annotated[int, Field(ge=1, le=MAX_SAMPLES)] | None = None
    user: Annotated[str, Field(pattern=NAME_PATTERN)] | None = None
    # training mode (Langer et al.'s optimisation and scheduling dimensions): all-reduce, or a parameter server
    # whose ``servers`` count against ``gpus`` (slots), updating synchronously, with SSP slack, or asynchronously
    strategy: Literal["allreduce", "ps"] = "allreduce"
    servers: Annotated[int, Field(ge=1, le=MAX_GPUS)] | None = None
    sync: Annotated[str, Field(pattern=r"^(sync|async|ssp:[0-9]{1,4})$")] = "sync"
    sparse: bool = False  # ps: push/pull only the embedding rows each batch reads
    autoscale: AutoscaleSpec | None = None
    # where checkpoints live: a path or fsspec URI (dlsched.train.storage); None = the job folder's ckpt/
    # not "-...": the runtime is given it as an argument, and "--entry=x" there is an option (the job failed to start)
    checkpoint_uri: Annotated[str, Field(min_length=1, max_length=1000,
                                         pattern=r"^[^\x00\n\r-][^\x00\n\r]*$")] | None = None
    prediction: PredictionFacts | None = None

    @field_validator("params")
    @classmethod
    def _params_ok(cls, v: dict[str, Any]) -> dict[str, Any]:
        target = v.get("target_loss")   # the service reads it as prediction.target_loss where that is not given
        if isinstance(target, (int, float)) and not isinstance(target, bool) and not target > 0:
            raise ValueError(f"param target_loss={target} must be > 0 (as prediction.target_loss)")
        return _check_params(v)

    @model_validator(mode="after")
    def _ranges_ok(self) -> "JobSpec":
        if (self.entry is None) == (self.command is None):
            raise ValueError("give exactly one of entry (file.py:make_job) and command (e.g. [python, train.py])")
        if self.command is not None and (self.params or self.strategy != "allreduce" or self.kind != "train"):
            raise ValueError("a command job takes its own arguments in command: no params, strategy ps or kind")
        lo, hi = self.gpu_range
        # an inverted range said "gpus=3 must lie in [min_gpus=3, max_gpus=1]", of a gpus the user never gave
        if self.min_gpus is not None and self.max_gpus is not None and lo > hi:
            raise ValueError(f"min_gpus={lo} > max_gpus={hi}")
        if not lo <= self.gpus <= hi:   # the bound given, not one derived from gpus itself
            raise ValueError(f"gpus={self.gpus} is above max_gpus={hi}" if self.gpus > hi and self.min_gpus is None else
                             f"gpus={self.gpus} is below min_gpus={lo}" if self.max_gpus is None else
                             f"gpus={self.gpus} must lie in [min_gpus={lo}, max_gpus={hi}]")
        if self.strategy == "allreduce" and (self.servers is not None or self.sync != "sync" or self.sparse):
            raise ValueError("servers, sync and sparse are parameter-server fields: set strategy: ps")
        if self.checkpoint_uri is not None and (self.strategy != "allreduce" or self.kind != "train"):
            raise ValueError(f"checkpoint_uri={self.checkpoint_uri!r}: only an all-reduce training job takes one "
                             "(ps and ensemble jobs keep checkpoints in the job folder)")
        if self.autoscale is not None and self.strategy != "allreduce":
            raise ValueError("autoscale sizes all-reduce jobs (Or et al.'s engine): strategy must be allreduce")
        if self.strategy == "ps" and lo <= self.num_servers:
            raise ValueError(f"servers={self.num_servers} count against the GPUs: min_gpus/gpus={lo} must exceed it "
                             "to leave a worker")
        blo, bhi = self.min_batch_size, self.max_batch_size
        if (blo is None) != (bhi is None):
            raise ValueError("min_batch_size and max_batch_size go together")
        if blo is not None and bhi is not None:
            if blo > bhi:
                raise ValueError(f"min_batch_size={blo} > max_batch_size={bhi}")
            if self.batch_size is not None and not blo <= self.batch_size <= bhi:
                raise ValueError(f"batch_size={self.batch_size} must lie in [{blo}, {bhi}]")
        return self

    @property
    def gpu_range(self) -> tuple[int, int]:
        lo = self.min_gpus if self.min_gpus is not None else self.gpus
        hi = self.max_gpus if self.max_gpus is not None else self.gpus
        return lo, hi

    @property
    def num_servers(self) -> int:
        """Parameter servers of a ps job (default 1), 0 for all-reduce."""
        return 0 if self.strategy == "allreduce" else (self.servers or 1)

    @property
    def elastic(self) -> bool:
        lo, hi = self.gpu_range
        return hi > lo or self.min_batch_size is not None


class NodeSpec(_Strict):
    """A node; on the local backend ``gpus`` are GPU *slots* (one worker process each), so CPU-only machines work."""

    name: Annotated[str, Field(pattern=NAME_PATTERN)]
    gpus: Annotated[int, Field(ge=0, le=1024)]
    gpu_type: Annotated[str, Field(pattern=NAME_PATTERN)] = "slot"
    cpus: Annotated[int, Field(ge=0, le=100_000)] = 0


class ClusterSpec(_Strict):
    """What the service schedules onto, and how."""

    nodes: Annotated[list[NodeSpec], Field(min_length=1, max_length=10_000)]
    policy: Annotated[str, Field(pattern=NAME_PATTERN)] = "fifo"
    policy_args: dict[str, ParamValue] = Field(default_factory=dict)
    interval_s: Annotated[float, Field(ge=0.05, le=3600)] = 2.0
    # a grow not done by then is given up (service/resize_deadline.py): model building and data loading included
    resize_timeout_s: Annotated[float, Field(gt=0, le=86_400)] = 600.0
    # seconds a running job may make no progress before the service marks it stalled (service/stalls.py)
    stall_after_s: Annotated[float, Field(gt=0, le=86_400)] = 600.0
    # the same before a job's first step since it started or resumed (a model built, data loaded, a checkpoint read)
    first_step_after_s: Annotated[float, Field(gt=0, le=86_400)] = 3600.0
    # days an ended job keeps its step rows, events and predictions (service/retention.py); None: for good
    retain_ended_days: Annotated[float, Field(gt=0, le=36_500)] | None = None
    # days an active job's rotated progress.jsonl segments stay once stored (service/progress_segments.py); None: for good
    progress_keep_days: Annotated[float, Field(ge=0, le=36_500)] | None = 7.0
    backend: Literal["local", "ray"] = "local"

    @field_validator("policy_args")
    @classmethod
    def _args_ok(cls, v: dict[str, Any]) -> dict[str, Any]:
        return _check_params(v)

    @model_validator(mode="after")
    def _unique_nodes(self) -> "ClusterSpec":
        names = [n.name for n in self.nodes]
        dup = {n for n in names if names.count(n) > 1}
        if dup:
            raise ValueError(f"duplicate node names {sorted(dup)}")
        return self


_SHORT = reprlib.Repr()   # Python 3.11's Repr takes no keyword arguments
_SHORT.maxlevel, _SHORT.maxstring, _SHORT.maxother, _SHORT.maxlong = 2, 60, 60, 40


def one_line(err: ValidationError, source: str, model: type[BaseModel]) -> str:
    """A document's validation error as the one line a user gets: the field, what is wrong, the value given."""
    errors = err.errors(include_url=False)
    # a misspelt field is the cause of the "Field required" beside it, which pydantic lists first
    e = next((x for x in errors if x["type"] == "extra_forbidden"), errors[0])
    where = ".".join(str(p) for p in e["loc"]) or "(top level)"
    value = _SHORT.repr(e.get("input"))   # bounded: the input may be a large nested value
    if len(value) > 60:
        value = value[:57] + "..."
    more = f" (+{err.error_count() - 1} more)" if err.error_count() > 1 else ""
    msg = e["msg"].replace("\n", " ").removeprefix("Value error, ")   # pydantic's name for our own ValueError
    if e["loc"] == ():   # a rule across fields (a range): its message names them
        return f"{source}: {msg}{more}"
    # our own check's message may name the value already ("..., got 'x'"): not twice
    got = "" if e["type"] in ("missing",) or msg.endswith(f"got {value}") else f" (got {value})"
    return f"{source}: field {where}: {msg}{got}{_did_you_mean(e, errors, model)}{more}"


def _did_you_mean(e: dict, errors: list[dict], model: type[BaseModel]) -> str:
    if e["type"] != "extra_forbidden":
        return ""
    *parent, key = e["loc"]
    known = [str(x["loc"][-1]) for x in errors if x["type"] == "missing" and list(x["loc"][:-1]) == parent]
    known += list(model.model_fields) if not parent else []
    close = difflib.get_close_matches(str(key), known, n=1)
    return f"; did you mean {close[0]!r}?" if close else ""


def parse_document(data: bytes | str, source: str, fmt: str | None = None) -> Any:
    """Bytes/str -> plain Python data, within ``dlsched.documents``' limits (no aliases, bounded depth and
    size, no duplicate keys)."""
    try:
        return load_document(data, source, fmt, MAX_SPEC_BYTES)
    except DocumentError as e:
        raise SpecError(str(e)) from None


STATED = {"stated": True}   # validation of what a user states now, as opposed to a stored spec read back


def _validate(model: type[BaseModel], doc: Any, source: str):
    if not isinstance(doc, dict):
        raise SpecError(f"{source}: expected a mapping of fields, got {type(doc).__name__}")
    try:
        return model.model_validate(doc, strict=True, context=STATED)
    except ValidationError as e:
        raise SpecError(one_line(e, source, model)) from None


def load_job_spec(data: bytes | str, source: str = "job spec", fmt: str | None = None) -> JobSpec:
    return _validate(JobSpec, parse_document(data, source, fmt), source)


def job_spec_from(doc: Any, source: str = "job spec") -> JobSpec:
    """A job spec from a parsed document (one of a batch's, ``parse_document``'s output)."""
    return _validate(JobSpec, doc, source)


def load_cluster_spec(data: bytes | str, source: str = "cluster spec", fmt: str | None = None) -> ClusterSpec:
    return _validate(ClusterSpec, parse_document(data, source, fmt), source)


def _read(path: str | Path) -> bytes:
    p = Path(path)
    try:
        with open(p, "rb") as f:   # read at most one byte past the limit: a FIFO or /dev/zero has no size
            data = f.read(MAX_SPEC_BYTES + 1)
    except OSError as e:
        raise SpecError(f"{p}: cannot read: {e.strerror}") from None
    if len(data) > MAX_SPEC_BYTES:
        raise SpecError(f"{p}: spec is over {MAX_SPEC_BYTES} bytes, the limit")
    return data


def _fmt_of(path: str | Path) -> str | None:
    return "json" if str(path).endswith(".json") else None


def load_job_spec_file(path: str | Path) -> JobSpec:
    return load_job_spec(_read(path), str(path), _fmt_of(path))


def load_cluster_spec_file(path: str | Path) -> ClusterSpec:
    return load_cluster_spec(_read(path), str(path), _fmt_of(path))


def to_yaml(spec: BaseModel) -> str:
    return yaml.safe_dump(spec.model_dump(mode="json", exclude_none=True), sort_keys=False)


def to_json(spec: BaseModel) -> str:
    return spec.model_dump_json(exclude_none=True)
