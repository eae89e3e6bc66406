"""Which paths a remote caller (the chat bot, the HTTP service) may have triaged: only below the
configured roots, symlinks resolved first. `triage(..., within=roots)` enforces the same roots
again while it reads (a symlink inside an allowed directory that leads out is not followed)."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path


class TargetError(ValueError):
    """A job id or path that may not or cannot be read."""


def below_roots(path: str | Path, roots: Iterable[Path]) -> Path | None:
    """`path` resolved (symlinks followed) if it is one of `roots` or lies below one, else None: the rule
    every remote caller (`/diagnose`, the HTTP and MCP servers) is held to; `roots` resolved already."""
    real = Path(path).expanduser().resolve()
    return real if any(real == r or real.is_relative_to(r) for r in roots) else None


def resolve_target(arg: str, roots: tuple[Path, ...], runs_root: Path | None = None) -> tuple[str, list[str]]:
    """(job label, paths to triage) for a job id (a run directory under `runs_root`) or a path below
    one of `roots` (resolved roots). TargetError says why not."""
    arg = arg.strip()
    if not arg:
        raise TargetError("no job id or path given")
    if runs_root is not None and "/" not in arg and arg not in (".", ".."):
        runs = Path(runs_root).expanduser().resolve()
        run = (runs / arg).resolve()  # a symlink named like a job may point anywhere: resolve, then check
        if run.is_dir() and run != runs and run.is_relative_to(runs):
            attempts = sorted((p for p in run.glob("*attempt-*") if (p / "logs").is_dir()
                               and (p / "logs").resolve().is_relative_to(runs)), key=lambda p: p.stat().st_mtime)
            return arg, [str(attempts[-1] / "logs") if attempts else str(run)]
        if (runs / arg).is_symlink() and not run.is_relative_to(runs):
            raise TargetError(f"`{arg}` leads outside the runs root; not read")
    path = below_roots(arg, roots)
    if path is None:
        raise TargetError(f"`{arg}` is not a known job id and not below an allowed log root")
    if not path.exists():
        raise TargetError(f"`{arg}`: no such file or directory")
    return path.name, [str(path)]
