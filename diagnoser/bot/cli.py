"""`diagnoser bot serve`: run the Slack app. Secrets come from env or the config file only."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Annotated

import typer

from diagnoser.act.config import ConfigError


def serve_command(
    config: Annotated[Path | None, typer.Option("--config", help="Bot config file (YAML/TOML) "
                                                 "[env: DIAGNOSER_BOT_CONFIG]")] = None,
    host: Annotated[str | None, typer.Option(help="Listen address [127.0.0.1]")] = None,
    port: Annotated[int | None, typer.Option(help="Listen port [3000]")] = None,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Log requests")] = False,
) -> None:
    """Serve slash commands and button presses for Slack (HTTP mode).

    Needs SLACK_BOT_TOKEN and SLACK_SIGNING_SECRET in the environment (or the config file).
    """
    from diagnoser.bot.app import build_app
    from diagnoser.bot.config import load_bot_config
    from diagnoser.bot.server import BotServer

    logging.basicConfig(level=logging.DEBUG if verbose else logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    try:
        cfg = load_bot_config(config, {"host": host, "port": port})
        server = BotServer(build_app(cfg))
    except ConfigError as exc:
        typer.echo(f"diagnoser: {exc}", err=True)
        raise typer.Exit(2) from exc
    except OSError as exc:
        typer.echo(f"diagnoser: cannot listen on {host or cfg.host}:{port or cfg.port}: {exc}", err=True)
        raise typer.Exit(2) from exc
    h, p = server.address
    typer.echo(f"diagnoser bot: listening on http://{h}:{p}{cfg.path}", err=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.httpd.server_close()


def register(app: typer.Typer) -> None:
    """Add the `bot` command group (`bot serve`) to the main app."""
    sub = typer.Typer(no_args_is_help=True, help="Chat-ops: the Slack bot.")
    sub.command("serve")(serve_command)
    app.add_typer(sub, name="bot")
