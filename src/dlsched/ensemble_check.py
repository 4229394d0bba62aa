"""Submit-time check of a ``kind: ensemble`` job's ensemble YAML, without running the user's code: the YAML against
its schema, and each model class and its ``kwargs`` with ``entry_check``'s ``ast`` reading of the model file."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from dlsched.entry_check import check_entry
from dlsched.errors import UserError
from dlsched.spec import SpecError


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
