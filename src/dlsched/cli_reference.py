"""``docs/cli.md``, generated from the command line itself so that it cannot drift: ``python -m dlsched.cli_reference``."""
from __future__ import annotations

import typer


def _option_row(p, ctx) -> str:
    decl, help_text = p.get_help_record(ctx) or (", ".join(p.opts), p.help or "")
    return f"| `{decl}` | {' '.join(help_text.split()).replace('|', '&#124;')} |"


def _command_md(name: str, cmd, ctx, level: int) -> list[str]:
    # typer vendors its own click: go by duck type, not by click's classes
    sub = cmd.context_class(cmd, info_name=name, parent=ctx)
    lines = [f"{'#' * level} `{sub.command_path}`", "", " ".join((cmd.help or "").split()), "",
             "```", cmd.get_usage(sub).strip(), "```", ""]
    args = [p for p in cmd.params if p.param_type_name == "argument"]
    opts = [p for p in cmd.params if p.param_type_name == "option" and p.name != "help"]
    if args:
        lines += ["Arguments: " + ", ".join(f"`{a.name.upper()}`" for a in args), ""]
    if opts:
        lines += ["| option | meaning |", "|---|---|", *(_option_row(p, sub) for p in opts), ""]
    if hasattr(cmd, "list_commands"):
        for sub_name in sorted(cmd.list_commands(sub)):
            lines += _command_md(sub_name, cmd.get_command(sub, sub_name), sub, level + 1)
    return lines


def render(app: typer.Typer | None = None) -> str:
    if app is None:
        from dlsched.cli import app
    root = typer.main.get_command(app)
    ctx = root.context_class(root, info_name="dlsched")
    lines = ["# dlsched command line", "",
             "Generated from the CLI by `make docs` (`python -m dlsched.cli_reference > docs/cli.md`); a test "
             "fails when it is out of date.", ""]
    for name in root.list_commands(ctx):
        lines += _command_md(name, root.get_command(ctx, name), ctx, 2)
    from dlsched.paths import REPO_ROOT

    # defaults that are paths inside the checkout read the same in every clone
    return "\n".join(lines).rstrip().replace(str(REPO_ROOT), "<repo>") + "\n"


if __name__ == "__main__":
    print(render(), end="")
