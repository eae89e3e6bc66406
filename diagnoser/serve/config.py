"""The service's settings: defaults < environment (`DIAGNOSER_SERVE__*`) < command-line options.

Every setting of `diagnoser serve` is read here, in `load_serve_config`, and nowhere else. Field
names match the `[serve]` section of the settings file (host, port, token, token_file, roots,
max_upload_bytes, workers, queue).
"""

from __future__ import annotations

import ipaddress
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ENV_PREFIX = "DIAGNOSER_SERVE__"
DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8642
DEFAULT_MAX_UPLOAD = 2 << 30  # 2 GiB per request
DEFAULT_JSON_LIMIT = 1 << 20  # JSON bodies (paths, feedback) are small


class ServeConfigError(ValueError):
    """A setting of `diagnoser serve` is missing or wrong (one line, exit 2)."""


@dataclass(frozen=True)
class ServeConfig:
    host: str = DEFAULT_HOST
    port: int = DEFAULT_PORT
    token: str | None = field(default=None, repr=False)
    roots: tuple[Path, ...] = ()  # where POST /v1/triage may read (empty: nowhere)
    max_upload_bytes: int = DEFAULT_MAX_UPLOAD
    workers: int = 2  # triage processes
    queue: int = 8  # triages waiting for a worker before requests get 429
    store: Path | None = None  # incident store (default: DIAGNOSER_STORE, else the user data dir)

    def resolved_roots(self) -> tuple[Path, ...]:
        return tuple(Path(r).expanduser().resolve() for r in self.roots)


def is_loopback(host: str) -> bool:
    if host in ("localhost", "ip6-localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _int(name: str, value: Any, low: int, high: int | None = None) -> int:
    try:
        number = int(str(value).strip())
    except ValueError:
        raise ServeConfigError(f"{name}: {value!r} is not a whole number") from None
    if number < low or (high is not None and number > high):
        raise ServeConfigError(f"{name}: {number} is out of range ({low}..{high if high is not None else ''})")
    return number


def _read_token_file(path: str) -> str:
    try:
        token = Path(path).expanduser().read_text(encoding="utf-8").strip()
    except OSError as exc:
        raise ServeConfigError(f"token_file {path}: {exc.strerror or exc}") from None
    if not token:
        raise ServeConfigError(f"token_file {path} is empty")
    return token


def load_serve_config(overrides: dict[str, Any] | None = None, env: dict[str, str] | None = None) -> ServeConfig:
    """The effective settings. `overrides`: command-line values (None: not given). A token on a
    non-loopback host is required (ServeConfigError otherwise)."""
    env = dict(os.environ) if env is None else env
    raw: dict[str, Any] = {}
    for key in ("host", "port", "token", "token_file", "roots", "max_upload_bytes", "workers", "queue", "store"):
        if env.get(ENV_PREFIX + key.upper()):
            raw[key] = env[ENV_PREFIX + key.upper()]
    raw.update({k: v for k, v in (overrides or {}).items() if v is not None})
    roots = raw.get("roots", ())
    if isinstance(roots, str):
        roots = [r for r in roots.split(os.pathsep) if r]
    token = raw.get("token") or None
    if token is None and raw.get("token_file"):
        token = _read_token_file(str(raw["token_file"]))
    cfg = ServeConfig(
        host=str(raw.get("host", DEFAULT_HOST)),
        port=_int("port", raw.get("port", DEFAULT_PORT), 0, 65535),
        token=str(token).strip() if token else None,
        roots=tuple(Path(r) for r in roots),
        max_upload_bytes=_int("max_upload_bytes", raw.get("max_upload_bytes", DEFAULT_MAX_UPLOAD), 1),
        workers=_int("workers", raw.get("workers", 2), 1, 64),
        queue=_int("queue", raw.get("queue", 8), 0, 10_000),
        store=Path(raw["store"]).expanduser() if raw.get("store") else None)
    if cfg.token is None and not is_loopback(cfg.host):
        raise ServeConfigError(f"refusing to listen on {cfg.host} without a token: set {ENV_PREFIX}TOKEN or "
                               f"{ENV_PREFIX}TOKEN_FILE (or listen on 127.0.0.1)")
    for root in cfg.roots:
        if not Path(root).expanduser().is_dir():
            raise ServeConfigError(f"roots: {root} is not a directory")
    return cfg
