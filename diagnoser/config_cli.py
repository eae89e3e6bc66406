"""`diagnoser config show | migrate`: the effective settings tree, where each value came from; old files as TOML."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from diagnoser.errors import ConfigError

EXIT_USAGE = 2


def _fail(message: str) -> None:
    typer.echo(f"diagnoser: {message}", err=True)
    raise typer.Exit(EXIT_USAGE)


def toml_value(value: Any) -> str:
    """One TOML value (strings as JSON-escaped basic strings, which TOML reads the same)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, list | tuple):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{_key(k)} = {toml_value(v)}" for k, v in value.items()) + "}"
    return json.dumps(str(value), ensure_ascii=False)


def _key(key: str) -> str:
    return key if key.replace("_", "").replace("-", "").isalnum() else json.dumps(key)


def _flatten(values: dict[str, Any], prefix: str = "") -> list[tuple[str, Any]]:
    out: list[tuple[str, Any]] = []
    for key, value in values.items():
        dotted = f"{prefix}{_key(str(key))}"
        if isinstance(value, dict) and value:
            out.extend(_flatten(value, dotted + "."))
        else:
            out.append((dotted, value))
    return out


def to_toml(sections: dict[str, dict[str, Any]], comments: dict[str, str] | None = None) -> str:
    """Sections as TOML tables with dotted keys below them; None values as comments (TOML has no null)."""
    lines: list[str] = []
    for name, table in sections.items():
        lines.append(f"[{name}]")
        rows = [(k, "# " + k + " = (unset)" if v is None else f"{k} = {toml_value(v)}") for k, v in _flatten(table)]
        width = min(max((len(text) for _, text in rows), default=0), 48)
        for key, text in rows:
            note = (comments or {}).get(f"{name}.{key}")
            lines.append(f"{text:<{width}}  # {note}" if note else text)
        lines.append("")
    return "\n".join(lines)


def _masked(settings: Any) -> dict[str, Any]:
    """The tree as JSON data: secrets are `**********` (SecretStr), URLs and commands redacted."""
    from diagnoser.classify.redact import redact

    def clean(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: clean(v) for k, v in value.items()}
        if isinstance(value, list):
            return [clean(v) for v in value]
        return redact(value) if isinstance(value, str) else value

    return clean(settings.model_dump(mode="json"))


def show_command(
    as_json: Annotated[bool, typer.Option("--json", help="Print {file, settings, origins} as JSON")] = False,
    config: Annotated[Path | None, typer.Option("--config", help="Settings file [env: DIAGNOSER_CONFIG]")] = None,
) -> None:
    """Print the effective settings and where each value came from (default, file, env var, option)."""
    from diagnoser.settings import DEFAULT, default_config_path, load_settings, origin_of

    try:
        loaded = load_settings(config)
    except ConfigError as exc:
        _fail(str(exc))
        return
    data = _masked(loaded.settings)
    origins = {key: origin_of(key, loaded) for key, _ in _flatten(data)}
    if as_json:
        sys.stdout.write(json.dumps({"file": str(loaded.file) if loaded.file else None, "settings": data,
                                     "origins": origins}) + "\n")
        return
    where = loaded.file or f"none (looked at $DIAGNOSER_CONFIG, {default_config_path()})"
    typer.echo(f"# settings file: {where}\n# each value: where it came from ({DEFAULT}, the file, an env var, "
               "an option)\n")
    comments = {key: origin for key, origin in origins.items()}
    typer.echo(to_toml(data, comments), nl=False)


def migrate_command(
    file: Annotated[Path, typer.Argument(help="An old-format run or bot config (YAML/TOML, top-level keys)")],
    section: Annotated[str | None, typer.Option(help="run or bot (default: guessed from the keys)")] = None,
) -> None:
    """Print an old config file as a section of the one TOML settings file."""
    from diagnoser.settings import read_settings_file, validate

    if section not in (None, "run", "bot"):
        _fail(f"--section must be run or bot, not {section!r}")
    try:
        data = read_settings_file(file, section, warn=False)
        validate(data, str(file))  # refuse what would not load
    except ConfigError as exc:
        _fail(str(exc))
        return
    typer.echo(to_toml(data), nl=False)


def register(app: typer.Typer) -> None:
    config = typer.Typer(no_args_is_help=True, help="The settings tree: show it, migrate old config files.")
    config.command("show")(show_command)
    config.command("migrate")(migrate_command)
    app.add_typer(config, name="config")
