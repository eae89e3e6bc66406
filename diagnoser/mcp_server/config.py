"""What the MCP server may read (the log roots, the incident store, the runbook directory) and the token
its HTTP transport requires.

`load_settings` is the one place the server's settings are read (environment, then the command
line's overrides), so that one settings tree can supply them instead.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path


@dataclass(frozen=True)
class McpSettings:
    """`roots`: `triage` reads only below these (resolved); none means `triage` refuses every path.
    `store`: the incident store (None: the default, see retrieve/paths.py). `runbooks`: None: shipped.
    `token`: streamable HTTP requests must carry it as a Bearer token (None: loopback only, no check)."""

    roots: tuple[Path, ...] = ()
    store: Path | None = None
    runbooks: Path | None = None
    token: str | None = field(default=None, repr=False)


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
    `DIAGNOSER_MCP__ROOTS`, os.pathsep-separated or JSON); the token from `[mcp] token` / `token_file`
    (`DIAGNOSER_MCP__TOKEN`, `DIAGNOSER_MCP__TOKEN_FILE`). ValueError (a one-line reason) if a root is
    not a directory or the token file is unusable."""
    from diagnoser.bearer import effective_token
    from diagnoser.settings import load_settings as load_tree

    tree = load_tree().settings.mcp
    if not roots:
        roots = [str(r) for r in tree.roots]
    token = effective_token(tree.token.get_secret_value() if tree.token else None, tree.token_file)
    return McpSettings(roots=_roots(roots), store=store, runbooks=runbooks, token=token)
