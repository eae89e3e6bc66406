"""Which inputs to read: files, directory trees of per-rank logs, or `-` for stdin.

A bad input never stops triage: a missing, unreadable, binary or looping path, or a truncated or
corrupt .gz, becomes a warning (what was read before the damage is kept) and the rest is triaged.
Only when nothing at all can be read is the input unusable. Stdin is sniffed like a file (gzip is
decompressed, binary refused); a closed stdin is a one-line error.
"""

from __future__ import annotations

import gzip
import io
import os
import stat
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path, PurePath
from typing import BinaryIO

from diagnoser.collect.paths import PathInfo, path_info_of

STDIN = "-"
_SNIFF_BYTES = 8192
_STEP = 64 * 1024  # read size inside a compressed stream (see DamagedInput.read)
_CONTROL_BYTES = bytes([*range(0, 9), *range(14, 27), *range(28, 32)])  # not tab/LF/CR/FF/ESC
_SKIP_SUFFIXES = {".png", ".jpg", ".jpeg", ".gif", ".pt", ".pth", ".bin", ".safetensors", ".ckpt", ".npy",
                  ".npz", ".pkl", ".so", ".whl", ".zip", ".tar", ".zst", ".xz", ".bz2", ".pyc"}


class UnusableInput(Exception):
    """Nothing could be triaged; the message is one line for the user."""


@dataclass(frozen=True, slots=True)
class Source:
    """One readable input: `name` is what evidence cites (path relative to the root given)."""

    name: str
    # where `name` is: path = prefix + name (one prefix string per directory given, not 100,000
    # full paths); None for stdin
    prefix: str | None
    info: PathInfo
    size: int
    mtime: float

    @property
    def path(self) -> str | None:
        """The file's path (a string: 100,000 Path objects cost a second); None for stdin."""
        return None if self.prefix is None else self.prefix + self.name


def _inside(path: Path, within: tuple[Path, ...] | None) -> bool:
    """Whether `path` (symlinks resolved) lies below one of `within` (None: anywhere)."""
    if within is None:
        return True
    try:
        real = path.resolve()
    except (OSError, RuntimeError):
        return False
    return any(real == r or real.is_relative_to(r) for r in within)


def _walk(root: str, warnings: list[tuple[str, str]], within: tuple[Path, ...] | None = None
          ) -> Iterator[os.DirEntry]:
    """Files below `root`, following directory symlinks once (loops are reported, not followed);
    with `within`, a symlink that leads outside those roots is reported and not followed. Plain
    strings and directory entries, no Path objects: a job can have 100,000 files."""
    seen_dirs: set[tuple[int, int]] = set()
    stack = [root]
    while stack:
        directory = stack.pop()
        try:
            st = os.stat(directory)
        except OSError as exc:
            warnings.append((directory, f"cannot read directory: {exc.strerror or exc}"))
            continue
        key = (st.st_dev, st.st_ino)
        if key in seen_dirs:
            warnings.append((directory, "symlink loop: directory already visited, skipped"))
            continue
        seen_dirs.add(key)
        try:
            with os.scandir(directory) as listing:
                entries = sorted(listing, key=lambda e: e.name)
        except OSError as exc:
            warnings.append((directory, f"cannot list directory: {exc.strerror or exc}"))
            continue
        subdirs = []
        for entry in entries:
            if entry.name.startswith("."):
                continue
            if within is not None and entry.is_symlink() and not _inside(Path(entry.path), within):
                warnings.append((entry.path, "symlink leads outside the allowed roots, skipped"))
                continue
            try:
                if entry.is_dir():
                    subdirs.append(entry.path)
                elif entry.is_file():
                    yield entry
                elif entry.is_symlink():
                    warnings.append((entry.path, "broken or looping symlink, skipped"))
                else:
                    warnings.append((entry.path, "not a regular file (fifo, socket or device), skipped"))
            except OSError as exc:
                warnings.append((entry.path, f"cannot stat: {exc.strerror or exc}"))
        stack.extend(reversed(subdirs))


