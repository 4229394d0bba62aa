"""The ``dlsched`` command. Each sub-command lives in ``dlsched.commands.<name>`` and exposes
``register(app)``; this file only wires them together and turns user errors into one line + exit 2."""
from __future__ import annotations

import importlib
import importlib.util
import sys

import typer

try:  # typer >= 0.2x carries its own click; older ones use click's
    from typer._click import exceptions as usage_errors
except ImportError:  # pragma: no cover
    from click import exceptions as usage_errors

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


def _one_paragraph_summaries() -> None:
    """The command list of ``dlsched --help`` shows a docstring's first paragraph: with its source line breaks kept,
    a summary broke mid-sentence ("checked here, then by the / service."); joined, the panel wraps it."""
    import inspect

    for info in app.registered_commands:
        doc = info.help or (info.callback.__doc__ if info.callback else None)
        if info.short_help is None and doc:
            info.short_help = " ".join(inspect.cleandoc(doc).split("\n\n")[0].split())


_one_paragraph_summaries()


def _usage_line(e: usage_errors.UsageError, argv: list[str]) -> str:
    """Click's usage error as one line, with the value the user gave where it names an option (typer prints
    a usage line, a hint and a boxed message over six lines, and leaves the value out)."""
    line = " ".join(e.format_message().split())
    param = getattr(e, "param", None)
    for opt in getattr(param, "opts", []) if isinstance(e, usage_errors.BadParameter) else []:
        for i, arg in enumerate(argv):
            if arg.startswith(opt + "="):
                return f"{line} (got {arg[len(opt) + 1:]!r})"
            if arg == opt and i + 1 < len(argv):
                return f"{line} (got {argv[i + 1]!r})"
    # an argument (`dlsched show abc`) has no option to find in argv: typer's pydantic check holds the value it refused
    errors = getattr(e.__cause__, "errors", None) if isinstance(e, usage_errors.BadParameter) else None
    refused = [x["input"] for x in errors() if "input" in x] if callable(errors) else []
    return f"{line} (got {refused[0]!r})" if refused else line


def main() -> None:
    try:
        code = app(standalone_mode=False)
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
    except usage_errors.NoArgsIsHelpError as e:
        e.show()  # the help text itself
        sys.exit(e.exit_code)
    except usage_errors.UsageError as e:
        print(f"error: {_usage_line(e, sys.argv[1:])}", file=sys.stderr)
        sys.exit(e.exit_code)
    except usage_errors.ClickException as e:
        print(f"error: {' '.join(e.format_message().split())}", file=sys.stderr)
        sys.exit(e.exit_code)
    except typer.Abort:
        print("Aborted!", file=sys.stderr)
        sys.exit(1)
    sys.exit(code if isinstance(code, int) else 0)


if __name__ == "__main__":
    main()
