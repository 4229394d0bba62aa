"""The ensemble YAML: N models (module or file + class), one data set, one convergence criterion.

As a job of the service, an ensemble is ``kind: ensemble`` with an entry returning an ``EnsembleSpec``:
``entry: dlsched.train.fleet_spec:from_yaml`` and ``params: {path: the/ensemble.yaml}``, or a factory of one's own
(e.g. a sweep of 50 models built in a loop).

Strict like the job spec: unknown fields, wrong types and out-of-range values are one line naming the file,
the field and the value.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from dlsched.documents import read_yaml_file
from dlsched.errors import UserError
from dlsched.spec import one_line

if TYPE_CHECKING:   # the runtime's: the service validates a spec at submission without loading torch
    import torch

    from dlsched.train.flotilla import Augment, Convergence, MemberSpec


@dataclass(frozen=True)
class FleetOptions:
    """``python -m dlsched.train.run --strategy fleet``: the entry makes an ``EnsembleSpec``; ``workers`` = the share."""

    job_dir: Path
    entry: str
    params: dict
    workers: int
    max_restarts: int = 3   # runs killed by a signal that resume from the members' checkpoints

    def ensemble(self) -> "EnsembleSpec":
        from dlsched.train.job import load_entry

        made = load_entry(self.entry)(**self.params)
        if not isinstance(made, EnsembleSpec):
            raise UserError(f"--entry {self.entry!r}: returned {type(made).__name__}, expected an EnsembleSpec "
                            "(e.g. dlsched.train.fleet_spec:from_yaml)")
        return made


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class ModelEntry(_Strict):
    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
    model: str = Field(pattern=r"^[^:]+:[A-Za-z_][A-Za-z0-9_]*$")   # package.module:Class or file.py:Class
    kwargs: dict[str, Any] = Field(default_factory=dict)
    lr: float = Field(0.05, gt=0, le=10)
    max_epochs: int | None = Field(None, ge=1, le=10_000)
    max_workers: int = Field(1, ge=1, le=16)   # data-parallel workers the FLEET greedy may give it


class AugmentEntry(_Strict):
    """The training augmentation (``flotilla.Augment``); default CIFAR's. Validation images are never augmented."""

    crop_padding: int = Field(4, ge=0, le=64)   # pad, then crop back at a random offset; 0 = no crop
    flip: bool = True                            # random horizontal flip


class DatasetEntry(_Strict):
    """``synthetic``: generated CIFAR-shaped images; ``npz``: a file with x_train, y_train, x_val, y_val (uint8 NCHW)."""

    kind: Literal["synthetic", "npz"] = "synthetic"
    path: str | None = None
    train: int = Field(2048, ge=64, le=10_000_000)
    val: int = Field(256, ge=16, le=1_000_000)
    classes: int = Field(10, ge=2, le=100_000)
    image_size: int = Field(32, ge=8, le=512)
    seed: int = 0
    augment: AugmentEntry = AugmentEntry()

    @model_validator(mode="after")
    def _path_for_npz(self) -> "DatasetEntry":
        if self.kind == "npz" and not self.path:
            raise ValueError("kind 'npz' needs a path")
        return self


class ConvergenceEntry(_Strict):
    patience: int = Field(2, ge=1, le=1000)
    min_delta: float = Field(0.002, ge=0, le=1)
    max_epochs: int = Field(20, ge=1, le=10_000)