def _suffix(name: str) -> str:
    """`PurePath(name).suffix`, lower-cased, without building a path."""
    dot = name.rfind(".")
    return name[dot:].lower() if 0 < dot < len(name) - 1 else ""


def list_sources(inputs: list[str], within: tuple[Path, ...] | None = None
                 ) -> tuple[list[Source], list[tuple[str, str]]]:
    """Resolve the user's inputs into readable sources and (path, problem) warnings. `within`: read
    nothing whose real path is outside these roots (the chat bot's allowed roots)."""
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
        if not _inside(root, within):
            warnings.append((raw, "outside the allowed roots, skipped"))
            continue
        if not root.is_dir():
            if _suffix(root.name) in _SKIP_SUFFIXES:
                continue
            _add(sources, warnings, seen_files, "", str(root), PurePath(*root.parts[-3:]).parts, None)
            continue
        top = str(root)
        prefix = top if top.endswith(os.sep) else top + os.sep  # every entry's path starts with it
        for entry in _walk(top, warnings, within):
            if _suffix(entry.name) in _SKIP_SUFFIXES:
                continue
            name = entry.path[len(prefix):]
            _add(sources, warnings, seen_files, prefix, name, name.split(os.sep), entry)
    return sources, warnings


def holds_many_files(paths: list[str], many: int) -> bool:
    """Whether the directories given hold at least `many` entries, counted without building the
    listing (stops at `many`; cheap for small inputs)."""
    count = 0
    pending = [p for p in paths if os.path.isdir(p)]
    while pending:
        try:
            with os.scandir(pending.pop()) as listing:
                for entry in listing:
                    count += 1
                    if count >= many:
                        return True
                    if entry.is_dir(follow_symlinks=False):
                        pending.append(entry.path)
        except OSError:
            continue
    return False


def _add(sources: list[Source], warnings: list[tuple[str, str]], seen: set[tuple[int, int]], prefix: str,
         name: str, parts: list[str] | tuple[str, ...], entry: os.DirEntry | None) -> None:
    """One file found (at prefix + name): a source, unless it is not a regular file or was already listed."""
    path = prefix + name
    try:
        st = entry.stat() if entry is not None else os.stat(path)
    except OSError as exc:
        warnings.append((path, f"cannot stat: {exc.strerror or exc}"))
        return
    if not stat.S_ISREG(st.st_mode):
        warnings.append((path, "not a regular file (fifo, socket or device), skipped"))
        return
    if (st.st_dev, st.st_ino) in seen:
        return
    seen.add((st.st_dev, st.st_ino))
    sources.append(Source(name, prefix, path_info_of(tuple(parts)), st.st_size, st.st_mtime))


def looks_binary(head: bytes) -> bool:
    """A file is binary when a large share of its first bytes are not text. NUL bytes are left out
    of the count: a block of them is what a crash (sparse tail) or copytruncate leaves in a log
    whose rest is text."""
    head = head.replace(b"\0", b"")
    if not head:
        return False
    text = head.decode("utf-8", errors="replace")
    control = len(head) - len(head.translate(None, _CONTROL_BYTES))
    return (text.count("\ufffd") + control) / len(text) > 0.3


