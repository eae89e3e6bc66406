"""Readiness: the rules are loaded in a worker, and the incident store can be read (or created)."""

from __future__ import annotations

import json
import os
from concurrent.futures import Future
from pathlib import Path


def rules_check(warm: Future) -> str | None:
    """None when a worker process has started and loaded the rules, else why not."""
    if not warm.done():
        return "workers are starting (loading the rules)"
    try:
        warm.result()
    except Exception as exc:  # noqa: BLE001 - reported, not raised
        return f"worker start-up failed: {type(exc).__name__}: {exc}"
    return None


def store_check(path: Path) -> str | None:
    """None when the incident store at `path` is readable, or absent but creatable; else why not."""
    meta = path / "store.json"
    if meta.is_file():
        try:
            int(json.loads(meta.read_text(encoding="utf-8"))["generation"])
        except (OSError, ValueError, KeyError, TypeError) as exc:
            return f"incident store at {path} is not readable: {type(exc).__name__}: {exc}"
        return None
    if path.exists():
        return f"incident store path {path} exists but is not an incident store"
    parent = path.parent
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    if not os.access(parent, os.W_OK | os.X_OK):
        return f"incident store {path} does not exist and {parent} is not writable"
    return None
