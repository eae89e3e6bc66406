"""Where the incident store lives: `--store`, else `DIAGNOSER_STORE`, else the user data dir."""

from __future__ import annotations

import os
from pathlib import Path

import platformdirs

ENV_STORE = "DIAGNOSER_STORE"


def default_store_path() -> Path:
    """`$DIAGNOSER_STORE`, or `<user data dir>/diagnoser/incidents` (platformdirs)."""
    env = os.environ.get(ENV_STORE)
    if env:
        return Path(env).expanduser()
    return Path(platformdirs.user_data_dir("diagnoser", appauthor=False)) / "incidents"


def resolve_store_path(path: Path | str | None) -> Path:
    return Path(path).expanduser() if path else default_store_path()
