"""`diagnoser serve`: the HTTP API on uvicorn. Settings: see config.py (env `DIAGNOSER_SERVE__*`)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer


def serve_command(
    host: Annotated[str | None, typer.Option(help="Listen address [127.0.0.1] [env: DIAGNOSER_SERVE__HOST]")] = None,
    port: Annotated[int | None, typer.Option(help="Listen port, 0: any free one [8642] "
                                             "[env: DIAGNOSER_SERVE__PORT]")] = None,
    token_file: Annotated[Path | None, typer.Option(help="File holding the bearer token "
                                                    "[env: DIAGNOSER_SERVE__TOKEN_FILE, or DIAGNOSER_SERVE__TOKEN]")
                          ] = None,
    root: Annotated[list[Path] | None, typer.Option("--root", help="Directory POST /v1/triage may read below "
                                                    "(repeatable) [env: DIAGNOSER_SERVE__ROOTS, "
                                                    "os.pathsep-separated]")] = None,
    max_upload_bytes: Annotated[int | None, typer.Option(help="Largest upload request [2 GiB] "
                                                         "[env: DIAGNOSER_SERVE__MAX_UPLOAD_BYTES]")] = None,
    workers: Annotated[int | None, typer.Option(help="Triage processes [2] [env: DIAGNOSER_SERVE__WORKERS]")] = None,
    queue: Annotated[int | None, typer.Option(help="Triages waiting beyond the workers before 429 [8] "
                                              "[env: DIAGNOSER_SERVE__QUEUE]")] = None,
    store: Annotated[Path | None, typer.Option(help="Incident store directory [env: DIAGNOSER_STORE]")] = None,
    jobs_dir: Annotated[Path | None, typer.Option(help="Where triage jobs are recorded, kept across restarts "
                                                  "[<user state dir>/diagnoser/serve-jobs] "
                                                  "[env: DIAGNOSER_SERVE__JOBS_DIR]")] = None,
    log_level: Annotated[str, typer.Option(help="uvicorn log level")] = "info",
    mcp: Annotated[bool, typer.Option("--mcp", help="Serve the MCP tools instead of the HTTP API (stdio, or "
                                      "streamable HTTP with --transport; roots: --root or DIAGNOSER_MCP__ROOTS)")
                   ] = False,
    transport: Annotated[str, typer.Option(help="With --mcp: stdio or streamable-http")] = "stdio",
) -> None:
    """Serve the HTTP API: triage by path or upload, incidents, feedback, health, /metrics.

    The token is never taken from the command line (shell history, `ps`): use the environment or
    --token-file. Listening beyond loopback needs a token.
    """
    if mcp:  # `diagnoser serve --mcp` is `diagnoser mcp` (port default 8765 for streamable HTTP)
        from diagnoser.mcp_server.cli import start_mcp

        start_mcp(transport, host or "127.0.0.1", port if port is not None else 8765,
                  [str(r) for r in root] if root else None, store, None)
        return
    from diagnoser.serve.config import ServeConfigError, load_serve_config

    try:
        cfg = load_serve_config({"host": host, "port": port, "token_file": token_file,
                                 "roots": tuple(root) if root else None, "max_upload_bytes": max_upload_bytes,
                                 "workers": workers, "queue": queue, "store": store,
                                 "jobs_dir": jobs_dir})
    except ServeConfigError as exc:
        typer.echo(f"diagnoser: {exc}", err=True)
        raise typer.Exit(2) from exc
    import uvicorn

    from diagnoser.serve.app import create_app

    if not cfg.roots:
        typer.echo("diagnoser serve: no --root configured: triage by path is refused, uploads work", err=True)
    if cfg.token is None:
        typer.echo("diagnoser serve: no token: any local process may call the API (loopback only)", err=True)
    uvicorn.run(create_app(cfg), host=cfg.host, port=cfg.port, log_level=log_level, proxy_headers=False,
                timeout_graceful_shutdown=10)


def register(app: typer.Typer) -> None:
    """Add `serve` to the main app."""
    app.command("serve")(serve_command)
