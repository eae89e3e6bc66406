"""Reading JSONL imports line by line, with a per-line size cap.

An import file is read one line at a time: a single huge line (a pasted log, a corrupted file) is
skipped after `max_bytes` without being held in memory, and a last line without its newline (a
writer that crashed mid-line) is told apart from a whole line, so a torn journal still imports.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import IO

MAX_LINE_BYTES = 1 << 20  # an incident record is a few KiB; the signature is capped well below this
_SKIP_CHUNK = 1 << 16


@dataclass(frozen=True)
class Line:
    number: int
    text: str | None  # None: longer than the cap (skipped unread) or not UTF-8
    whole: bool  # ended by a newline (False only for a last line cut short)
    problem: str = ""


def _skip_rest(stream: IO, first: str | bytes) -> bool:
    """Read to the end of the current line in small chunks; True if it ended with a newline."""
    chunk = first
    while chunk and not _ends_line(chunk):
        chunk = stream.readline(_SKIP_CHUNK)
    return bool(chunk)


def _ends_line(chunk: str | bytes) -> bool:
    return chunk.endswith(b"\n" if isinstance(chunk, bytes) else "\n")


def read_lines(stream: IO, max_bytes: int = MAX_LINE_BYTES) -> Iterator[Line]:
    """The non-blank lines of a text or binary stream, numbered from 1; over-long ones as `text=None`."""
    number = 0
    while True:
        raw = stream.readline(max_bytes + 1)
        if not raw:
            return
        number += 1
        if len(raw) > max_bytes and not _ends_line(raw):
            whole = _skip_rest(stream, raw)
            yield Line(number, None, whole, f"longer than {max_bytes} bytes, skipped")
            continue
        whole = _ends_line(raw)
        if isinstance(raw, bytes):
            try:
                raw = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                yield Line(number, None, whole, f"not UTF-8 ({exc.reason} at byte {exc.start})")
                continue
        if raw.strip():
            yield Line(number, raw, whole)
