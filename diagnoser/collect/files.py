"""Which inputs to read: files, directory trees of per-rank logs, or `-` for stdin.

A bad input never stops triage: a missing, unreadable, binary or looping path becomes a warning and
the rest is triaged. Only when nothing at all can be read is the input unusable.
"""

from __future__ import annotations

import gzip
import os
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path, PurePath
from typing import BinaryIO

from diagnoser.collect.paths import PathInfo, path_info

STDIN = "-"
_SNIFF_BYTES = 8192
_CONTROL_BYTES = bytes([*range(0, 9), *range(14, 27), *range(28, 32)])  # not tab/LF/CR/FF/ESC
_SKIP_SUFFIXES = {".png", ".jpg", ".jpeg", ".gif", ".pt", ".pth", ".bin", ".safetensors", ".ckpt", ".npy",
                  ".npz", ".pkl", ".so", ".whl", ".zip", ".tar", ".zst", ".xz", ".bz2", ".pyc"}


class UnusableInput(Exception):
    """Nothing could be triaged; the message is one line for the user."""


@dataclass(frozen=True, slots=True)
class Source:
    """One readable input: `name` is what evidence cites (path relative to the root given)."""

    name: str
    path: Path | None  # None for stdin
    info: PathInfo
    size: int
    mtime: float


def _relative_name(root: Path, path: Path, root_is_dir: bool) -> str:
    if not root_is_dir:
        return str(path)
    return str(path.relative_to(root))


def _walk(root: Path, warnings: list[tuple[str, str]]) -> Iterator[Path]:
    """Files below `root`, following directory symlinks once (loops are reported, not followed)."""
    seen_dirs: set[tuple[int, int]] = set()
    stack = [root]
    while stack:
        directory = stack.pop()
        try:
            st = directory.stat()
        except OSError as exc:
            warnings.append((str(directory), f"cannot read directory: {exc.strerror or exc}"))
            continue
        key = (st.st_dev, st.st_ino)
        if key in seen_dirs:
            warnings.append((str(directory), "symlink loop: directory already visited, skipped"))
            continue
        seen_dirs.add(key)
        try:
            entries = sorted(os.scandir(directory), key=lambda e: e.name)
        except OSError as exc:
            warnings.append((str(directory), f"cannot list directory: {exc.strerror or exc}"))
            continue
        subdirs = []
        for entry in entries:
            if entry.name.startswith("."):
                continue
            try:
                if entry.is_dir():
                    subdirs.append(Path(entry.path))
                elif entry.is_file():
                    yield Path(entry.path)
                elif entry.is_symlink():
                    warnings.append((entry.path, "broken or looping symlink, skipped"))
                else:
                    warnings.append((entry.path, "not a regular file (fifo, socket or device), skipped"))
            except OSError as exc:
                warnings.append((entry.path, f"cannot stat: {exc.strerror or exc}"))
        stack.extend(reversed(subdirs))


def list_sources(inputs: list[str]) -> tuple[list[Source], list[tuple[str, str]]]:
    """Resolve the user's inputs into readable sources and (path, problem) warnings."""
    sources: list[Source] = []
    warnings: list[tuple[str, str]] = []
    seen_files: set[tuple[int, int]] = set()
    for raw in inputs:
        if raw == STDIN:
            sources.append(Source("<stdin>", None, PathInfo(None, None, "log"), 0, 0.0))
            continue
        root = Path(raw)
        if not root.exists():
            warnings.append((raw, "no such file or directory"))
            continue
        is_dir = root.is_dir()
        paths = _walk(root, warnings) if is_dir else iter([root])
        for path in paths:
            if path.suffix.lower() in _SKIP_SUFFIXES:
                continue
            try:
                st = path.stat()
            except OSError as exc:
                warnings.append((str(path), f"cannot stat: {exc.strerror or exc}"))
                continue
            if not stat.S_ISREG(st.st_mode):
                warnings.append((str(path), "not a regular file (fifo, socket or device), skipped"))
                continue
            if (st.st_dev, st.st_ino) in seen_files:
                continue
            seen_files.add((st.st_dev, st.st_ino))
            name = _relative_name(root, path, is_dir)
            rel = PurePath(name) if is_dir else PurePath(*path.parts[-3:])
            sources.append(Source(name, path, path_info(rel), st.st_size, st.st_mtime))
    return sources, warnings


def looks_binary(head: bytes) -> bool:
    """A file is binary when a large share of its first bytes are not text (logs with a few NULs
    from a crash are still text)."""
    if not head:
        return False
    text = head.decode("utf-8", errors="replace")
    control = len(head) - len(head.translate(None, _CONTROL_BYTES))
    return (text.count("\ufffd") + control) / len(text) > 0.3


def open_source(source: Source, stdin: BinaryIO | None = None) -> BinaryIO:
    """Open a source for binary streaming; gzip files are decompressed on the fly.

    Raises OSError for unreadable files and ValueError for binary ones.
    """
    if source.path is None:
        if stdin is None:
            raise ValueError("stdin is not available")
        return stdin
    handle: BinaryIO = open(source.path, "rb")  # noqa: SIM115 - returned to the caller
    try:
        magic = handle.read(2)
        handle.seek(0)
        if magic == b"\x1f\x8b":
            handle.close()
            handle = gzip.open(source.path, "rb")  # type: ignore[assignment]  # noqa: SIM115
        head = handle.read(_SNIFF_BYTES)
        if looks_binary(head):
            raise ValueError("binary file (not a text log), skipped")
        handle.seek(0)
        return handle
    except BaseException:
        handle.close()
        raise
