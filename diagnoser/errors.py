"""Errors shared by the settings loaders (kept import-free so every layer can raise them)."""

from __future__ import annotations


class ConfigError(ValueError):
    """A config file, environment variable or option that cannot be used; the message names which and why."""
