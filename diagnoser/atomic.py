"""Write a file whole or not at all: a unique temporary file in the same directory, renamed over the target.

Readers (a concurrent triage, a controller resuming after a crash, a bot reading an approval) see the old
content or the new, never half of either. Two writers of one file never share a temporary name (a fixed
`<name>.tmp` would let one rename the other's half-written file), and a write that fails leaves no
temporary file behind. The new file gets the mode a plain `open()` would give it (0o666 less the umask)
unless the caller asks for another: `mkstemp`'s 0o600 would silently make an export unreadable to the
colleague it was written for.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


def _umask() -> int:
    """The process umask, read without changing it where /proc allows (os.umask() must set it to read it)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def default_mode() -> int:
    return 0o666 & ~_umask()


@contextmanager
def replacing(path: Path, mode: int | None = None, durable: bool = False) -> Iterator[Path]:
    """A fresh temporary path next to `path`; when the block ends cleanly it replaces `path` (with `mode`,
    default: what `open()` would give). `durable`: flushed to disk, and the rename too, before returning (the
    controller's own state survives a power loss). On an exception the temporary file is removed."""
    fd, name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    tmp = Path(name)
    try:
        yield tmp
        os.chmod(tmp, default_mode() if mode is None else mode)
        if durable:
            with tmp.open("rb+") as fh:
                os.fsync(fh.fileno())
        os.replace(tmp, path)
        if durable:
            _fsync_directory(path.parent)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def write_text(path: Path, text: str, mode: int | None = None, durable: bool = False) -> None:
    """`path.write_text(text)` (UTF-8), atomically."""
    with replacing(path, mode, durable) as tmp:
        tmp.write_text(text, encoding="utf-8")


def write_bytes(path: Path, data: bytes, mode: int | None = None, durable: bool = False) -> None:
    """`path.write_bytes(data)`, atomically."""
    with replacing(path, mode, durable) as tmp:
        tmp.write_bytes(data)


def _fsync_directory(directory: Path) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return  # a platform without directory fds: the file itself is on disk
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
