"""Help that reads like a mature CLI: no `<bool>` / `<list[str]>` type labels, bracketed hints kept.

typer labels every option with its Python type (`--json <bool>`, `PATHS... <list[str]>`) and renders help text as
rich markup, which swallows bracketed hints (`[env: DIAGNOSER_RUNBOOKS]`, `[default: 10m]`). `tidy(command)`
rewrites a click command tree once: flags get no label, values a word (`PATH`, `INT`, `TEXT`, choices as
`a|b|c`), and help text is escaped so what is written is what is printed.
"""

from __future__ import annotations

from typing import Any

from rich.markup import escape

_WORDS = {"str": "TEXT", "path": "PATH", "file": "FILE", "directory": "DIR", "int": "INT", "float": "FLOAT"}


def tidy(command: Any, ctx: Any) -> Any:
    """Relabel and escape `command` and its subcommands in place (idempotent); returns it."""
    if getattr(command, "_diagnoser_tidy", False):
        return command
    command._diagnoser_tidy = True
    rich = getattr(command, "rich_markup_mode", None) == "rich"
    if hasattr(command, "get_help_option"):
        command.get_help_option = _flag_help(command.get_help_option)
    for param in getattr(command, "params", []):
        if param.param_type_name == "argument":
            param.metavar = (param.name or "arg").upper()
            param.display_type_rich = _no_type  # the name says it; no second column
        elif getattr(param, "is_flag", False) or getattr(param, "is_bool_flag", False):
            param.metavar = ""
        elif param.metavar is None and hasattr(param, "display_type"):
            label = str(param.display_type(ctx)).strip("<>")
            if label.startswith("list[") and label.endswith("]"):
                label = label[5:-1]
            param.metavar = _WORDS.get(label, label if "|" in label else label.upper())
            if getattr(param, "nargs", 1) != 1:
                param.metavar += "..."
        if rich and getattr(param, "help", None):
            param.help = escape(param.help)
    for sub in getattr(command, "commands", {}).values():
        tidy(sub, ctx)
    return command


def _no_type(ctx: Any = None) -> None:
    return None


def _flag_help(get_help_option: Any) -> Any:
    def wrapped(ctx: Any) -> Any:
        option = get_help_option(ctx)
        if option is not None:
            option.metavar = ""
        return option

    return wrapped
