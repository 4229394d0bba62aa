"""Submit-time check of a job's ``entry`` and ``params`` without running the user's code.

The service must not import a stranger's module to validate it (importing runs top-level code), so the
entry file is parsed with ``ast``: the file must exist and compile, define the callable at top level, and
accept every param by name. Typos get a "did you mean"."""
from __future__ import annotations

import ast
import difflib
import sys
from pathlib import Path
from typing import Any

from dlsched.errors import UserError
from dlsched.numbers import is_number
from dlsched.spec import SpecError


def _module_file(module: str, roots: list[Path]) -> Path | None:
    """``a.b`` -> ``a/b.py`` or ``a/b/__init__.py`` under a root, found without importing anything."""
    rel = Path(*module.split("."))
    for root in roots:
        for cand in (root / rel.with_suffix(".py"), root / rel / "__init__.py"):
            if cand.is_file():
                return cand
    return None


def entry_file(entry: str, workdir: Path) -> Path | None:
    target = entry.rsplit(":", 1)[0]
    if target.endswith(".py") or "/" in target:
        p = Path(target)
        p = p if p.is_absolute() else workdir / p
        return p if p.is_file() else None
    return _module_file(target, [workdir] + [Path(p) for p in sys.path if p])


def _signature(tree: ast.Module, func: str) -> ast.arguments | None:
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == func:
            return node.args
        if isinstance(node, ast.ClassDef) and node.name == func:
            init = next((n for n in node.body if isinstance(n, ast.FunctionDef) and n.name == "__init__"), None)
            if init is None and (node.bases or node.decorator_list):
                return None   # inherited or generated (a dataclass): its parameters are not in this file
            if init is None:
                return ast.arguments(posonlyargs=[], args=[], vararg=None, kwonlyargs=[], kw_defaults=[],
                                     kwarg=None, defaults=[])
            args = init.args
            return ast.arguments(posonlyargs=args.posonlyargs, args=args.args[1:], vararg=args.vararg,
                                 kwonlyargs=args.kwonlyargs, kw_defaults=args.kw_defaults, kwarg=args.kwarg,
                                 defaults=args.defaults)
        if isinstance(node, (ast.Assign, ast.ImportFrom)):   # a re-exported or aliased name: cannot check params
            names = [t.id for t in getattr(node, "targets", []) if isinstance(t, ast.Name)]
            names += [a.asname or a.name for a in getattr(node, "names", [])]
            if func in names:
                return None
    raise LookupError(func)


def constructor_arguments(entry: str, workdir: Path) -> ast.arguments | None:
    """The parameters ``entry`` (``file.py:Class``, ``module:func``) takes, read with ``ast``; None where they cannot
    be read from its file (not found, not compiling, inherited or aliased: ``check_entry`` says which)."""
    path = entry_file(entry, workdir)
    try:
        return None if path is None else _signature(ast.parse(path.read_bytes(), filename=str(path)), entry.rsplit(":", 1)[1])
    except (SyntaxError, ValueError, OSError, LookupError):
        return None


def check_script(command: list[str], workdir: str | Path, source: str = "job spec") -> None:
    """Raise ``SpecError`` (one line) when a command job's script (``python SCRIPT [args]``, already held to the
    entry rules) is not a file where the runtime runs it: such a job was accepted and failed when it started."""
    if len(command) >= 2 and not (Path(workdir) / command[1]).is_file():
        raise SpecError(f"{source}: field command: script {command[1]!r} not found "
                        f"(relative paths resolve under {workdir})")


def check_entry(entry: str, params: dict[str, Any], workdir: str | Path, source: str = "job spec",
                field: str = "entry", params_field: str = "params") -> None:
    """Raise ``SpecError`` (one line) when ``entry`` cannot be found or ``params`` do not fit its signature
    (``field``, ``params_field``: what the line calls them, e.g. an ensemble's ``models[2].model``)."""
    workdir = Path(workdir)
    target, func = entry.rsplit(":", 1)
    path = entry_file(entry, workdir)
    if path is None:
        raise SpecError(f"{source}: field {field}: {target!r} not found (relative paths resolve under {workdir})")
    try:
        tree = ast.parse(path.read_bytes(), filename=str(path))
    except (SyntaxError, ValueError) as e:
        raise SpecError(f"{source}: field {field}: {path} does not compile: {getattr(e, 'msg', e)} "
                        f"(line {getattr(e, 'lineno', '?')})") from None
    except OSError as e:
        raise SpecError(f"{source}: field {field}: cannot read {path}: {e.strerror}") from None
    try:
        args = _signature(tree, func)
    except LookupError:
        defined = [n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))]
        hint = difflib.get_close_matches(func, defined, n=1)
        raise SpecError(f"{source}: field {field}: {target} defines no {func!r}"
                        + (f"; did you mean {hint[0]!r}?" if hint else "")) from None
    if args is None or args.kwarg is not None:
        return
    accepted = [a.arg for a in args.args + args.kwonlyargs]
    for name in params:
        if name not in accepted:
            hint = difflib.get_close_matches(name, accepted, n=1)
            raise SpecError(f"{source}: field {params_field}.{name}: {func}() has no parameter {name!r}"
                            + (f"; did you mean {hint[0]!r}?" if hint else f" (it takes: {', '.join(accepted) or 'none'})"))
    annotated = {a.arg: a.annotation for a in args.args + args.kwonlyargs}
    for name, value in params.items():
        want = _simple_type(annotated.get(name))
        if want is not None and not _fits(value, *want):
            raise SpecError(f"{source}: field {params_field}.{name}: {func}() takes {' or '.join(want)}, got {value!r:.60}")
    required = [a.arg for a in args.args[:len(args.args) - len(args.defaults)]]
    required += [a.arg for a, d in zip(args.kwonlyargs, args.kw_defaults) if d is None]
    missing = [n for n in required if n not in params]
    if missing:
        raise SpecError(f"{source}: field {params_field}: {func}() needs {', '.join(missing)}")


_SIMPLE = ("int", "float", "bool", "str")


def _simple_type(node: ast.expr | None) -> tuple[str, ...] | None:
    """``int``, ``float | None``, ... -> the names; None for anything else (not checked: a runtime matter).
    params {epochs: "abc"} for ``epochs: int`` was accepted, and the job's total_samples became a string."""
    if isinstance(node, ast.Name) and node.id in _SIMPLE:
        return (node.id,)
    if isinstance(node, ast.Constant) and node.value is None:
        return ("None",)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
        left, right = _simple_type(node.left), _simple_type(node.right)
        return left + right if left is not None and right is not None else None
    return None


def _fits(value: Any, *names: str) -> bool:
    kinds = {"int": lambda v: isinstance(v, int) and not isinstance(v, bool),
             "float": is_number,
             "bool": lambda v: isinstance(v, bool), "str": lambda v: isinstance(v, str), "None": lambda v: v is None}
    return any(kinds[n](value) for n in names)


def parse_params(pairs: list[str]) -> dict[str, Any]:
    """``key=value`` strings -> dict; values parsed as int, float, bool or kept as text."""
    out: dict[str, Any] = {}
    for pair in pairs:
        if "=" not in pair:
            raise UserError(f"--param {pair!r}: expected key=value")
        key, raw = pair.split("=", 1)
        out[key.strip()] = _parse_value(raw.strip())
    return out


def _parse_value(raw: str) -> Any:
    if raw.lower() in ("true", "false"):
        return raw.lower() == "true"
    for cast in (int, float):
        try:
            return cast(raw)
        except ValueError:
            pass
    return raw
