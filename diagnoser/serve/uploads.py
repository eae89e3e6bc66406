"""Uploaded logs to a private temp directory: plain files and .tar / .tar.gz / .tgz archives.

`receive` parses a multipart/form-data body as it streams in (python-multipart's push parser; the
file IO in a worker thread): every file part of the field `files` goes straight to its place on disk.

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
from typing import Any, BinaryIO

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
    """A fresh temp directory that receives files, counting every byte written against `max_bytes`.

    Parts arrive piece by piece (`begin`, `write`..., `end`): a log is written to its place at once; an
    archive is kept aside (`spool`, outside the triaged tree) until it is complete, then unpacked."""

    def __init__(self, max_bytes: int) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="diagnoser-upload-"))
        self.spool = Path(tempfile.mkdtemp(prefix="diagnoser-archive-"))
        self.max_bytes = max_bytes
        self.written = 0
        self.files = 0
        self._out: BinaryIO | None = None
        self._archive: tuple[PurePosixPath, Path] | None = None

    def _create(self, rel: PurePosixPath) -> BinaryIO:
        dest = self.root.joinpath(*rel.parts)
        if dest.exists():
            raise UploadError(f"{rel} given twice")
        dest.parent.mkdir(parents=True, exist_ok=True)
        self.files += 1
        return open(dest, "xb")  # noqa: SIM115 - closed by end() / remove()

    def _count(self, n: int) -> None:
        self.written += n
        if self.written > self.max_bytes:
            raise UploadError(f"upload unpacks to more than {self.max_bytes} bytes", too_large=True)

    def begin(self, name: str) -> None:
        """A new uploaded file named `name` (a relative path; an archive by its suffix)."""
        rel = safe_relpath(name)
        if rel.name.lower().endswith(ARCHIVES):
            held = self.spool / f"{len(list(self.spool.iterdir()))}.archive"
            self._archive, self._out = (rel, held), open(held, "xb")  # noqa: SIM115
        else:
            self._archive, self._out = None, self._create(rel)

    def write(self, data: bytes) -> None:
        if self._out is None:
            raise UploadError("file data outside a file part")
        if self._archive is None:
            self._count(len(data))
        self._out.write(data)

    def end(self) -> None:
        if self._out is not None:
            self._out.close()
            self._out = None
        if self._archive is not None:
            rel, held = self._archive
            self._archive = None
            with open(held, "rb") as fh:
                self._unpack(rel, fh)
            held.unlink()

    @property
    def in_part(self) -> bool:
        """A file part has begun and not ended."""
        return self._out is not None

    def received(self) -> None:
        """The body is complete: drop the archives' space (the unpacked tree stays for the triage)."""
        shutil.rmtree(self.spool, ignore_errors=True)

    def _copy(self, src: BinaryIO, rel: PurePosixPath) -> None:
        with self._create(rel) as out:
            while chunk := src.read(CHUNK):
                self._count(len(chunk))
                out.write(chunk)

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
        """Delete everything: the received tree and the archives kept aside."""
        if self._out is not None:
            self._out.close()
            self._out = None
        shutil.rmtree(self.spool, ignore_errors=True)
        shutil.rmtree(self.root, ignore_errors=True)


FIELD = "files"
BATCH = 1 << 20  # body bytes handed to the parser thread at once


async def receive(request: Any, target: UploadDir) -> None:
    """Stream a multipart/form-data request body into `target` (UploadError on a bad body)."""
    from python_multipart.multipart import MultipartParser, parse_options_header
    from starlette.concurrency import run_in_threadpool

    kind, options = parse_options_header(request.headers.get("content-type", ""))
    if kind != b"multipart/form-data" or not options.get(b"boundary"):
        raise UploadError("send multipart/form-data with one or more `files` parts")
    header: dict[bytes, bytes] = {}
    name, value = bytearray(), bytearray()

    def on_header_end() -> None:
        header[bytes(name).lower()] = bytes(value)
        name.clear()
        value.clear()

    def on_headers_finished() -> None:
        _, disposition = parse_options_header(header.get(b"content-disposition", b""))
        header.clear()
        if disposition.get(b"name") != FIELD.encode() or b"filename" not in disposition:
            raise UploadError(f"unexpected form field: only `{FIELD}` file parts are read")
        if target.files + 1 > MAX_MEMBERS:
            raise UploadError(f"more than {MAX_MEMBERS} files")
        target.begin(disposition[b"filename"].decode("utf-8", "replace"))

    parser = MultipartParser(options[b"boundary"], {
        "on_header_field": lambda d, s, e: name.extend(d[s:e]),
        "on_header_value": lambda d, s, e: value.extend(d[s:e]),
        "on_header_end": on_header_end,
        "on_headers_finished": on_headers_finished,
        "on_part_data": lambda d, s, e: target.write(d[s:e]),
        "on_part_end": target.end,
    })

    def feed(data: bytes) -> None:
        try:
            parser.write(data)
        except UploadError:
            raise
        except Exception as exc:  # noqa: BLE001 - python-multipart's errors: a malformed body
            raise UploadError(f"malformed multipart body: {exc}") from None

    pending = bytearray()
    async for chunk in request.stream():
        pending += chunk
        if len(pending) >= BATCH:
            await run_in_threadpool(feed, bytes(pending))
            pending.clear()
    if pending:
        await run_in_threadpool(feed, bytes(pending))
    await run_in_threadpool(parser.finalize)
    if target.in_part:
        raise UploadError("the body ended inside a file part (truncated upload)")
    target.received()
