"""The ``dlsched`` command. Each sub-command lives in ``dlsched.commands.<name>`` and exposes
``register(app)``; this file only wires them together and turns user errors into one line + exit 2."""
from __future__ import annotations

import importlib
import importlib.util
import sys

import typer

from dlsched.errors import UserError

app = typer.Typer(no_args_is_help=True, add_completion=False, help="Resource scheduler for deep-learning training clusters.")

COMMAND_MODULES = ["predict", "simulate", "ensemble", "service", "demo", "train"]


@app.command()
def version() -> None:
    """Print the dlsched version."""
    from dlsched import __version__

    print(__version__)


def _register_all() -> None:
    for name in COMMAND_MODULES:
        modname = f"dlsched.commands.{name}"
        if importlib.util.find_spec(modname) is not None:
            importlib.import_module(modname).register(app)


_register_all()


def main() -> None:
    try:
        app()
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    main()
