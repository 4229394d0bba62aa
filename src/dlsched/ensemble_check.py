"""Submit-time check of a ``kind: ensemble`` job's ensemble YAML, without running the user's code: the YAML against
its schema, each model class and its ``kwargs`` with ``entry_check``'s ``ast`` reading of the model file, and each
model's class count (a ``classes``-like constructor parameter, given or its default) against the data's labels."""
from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

from dlsched.entry_check import check_entry, constructor_arguments
from dlsched.errors import UserError
from dlsched.spec import SpecError

# what a model's constructor calls its number of classes (the width of its head)
CLASS_PARAMETERS = ("classes", "num_classes", "n_classes", "num_labels", "n_labels", "out_classes")


def declared_classes(model: str, kwargs: dict[str, Any], base: Path) -> tuple[str, int, bool] | None:
    """(parameter, number of classes, given in ``kwargs``) of a model whose constructor takes a ``CLASS_PARAMETERS``
    one, read with ``ast`` (given in ``kwargs``, else its literal default); None where the file does not say."""
    args = constructor_arguments(model, base)
    if args is None:
        return None
    positional = args.posonlyargs + args.args
    defaults = dict(zip([a.arg for a in positional[len(positional) - len(args.defaults):]], args.defaults))
    defaults |= {a.arg: d for a, d in zip(args.kwonlyargs, args.kw_defaults) if d is not None}
    for name in (a.arg for a in positional + args.kwonlyargs):
        if name not in CLASS_PARAMETERS:
            continue
        if name in kwargs:
            value, given = kwargs[name], True
        else:
            try:
                value, given = ast.literal_eval(defaults[name]), False
            except (KeyError, ValueError, TypeError, SyntaxError):
                return None
        return (name, value, given) if isinstance(value, int) and not isinstance(value, bool) else None
    return None


def data_labels(spec, base: Path) -> tuple[int, str] | None:
    """(the largest label + 1, what says so) of an ensemble's data set: ``dataset.classes`` of a synthetic one, the
    labels of an ``npz`` file (its ``y_train`` and ``y_val``); None where they cannot be read (the runtime says why)."""
    d = spec.dataset
    if d.kind == "synthetic":
        return d.classes, f"dataset.classes is {d.classes}"
    import numpy as np

    try:
        with np.load(base / d.path, allow_pickle=False) as z:
            top = max(int(z[k].max()) for k in ("y_train", "y_val") if z[k].size)
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return top + 1, f"{d.path}'s labels go to {top}"


def _check_heads(spec, base: Path, where: str) -> None:
    """A model whose head has fewer classes than the data's labels failed when its member first trained, after its
    profiling and other members' training ("IndexError: Target 15 is out of bounds"): one line here."""
    labels = None
    for i, m in enumerate(spec.models):
        declared = declared_classes(m.model, dict(m.kwargs), base)
        if declared is None:
            continue
        labels = labels or data_labels(spec, base)
        if labels is None:
            return
        name, classes, given = declared
        if classes < labels[0]:
            raise SpecError(f"{where}: field models[{i}].kwargs.{name}: {m.model.rsplit(':', 1)[1]} has {classes} "
                            f"classes{'' if given else ' (its default)'}, but {labels[1]}: give kwargs: "
                            f"{{{name}: {labels[0]}}}")


def check_ensemble(params: dict[str, Any], workdir: str | Path, source: str = "job spec") -> None:
    """Raise ``SpecError`` (one line naming the file, the field and the value) when the ensemble YAML of a
    ``kind: ensemble`` job (``params: {path: ...}``) is invalid or names a model class its file does not define or
    whose ``kwargs`` it does not take: such a job was accepted, held a slot while it profiled, then failed. An
    ensemble built by the entry's own code (no ``path``) is the runtime's to check."""
    from dlsched.train.fleet_spec import load_spec   # pydantic only: no torch in the service

    path = params.get("path")
    if not isinstance(path, str):
        return
    yaml_file = Path(workdir) / path
    try:
        spec = load_spec(yaml_file)
    except UserError as e:
        raise SpecError(f"{source}: {e}") from None
    # as the runtime resolves it: base_dir under the working directory, else the YAML's folder
    base = Path(workdir) / spec.base_dir if spec.base_dir else yaml_file.parent
    for i, m in enumerate(spec.models):
        check_entry(m.model, dict(m.kwargs), base, f"{source}: {path}", f"models[{i}].model", f"models[{i}].kwargs")
    data = spec.dataset.path
    if spec.dataset.kind == "npz" and data and not (base / data).is_file():   # as load_data resolves it
        raise SpecError(f"{source}: {path}: field dataset.path: {data!r} not found (relative paths resolve under {base})")
    _check_heads(spec, base, f"{source}: {path}")
