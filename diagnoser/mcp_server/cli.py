"""`diagnoser mcp`: serve the MCP tools over stdio (default) or streamable HTTP."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

EXIT_UNUSABLE = 2


def start_mcp(transport: str, host: str, port: int, root: list[str] | None, store: Path | None,
              runbooks: Path | None) -> None:
    """Check the options, load the settings and serve (what `diagnoser mcp` and `diagnoser serve --mcp` run)."""
    from diagnoser.mcp_server.config import load_settings

    if transport not in ("stdio", "streamable-http"):
        typer.echo(f"diagnoser: unknown --transport {transport!r} (stdio | streamable-http)", err=True)
        raise typer.Exit(EXIT_UNUSABLE)
    try:
        settings = load_settings(root, store, runbooks)
    except ValueError as exc:
        typer.echo(f"diagnoser: {exc}", err=True)
        raise typer.Exit(EXIT_UNUSABLE) from None
    if transport == "streamable-http" and settings.token is None:
        from diagnoser.classify.redact import is_loopback_host

        if not is_loopback_host(host):
            typer.echo(f"diagnoser: refusing to serve MCP on {host} without a token: set DIAGNOSER_MCP__TOKEN or "
                       "DIAGNOSER_MCP__TOKEN_FILE (or listen on 127.0.0.1)", err=True)
            raise typer.Exit(EXIT_UNUSABLE)
        typer.echo("diagnoser mcp: no token: any local process may call the tools (loopback only)", err=True)
    try:
        from diagnoser.mcp_server.server import run_mcp
    except ImportError:
        typer.echo("diagnoser: the MCP server needs the mcp SDK: pip install 'diagnoser[mcp]'", err=True)
        raise typer.Exit(EXIT_UNUSABLE) from None
    run_mcp(transport, host, port, settings)  # type: ignore[arg-type]


def register(app: typer.Typer) -> None:
    """Add the `mcp` command to the diagnoser CLI."""

    @app.command("mcp")
    def mcp_command(
        transport: Annotated[str, typer.Option(help="stdio (an agent starts this process) or streamable-http")]
        = "stdio",
        host: Annotated[str, typer.Option(help="Address for streamable-http (path /mcp)")] = "127.0.0.1",
        port: Annotated[int, typer.Option(help="Port for streamable-http")] = 8765,
        root: Annotated[list[str] | None, typer.Option(
            "--root", help="Directory `triage` may read below; repeat for more [env: DIAGNOSER_MCP__ROOTS]")] = None,
        store: Annotated[Path | None, typer.Option(help="Incident store directory [env: DIAGNOSER_STORE]")] = None,
        runbooks: Annotated[Path | None, typer.Option(help="Runbook directory [env: DIAGNOSER_RUNBOOKS]")] = None,
    ) -> None:
        """Serve triage, incident search, runbooks and verdict explanations to MCP clients (agents, IDEs)."""
        start_mcp(transport, host, port, root, store, runbooks)
