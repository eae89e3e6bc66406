"""Which incident store a command uses: the shared memory on a chromadb server when one is
configured (server_config.py), else the embedded store in the store directory."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from diagnoser.retrieve.paths import resolve_store_path
from diagnoser.retrieve.server_config import memory_server
from diagnoser.retrieve.store import IncidentStore, StoreError


def open_store(path: Path | None = None, seed: bool = True) -> Any:
    """An `IncidentStore` or a `RemoteStore` (created with the seed memory on first use).
    `path`: the store directory; with a server, where this host keeps its view and spool."""
    try:
        server = memory_server()
    except ValueError as exc:
        raise StoreError(str(exc)) from None
    if server is None:
        return IncidentStore.create(path, seed=seed)
    from diagnoser.retrieve.remote import RemoteStore

    return RemoteStore.create(server, resolve_store_path(path), seed=seed)
