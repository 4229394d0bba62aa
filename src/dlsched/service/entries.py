"""Which job code the service will run: entry points confined to what the operator allows.

A job's ``entry`` is code the runtime imports and calls as the service's user, so it is the service's
code-execution surface (``os:system`` with ``params: {command: ...}`` ran a shell command before this).
The operator allows job directories (``roots``; default: the working directory entries resolve in) and,
optionally, importable modules (``modules``; by default only ``BUILTIN_MODULES``, dlsched's own job loaders).
An entry is accepted only when

* it is ``path/to/file.py:function`` whose file, with symlinks resolved, lies inside an allowed root and
  outside the service's state directory (job folders there are written by jobs), with no ``..`` in the path;
* or ``package.module:function`` with the module an allowed one or inside an allowed package;
* and the function name is public (no leading underscore: no ``__import__``-style attributes).

A command job (``command: [python, train.py, ...]``) runs a program, so it is held to the same rule: it must be
``python path/to/script.py [args]`` with the script inside an allowed job directory; ``bash``, ``python -c``,
``python -m`` and every other program are refused.

An ensemble job given an ensemble YAML (``params: {path: ...}``) imports the model classes that file names, so the
YAML must lie in an allowed job directory and each ``models[i].model`` is held to the entry rule, resolved from
the YAML's ``base_dir`` (default: its folder) as the FLEET runtime resolves it.

Everything else is refused at submission with one line, and checked again before each start of the job: the runtime
imports what a path names then, and a link in an allowed directory re-pointed after the submission ran code from
anywhere. See ``docs/security.md``.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from dlsched.documents import read_yaml_file
from dlsched.errors import UserError
from dlsched.spec import JobSpec, SpecError

# dlsched's own entry points, always allowed: an ensemble job's loader (``kind: ensemble``). Never a package
# prefix such as ``dlsched``: every function there would become callable with a stranger's keyword arguments.
BUILTIN_MODULES = ("dlsched.train.fleet_spec",)
PYTHONS = ("python", "python3")   # a command job's program: the runtime's own interpreter (train/script.py)


@dataclass(frozen=True)
class EntryRules:
    workdir: Path                       # where relative file entries resolve (the runtime's working directory)
    roots: tuple[Path, ...]             # directories job files may live in (resolved)
    modules: tuple[str, ...] = ()       # importable modules / packages allowed
    forbidden: tuple[Path, ...] = ()    # inside a root but never job code (the state directory)

    @classmethod
    def make(cls, workdir: str | Path, roots: tuple[str | Path, ...] = (), modules: tuple[str, ...] = (),
             forbidden: tuple[str | Path, ...] = ()) -> "EntryRules":
        """Roots relative to ``workdir``; none given = ``workdir`` itself."""
        wd = Path(workdir).resolve()
        return cls(wd, tuple((wd / r).resolve() for r in roots) or (wd,), BUILTIN_MODULES + tuple(modules),
                   tuple(Path(f).resolve() for f in forbidden))

    def check_spec(self, spec: JobSpec, source: str = "job spec") -> None:
        """Every rule above that ``spec`` is held to (its entry or command, its ensemble YAML's models)."""
        if spec.entry:
            self.check(spec.entry, source)
        if spec.command:
            self.check_command(spec.command, source)
        if spec.kind == "ensemble":
            self.check_ensemble(spec.params, source)

    def check(self, entry: str, source: str = "job spec", field: str = "entry", base: Path | None = None) -> None:
        """Raise ``SpecError`` (one line naming the field and value) unless ``entry`` is allowed; a relative file
        resolves from ``base`` (default: the working directory)."""
        target, _, func = entry.rpartition(":")

        def refuse(why: str) -> None:
            raise SpecError(f"{source}: field {field}: {entry[:120]!r} {why}")

        if not target or not func:
            refuse("is not 'path/to/file.py:function' or 'module:function'")
        if func.startswith("_"):
            refuse("names a private attribute; give a public function such as make_job")
        if target.endswith(".py"):
            self._check_file(target, refuse, base)
            return
        if not any(target == m or target.startswith(m + ".") for m in self.modules):
            allowed = ", ".join(self.modules)
            refuse(f"imports module {target[:60]!r}, which is not an allowed job module ({allowed}: see --entry-module)")

    def check_command(self, command: list[str], source: str = "job spec") -> None:
        """Raise ``SpecError`` unless ``command`` is ``python path/to/script.py [args]`` with an allowed script."""
        def refuse(why: str) -> None:
            raise SpecError(f"{source}: field command: {' '.join(command)[:120]!r} {why}")

        if command[0] not in PYTHONS:   # bare names only: train/script.py swaps in the runtime's interpreter
            refuse(f"runs {command[0][:60]!r}; a command job runs `python path/to/script.py [args]` only")
        # "-cCODE#.py" ends in .py too: python read it as -c and ran CODE (a custom runtime, a Ray worker's
        # subprocess), whatever file the check found under that name
        if len(command) < 2 or command[1].startswith("-") or not command[1].endswith(".py"):
            refuse("does not name a .py script right after python (no -c, -m or other options)")
        self._check_file(command[1], refuse)

    def check_ensemble(self, params: dict, source: str = "job spec") -> None:
        """Raise ``SpecError`` unless the ensemble YAML ``params['path']`` and every model it names are allowed
        (see the module doc). Without a ``path`` the ensemble is built by the entry's own, allowed, code."""
        path = params.get("path")
        if path is None:
            return

        def refuse(why: str) -> None:
            raise SpecError(f"{source}: field params.path: {str(path)[:120]!r} {why}")

        if not isinstance(path, str):
            refuse("is not a file path")
        self._check_file(path, refuse)
        yaml_file = (self.workdir / path).resolve()
        try:
            doc = read_yaml_file(yaml_file)
        except UserError as e:
            raise SpecError(f"{source}: field params.path: {e}") from None
        doc = doc if isinstance(doc, dict) else {}
        base_dir = doc.get("base_dir")
        base = self.workdir / base_dir if isinstance(base_dir, str) else yaml_file.parent
        models = doc.get("models") if isinstance(doc.get("models"), list) else []
        for i, m in enumerate(models):
            model = m.get("model") if isinstance(m, dict) else None
            if isinstance(model, str):   # a missing or malformed one is the runtime's one-line spec error
                self.check(model, f"{source}: {path}", f"models[{i}].model", base)

    def _check_file(self, target: str, refuse, base: Path | None = None) -> None:
        path = Path(target)
        if ".." in path.parts:
            refuse("contains '..'; give a path inside an allowed job directory")
        resolved = ((base or self.workdir) / path).resolve()
        if not any(resolved.is_relative_to(r) for r in self.roots):
            refuse(f"is outside the allowed job directories ({', '.join(map(str, self.roots))})")
        if any(resolved.is_relative_to(f) for f in self.forbidden):
            refuse("lies in the service's state directory, which jobs write")
