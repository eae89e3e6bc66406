"""Uploaded logs to a private temp directory: plain files and .tar / .tar.gz / .tgz archives.

Names keep their relative path (`node1/rank0.log`: triage reads hosts and ranks from paths), and
are refused when absolute, with `..`, or empty. Archives are unpacked member by member: only
regular files and directories (no links, devices, FIFOs), at most `MAX_MEMBERS`, and at most
`max_bytes` unpacked in all (a gzip bomb stops there). Single `.gz` logs stay compressed (triage
reads them). The caller deletes the directory when the triage finished.
"""

from __future__ import annotations

import shutil
import tarfile
import tempfile
from pathlib import Path, PurePosixPath
from typing import BinaryIO

MAX_MEMBERS = 200_000
CHUNK = 1 << 20
ARCHIVES = (".tar", ".tar.gz", ".tgz")


class UploadError(ValueError):
    """The upload cannot be used (HTTP 400; `too_large`: 413)."""

    def __init__(self, message: str, too_large: bool = False) -> None:
        super().__init__(message)
        self.too_large = too_large


def safe_relpath(name: str) -> PurePosixPath:
    """A relative path inside the upload directory, or UploadError."""
    clean = name.replace("\\", "/")
    path = PurePosixPath(clean)
    if not clean or path.is_absolute() or clean.startswith("/") or any(p in ("..", "") for p in clean.split("/")
                                                                           if p != "."):
        raise UploadError(f"refused file name {name!r}: names must be relative, without '..'")
    parts = [p for p in path.parts if p != "."]
    if not parts:
        raise UploadError(f"refused file name {name!r}")
    return PurePosixPath(*parts)


class UploadDir:
    """A fresh temp directory that receives files, counting every byte written against `max_bytes`."""

    def __init__(self, max_bytes: int) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="diagnoser-upload-"))
        self.max_bytes = max_bytes
        self.written = 0
        self.files = 0

    def _copy(self, src: BinaryIO, rel: PurePosixPath) -> None:
        dest = self.root.joinpath(*rel.parts)
        if dest.exists():
            raise UploadError(f"{rel} given twice")
        dest.parent.mkdir(parents=True, exist_ok=True)
        with open(dest, "xb") as out:
            while chunk := src.read(CHUNK):
                self.written += len(chunk)
                if self.written > self.max_bytes:
                    raise UploadError(f"upload unpacks to more than {self.max_bytes} bytes", too_large=True)
                out.write(chunk)
        self.files += 1

    def add(self, name: str, stream: BinaryIO) -> None:
        """One uploaded part: an archive is unpacked, anything else is kept as a file."""
        rel = safe_relpath(name)
        if rel.name.lower().endswith(ARCHIVES):
            self._unpack(rel, stream)
        else:
            self._copy(stream, rel)

    def _unpack(self, rel: PurePosixPath, stream: BinaryIO) -> None:
        base = rel.parent
        try:
            with tarfile.open(fileobj=stream, mode="r|*") as tar:  # streamed: never seeks, never lists first
                for n, member in enumerate(tar):
                    if n >= MAX_MEMBERS:
                        raise UploadError(f"{rel}: more than {MAX_MEMBERS} archive members")
                    if member.isdir():
                        continue
                    name = safe_relpath(member.name)
                    if not member.isfile():
                        raise UploadError(f"{rel}: member {member.name!r} is a link or special file; refused")
                    src = tar.extractfile(member)
                    if src is not None:
                        self._copy(src, base / name)
        except tarfile.TarError as exc:
            raise UploadError(f"{rel}: not a readable tar archive ({exc})") from None
        except (EOFError, OSError) as exc:
            raise UploadError(f"{rel}: archive is damaged or truncated ({exc})") from None

    def remove(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)
