"""Where the shared incident memory is: a chromadb server, or none (the embedded store).

`memory_server` is the one place this is read (`DIAGNOSER_MEMORY__SERVER=http://host:port`, with
optional `DIAGNOSER_MEMORY__TENANT`, `__DATABASE`, `__COLLECTION`), so that one settings tree can
supply it instead.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

PREFIX = "DIAGNOSER_MEMORY__"
DEFAULT_COLLECTION = "diagnoser-incidents"
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{1,510}[A-Za-z0-9]$")  # chromadb's collection-name rule


@dataclass(frozen=True)
class MemoryServer:
    """A chromadb server (`chroma run`) that holds a fleet's incident memory."""

    url: str
    tenant: str = "default_tenant"
    database: str = "default_database"
    collection: str = DEFAULT_COLLECTION

    @property
    def host(self) -> str:
        return urlsplit(self.url).hostname or ""

    @property
    def port(self) -> int:
        parts = urlsplit(self.url)
        return parts.port or (443 if parts.scheme == "https" else 80)

    @property
    def ssl(self) -> bool:
        return urlsplit(self.url).scheme == "https"

    @property
    def key(self) -> str:
        """A short stable name for this memory (its local cache and spool directory)."""
        text = f"{self.url}|{self.tenant}|{self.database}|{self.collection}"
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    def describe(self) -> str:
        return f"{self.url} ({self.tenant}/{self.database}/{self.collection})"


def _from_settings_file(env: Mapping[str, str]) -> dict[str, str]:
    """The settings file's `[memory]` section, read only when a file exists (plain triage does not pay
    for the settings tree)."""
    from diagnoser.classify.config import default_config_path  # light: the settings tree only if a file exists

    path = Path(env["DIAGNOSER_CONFIG"]) if env.get("DIAGNOSER_CONFIG") else default_config_path()
    if not path.is_file():
        return {}
    from diagnoser.settings import load_settings

    section = load_settings(path, env={}, default_file=False).settings.memory
    return {k: str(v) for k, v in section.model_dump().items() if v and k in ("server", "tenant", "database",
                                                                                "collection")}


def memory_server(env: Mapping[str, str] | None = None) -> MemoryServer | None:
    """The configured server, or None (embedded store): `DIAGNOSER_MEMORY__*`, else the settings file's
    `[memory]` section. ValueError with the reason if it is malformed."""
    env = os.environ if env is None else env
    filed = {} if env.get(PREFIX + "SERVER", "").strip() else _from_settings_file(env)
    env = {**{PREFIX + k.upper(): v for k, v in filed.items()}, **env}
    url = env.get(PREFIX + "SERVER", "").strip().rstrip("/")
    if not url:
        return None
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname or parts.path not in ("", "/"):
        raise ValueError(f"{PREFIX}SERVER={url!r} is not a chromadb server address like http://host:8000")
    try:
        parts.port  # noqa: B018 - raises on a bad port
    except ValueError as exc:
        raise ValueError(f"{PREFIX}SERVER={url!r}: {exc}") from None
    fields = {k: env.get(PREFIX + k.upper(), "").strip() for k in ("tenant", "database", "collection")}
    server = MemoryServer(url, **{k: v for k, v in fields.items() if v})
    if not _NAME.match(server.collection):
        raise ValueError(f"{PREFIX}COLLECTION={server.collection!r}: chromadb collection names are 3-512 "
                         f"characters of [A-Za-z0-9._-], starting and ending with a letter or digit")
    return server
