"""Where the data files shipped next to the code are (runbooks/, prompts/)."""

from __future__ import annotations

import os
import sys
from pathlib import Path


def shipped_dir(name: str, env_var: str | None) -> Path:
    """`$env_var` if set (and given), else `<checkout>/<name>` in a source checkout, else the installed
    `<prefix>/share/diagnoser/<name>` (pyproject's data-files)."""
    env = os.environ.get(env_var) if env_var else None
    if env:
        return Path(env)
    checkout = Path(__file__).resolve().parents[1] / name
    if checkout.is_dir():
        return checkout
    return Path(sys.prefix) / "share" / "diagnoser" / name
