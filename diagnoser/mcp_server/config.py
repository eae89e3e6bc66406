"""What the MCP server may read: the log roots, the incident store, the runbook directory.

`load_settings` is the one place the server's settings are read (environment, then the command
line's overrides), so that one settings tree can supply them instead.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class McpSettings:
    """`roots`: `triage` reads only below these (resolved); none means `triage` refuses every path.
    `store`: the incident store (None: the default, see retrieve/paths.py). `runbooks`: None: shipped."""

    roots: tuple[Path, ...] = ()
    store: Path | None = None
    runbooks: Path | None = None


def _roots(values: list[str]) -> tuple[Path, ...]:
    roots = []
    for value in values:
        root = Path(value).expanduser().resolve()
        if not root.is_dir():
            raise ValueError(f"MCP log root {value!r} is not a directory")
        roots.append(root)
    return tuple(dict.fromkeys(roots))


def load_settings(roots: list[str] | None = None, store: Path | None = None,
                  runbooks: Path | None = None) -> McpSettings:
    """The settings: `roots` from the command line, else the settings tree's `[mcp] roots` (the file, or
    `DIAGNOSER_MCP__ROOTS`, os.pathsep-separated or JSON). ValueError (a one-line reason) if a root is
    not a directory."""
    if not roots:
        from diagnoser.settings import load_settings as load_tree

        roots = [str(r) for r in load_tree().settings.mcp.roots]
    return McpSettings(roots=_roots(roots), store=store, runbooks=runbooks)
