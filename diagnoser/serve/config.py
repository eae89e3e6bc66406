"""The service's settings: defaults < the settings file's `[serve]` section < environment
(`DIAGNOSER_SERVE__*`) < command-line options.

Every setting of `diagnoser serve` is read here, in `load_serve_config`, through the one settings tree
(`diagnoser/settings.py`, `diagnoser config show`), and nowhere else.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from diagnoser.bearer import TokenError, effective_token
from diagnoser.classify.redact import is_loopback_host
from diagnoser.errors import ConfigError
from diagnoser.serve.ledger import default_jobs_dir
from diagnoser.settings import load_settings

ENV_PREFIX = "DIAGNOSER_SERVE__"
DEFAULT_JSON_LIMIT = 1 << 20  # JSON bodies (paths, feedback) are small


class ServeConfigError(ValueError):
    """A setting of `diagnoser serve` is missing or wrong (one line, exit 2)."""


@dataclass(frozen=True)
class ServeConfig:
    """The effective settings (their defaults live in one place: settings.ServeSettings)."""

    host: str
    port: int
    token: str | None = field(repr=False)
    roots: tuple[Path, ...]  # where POST /v1/triage may read (empty: nowhere)
    max_upload_bytes: int
    workers: int  # triage processes
    queue: int  # triages waiting for a worker before requests get 429
    store: Path | None  # incident store (None: DIAGNOSER_STORE, else the user data dir)
    jobs_dir: Path  # triage job records, kept across restarts

    def resolved_roots(self) -> tuple[Path, ...]:
        return tuple(Path(r).expanduser().resolve() for r in self.roots)


def load_serve_config(overrides: dict[str, Any] | None = None, env: dict[str, str] | None = None,
                      file: Path | None = None) -> ServeConfig:
    """The effective settings: the `[serve]` section of the settings file < `DIAGNOSER_SERVE__*` < `overrides`
    (command-line values; None: not given). A token on a non-loopback host is required (ServeConfigError)."""
    given = {k: v for k, v in (overrides or {}).items() if v is not None}
    if isinstance(given.get("roots"), str):
        given["roots"] = [r for r in given["roots"].split(os.pathsep) if r]
    try:
        s = load_settings(file, env=os.environ if env is None else env, cli={"serve": given}).settings.serve
    except ConfigError as exc:
        raise ServeConfigError(str(exc)) from None
    try:
        token = effective_token(s.token.get_secret_value() if s.token else None, s.token_file)
    except TokenError as exc:
        raise ServeConfigError(str(exc)) from None
    cfg = ServeConfig(host=s.host, port=s.port, token=token or None, roots=tuple(s.roots),
                      max_upload_bytes=s.max_upload_bytes, workers=s.workers, queue=s.queue,
                      store=s.store.expanduser() if s.store else None,
                      jobs_dir=s.jobs_dir.expanduser() if s.jobs_dir else default_jobs_dir())
    if cfg.token is None and not is_loopback_host(cfg.host):
        raise ServeConfigError(f"refusing to listen on {cfg.host} without a token: set {ENV_PREFIX}TOKEN or "
                               f"{ENV_PREFIX}TOKEN_FILE (or listen on 127.0.0.1)")
    for root in cfg.roots:
        if not Path(root).expanduser().is_dir():
            raise ServeConfigError(f"roots: {root} is not a directory")
    return cfg
