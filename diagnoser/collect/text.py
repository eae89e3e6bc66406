"""Turn raw log bytes into clean, bounded text lines.

Logs from real jobs carry ANSI colours, carriage-return progress bars, NUL bytes, invalid UTF-8
and lines of any length. Nothing here may raise on such input.
"""

from __future__ import annotations

import re

MAX_LINE_CHARS = 4096  # evidence lines longer than this are cut around the interesting part

_ANSI = re.compile(r"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(?:\x07|\x1b\\)|[@-Z\\-_])")
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")


def decode(raw: bytes) -> str:
    """Decode bytes as UTF-8, replacing invalid sequences instead of failing."""
    return raw.decode("utf-8", errors="replace")


def clean_line(text: str) -> str:
    """Strip ANSI escapes, control characters and the trailing newline.

    Carriage returns are kept: `visible_segments` decides what a terminal would have shown.
    """
    text = text.rstrip("\r\n")
    if "\x1b" in text:
        text = _ANSI.sub("", text)
    return _CONTROL.sub("", text)


def visible_segments(text: str) -> list[str]:
    """Split a line at carriage returns (tqdm-style redraws) into non-empty segments.

    A terminal shows only the last segment, but an error printed in the middle of a redraw
    sequence is still evidence, so callers search every segment.
    """
    if "\r" not in text:
        return [text]
    return [seg for seg in text.split("\r") if seg.strip()] or [""]


def truncate_around(text: str, start: int, end: int, limit: int = MAX_LINE_CHARS) -> str:
    """Cut `text` to `limit` characters keeping the span [start, end) visible."""
    if len(text) <= limit:
        return text
    half = max(0, (limit - (end - start)) // 2)
    lo = max(0, start - half)
    hi = min(len(text), lo + limit)
    lo = max(0, hi - limit)
    prefix = "…" if lo > 0 else ""
    suffix = "…" if hi < len(text) else ""
    return f"{prefix}{text[lo:hi]}{suffix}"