class DamagedInput(io.RawIOBase):
    """A stream that ends, instead of raising, where its data is damaged (a truncated or corrupt
    gzip member); `error` says what happened and `offset` how many bytes were read before it."""

    def __init__(self, inner: BinaryIO) -> None:
        self.inner = inner
        self.error: str | None = None
        self.offset = 0

    def readable(self) -> bool:
        return True

    def _guard(self, read, arg: int) -> bytes:
        if self.error is not None:
            return b""
        try:
            data = read(arg)
        except (EOFError, zlib.error, gzip.BadGzipFile) as exc:
            self.error = f"damaged compressed data after {self.offset} bytes ({exc}); what came before is used"
            return b""
        self.offset += len(data)
        return data

    def read(self, size: int = -1) -> bytes:
        """Read in small steps: a damaged member loses at most the step it was found in."""
        parts: list[bytes] = []
        want = size if size is not None and size >= 0 else 1 << 62
        while want > 0:
            data = self._guard(self.inner.read, min(want, _STEP))
            if not data:
                break
            parts.append(data)
            want -= len(data)
        return b"".join(parts)

    def readline(self, size: int = -1) -> bytes:  # type: ignore[override]
        return self._guard(self.inner.readline, size)

    def readinto(self, buffer) -> int:  # noqa: ANN001 - RawIOBase protocol
        data = self.read(len(buffer))
        buffer[: len(data)] = data
        return len(data)

    def close(self) -> None:
        self.inner.close()
        super().close()


def _sniff_stdin(stdin: BinaryIO) -> BinaryIO:
    """Stdin sniffed like a file: gzip decompressed, binary refused (ValueError), closed -> ValueError."""
    try:
        head = stdin.peek(_SNIFF_BYTES)[:_SNIFF_BYTES] if hasattr(stdin, "peek") else b""
    except (OSError, ValueError) as exc:
        raise ValueError(f"stdin cannot be read ({exc})") from None
    stream: BinaryIO = stdin
    if head[:2] == b"\x1f\x8b":
        stream = DamagedInput(gzip.GzipFile(fileobj=stdin, mode="rb"))  # type: ignore[assignment]
        head = stream.read(_SNIFF_BYTES)
        stream = io.BufferedReader(_Prefixed(head, stream))  # type: ignore[assignment]
    if looks_binary(head):
        raise ValueError("binary data on stdin (not a text log)")
    return stream


class _Prefixed(io.RawIOBase):
    """`head` (already read) followed by the rest of `rest`."""

    def __init__(self, head: bytes, rest: BinaryIO) -> None:
        self.head, self.rest = head, rest
        self.error = getattr(rest, "error", None)

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:  # noqa: ANN001 - RawIOBase protocol
        if self.head:
            n = min(len(buffer), len(self.head))
            buffer[:n], self.head = self.head[:n], self.head[n:]
            return n
        data = self.rest.read(len(buffer))
        self.error = getattr(self.rest, "error", None)
        buffer[: len(data)] = data
        return len(data)


def open_source(source: Source, stdin: BinaryIO | None = None) -> BinaryIO:
    """Open a source for binary streaming; gzip files are decompressed on the fly.

    Raises OSError for unreadable files and ValueError for binary ones.
    """
    if source.path is None:
        if stdin is None or stdin.closed:
            raise ValueError("stdin is closed: give log files, or pipe a log into -")
        return _sniff_stdin(stdin)
    handle: BinaryIO = open(source.path, "rb")  # noqa: SIM115 - returned to the caller
    try:
        magic = handle.read(2)
        handle.seek(0)
        if magic == b"\x1f\x8b":
            handle.close()
            handle = DamagedInput(gzip.open(source.path, "rb"))  # type: ignore[assignment]  # noqa: SIM115
            head = handle.read(_SNIFF_BYTES)
            if looks_binary(head):
                raise ValueError("binary file (not a text log), skipped")
            handle.close()
            return DamagedInput(gzip.open(source.path, "rb"))  # type: ignore[return-value]  # noqa: SIM115
        head = handle.read(_SNIFF_BYTES)
        if head and not head.strip(b"\0"):  # a leading NUL block: decide on the text after it
            head = handle.read(1 << 20).lstrip(b"\0")[:_SNIFF_BYTES]
        if looks_binary(head):
            raise ValueError("binary file (not a text log), skipped")
        handle.seek(0)
        return handle
    except BaseException:
        handle.close()
        raise