class EnsembleSpec(_Strict):
    name: str = Field("ensemble", pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
    models: list[ModelEntry] = Field(min_length=1, max_length=62)
    dataset: DatasetEntry = DatasetEntry()
    batch_size: int = Field(64, ge=1, le=65536)
    convergence: ConvergenceEntry = ConvergenceEntry()
    slots: int = Field(4, ge=1, le=62)              # worker slots ("GPUs") of this machine for the greedy
    rate_tolerance: float = Field(0.9, ge=0, lt=1)   # the greedy's eps
    output: str = "ensemble-report"
    # where relative model files and data resolve; itself relative to the working directory (the service's --workdir,
    # as its entry check resolves it). Not given: the YAML's folder (``from_yaml``, ``dlsched ensemble run``)
    base_dir: str | None = None

    @model_validator(mode="after")
    def _unique_names(self) -> "EnsembleSpec":
        names = [m.name for m in self.models]
        if dup := sorted({n for n in names if names.count(n) > 1}):
            raise ValueError(f"model names must be unique, repeated: {', '.join(dup)}")
        if self.dataset.kind == "synthetic" and self.batch_size > self.dataset.train:
            raise ValueError(f"field batch_size: {self.batch_size} is more than the {self.dataset.train} samples of "
                             "dataset.train: an epoch would have no step")
        return self

    def members(self, base_dir: Path) -> list[MemberSpec]:
        from dlsched.train.flotilla import MemberSpec

        return [MemberSpec(m.name, m.model, dict(m.kwargs), m.lr, str(base_dir), m.max_epochs, m.max_workers) for m in self.models]

    def augment(self) -> Augment:
        from dlsched.train.flotilla import Augment

        return Augment(self.dataset.augment.crop_padding, self.dataset.augment.flip)

    def convergence_rule(self) -> Convergence:
        from dlsched.train.flotilla import Convergence

        return Convergence(self.convergence.patience, self.convergence.min_delta, self.convergence.max_epochs)

    def base(self, spec_file: Path) -> Path:
        """Where relative model files and data resolve: ``base_dir`` where given, else ``spec_file``'s folder."""
        return Path(self.base_dir).resolve() if self.base_dir else Path(spec_file).resolve().parent

    def check_models(self, base_dir: Path, source: str) -> None:
        """Import every model class once, before anything is written or trained: a bad one is one line naming
        ``source``, the field (``models[i].model``), the value and the file read; so are ``kwargs`` the class does not
        take (a TypeError traceback from the first member built, after the report folder was made)."""
        import inspect

        from dlsched.train.flotilla import load_model_class

        for i, m in enumerate(self.models):
            cls = load_model_class(m.model, base_dir, where=f"{source}: field models[{i}].model")
            try:
                sig = inspect.signature(cls)
            except (TypeError, ValueError):   # no signature to read (a builtin): its build says
                continue
            try:
                sig.bind(**dict(m.kwargs))
            except TypeError as e:
                raise UserError(f"{source}: field models[{i}].kwargs: {m.model}: {e} (got {dict(m.kwargs)!r})") from None


def from_yaml(path: str) -> EnsembleSpec:
    """The job entry for an ensemble YAML: ``entry: dlsched.train.fleet_spec:from_yaml``, ``params: {path: ...}``."""
    p = Path(path).resolve()
    spec = load_spec(p)
    return spec if spec.base_dir else spec.model_copy(update={"base_dir": str(p.parent)})


def load_spec(path: Path) -> EnsembleSpec:
    raw = read_yaml_file(path)
    if not isinstance(raw, dict):
        raise UserError(f"{path}: expected a mapping at the top level, got {type(raw).__name__}")
    try:
        return EnsembleSpec.model_validate(raw)
    except ValidationError as e:
        raise UserError(one_line(e, str(path), EnsembleSpec)) from None


def load_data(spec: EnsembleSpec, base_dir: Path) -> tuple[tuple[torch.Tensor, torch.Tensor], tuple[torch.Tensor, torch.Tensor]]:
    import numpy as np
    import torch

    from dlsched.train.flotilla import synthetic_images

    d = spec.dataset
    if d.kind == "synthetic":
        return (synthetic_images(d.train, d.classes, d.image_size, d.seed),
                synthetic_images(d.val, d.classes, d.image_size, d.seed + 1))
    path = Path(d.path) if Path(d.path).is_absolute() else base_dir / d.path  # type: ignore[arg-type]
    try:
        z = np.load(path)
        arrays = {k: z[k] for k in ("x_train", "y_train", "x_val", "y_val")}
    except (OSError, ValueError) as e:
        raise UserError(f"{path}: cannot read npz data set: {e}") from None
    except KeyError as e:
        raise UserError(f"{path}: missing array {e.args[0]!r} (need x_train, y_train, x_val, y_val)") from None
    for k in ("x_train", "x_val"):
        if arrays[k].dtype != np.uint8 or arrays[k].ndim != 4 or arrays[k].shape[1] != 3:
            raise UserError(f"{path}: {k} must be uint8 N x 3 x H x W, got {arrays[k].dtype} {arrays[k].shape}")
    if len(arrays["x_train"]) < spec.batch_size:   # an epoch of no step: the members never finished one (it hung)
        raise UserError(f"batch_size {spec.batch_size} is more than the {len(arrays['x_train'])} samples of x_train in "
                        f"{path}: an epoch would have no step")
    t = {k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in arrays.items()}
    return (t["x_train"], t["y_train"].long()), (t["x_val"], t["y_val"].long())
