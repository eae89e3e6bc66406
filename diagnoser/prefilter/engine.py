"""One pass over the bytes for all patterns at once.

Running 60+ regexes over every line is what makes naive triage slow. Hyperscan compiles all
patterns into one automaton and reports (pattern, end offset) in a single scan at GB/s; the
scanner then re-reads only the hit lines with Python `re`. Without Hyperscan (non-x86 machines)
each pattern is searched over the whole chunk with `re`, which is slower but gives the same hits.
"""

from __future__ import annotations

import hashlib
import os
import re
from abc import ABC, abstractmethod
from collections.abc import Sequence
from pathlib import Path

import platformdirs

from diagnoser import atomic

try:  # Hyperscan ships manylinux wheels for x86_64 only
    import hyperscan
except ImportError:  # pragma: no cover - exercised on other platforms
    hyperscan = None

ENGINE_VERSION = "hs-prefilter-4"  # bump when to_hyperscan changes: it keys the compiled-database cache
_NAMED_GROUP = re.compile(r"\(\?P<\w+>")
_LOOKAROUND_START = re.compile(r"\(\?<?[=!]")


def drop_lookarounds(pattern: str) -> str:
    """The pattern without its lookahead/lookbehind groups (nested groups inside them included):
    Hyperscan has none, and dropping one only widens the prefilter; Python `re` confirms the line."""
    out, i = [], 0
    while (m := _LOOKAROUND_START.search(pattern, i)) is not None:
        out.append(pattern[i:m.start()])
        depth, j = 1, m.end()
        while j < len(pattern) and depth:
            c = pattern[j]
            if c == "\\":
                j += 2
                continue
            depth += c == "("
            depth -= c == ")"
            j += 1
        i = j
    out.append(pattern[i:])
    return "".join(out)
# A trailing `.*`, `.+` or open-ended group adds nothing to *finding* the line but makes Hyperscan
# report one match per following character; the hit line is re-read with Python `re` anyway.
_OPEN_TAIL = re.compile(r"(?:\((?:\?P<\w+>|\?:)?\.[*+]\??\)|\.[*+]\??)\$?$")


def crlf_tolerant(pattern: str) -> str:
    """Every end-of-line anchor `$` (outside character classes) as `\\r?$`: in a multiline scan of raw
    bytes `$` matches only before `\\n`, so a log written with CRLF line ends would hide every pattern that
    ends in `$` (the clean line the exact pattern confirms on has its `\\r` stripped already)."""
    out, i = [], 0
    while i < len(pattern):
        c = pattern[i]
        if c == "\\":
            out.append(pattern[i:i + 2])
            i += 2
            continue
        if c == "[":  # copy the class whole: a leading `^` and a first `]` are part of it
            j = i + 1 + (pattern[i + 1:i + 2] == "^")
            j += pattern[j:j + 1] == "]"
            while j < len(pattern) and pattern[j] != "]":
                j += 2 if pattern[j] == "\\" else 1
            out.append(pattern[i:j + 1])
            i = j + 1
            continue
        out.append("\\r?$" if c == "$" else c)
        i += 1
    return "".join(out)


def _unanchored(pattern: str) -> str:
    """Without a line-start anchor: it fails behind a launcher's prefix (`3: `, `[rank3]: `, Ray's
    `(pid=…)`); the exact pattern is confirmed on the line with its prefix split off (matching.py)."""
    caseless = pattern.startswith("(?i)")
    body = pattern[4:] if caseless else pattern
    return ("(?i)" if caseless else "") + (body[1:] if body.startswith("^") else body)


def to_hyperscan(pattern: str) -> tuple[bytes, int]:
    """Translate a Python pattern of the runbook subset into a Hyperscan *prefilter*.

    The result may match more lines than the pattern (word boundaries dropped, open tails cut):
    Hyperscan only finds candidate lines, which are confirmed with the exact Python pattern (on the line
    and on the line without its launcher prefix). `\b`
    next to frequent words ("loss", "step") costs Hyperscan 3-5x its throughput.
    """
    flags = 0
    pattern = _unanchored(pattern)
    if pattern.startswith("(?i)"):
        pattern = pattern[4:]
        flags |= hyperscan.HS_FLAG_CASELESS
    flags |= hyperscan.HS_FLAG_MULTILINE
    trimmed = _OPEN_TAIL.sub("", pattern)
    while trimmed != pattern and trimmed:
        pattern, trimmed = trimmed, _OPEN_TAIL.sub("", trimmed)
    pattern = crlf_tolerant(drop_lookarounds(pattern.replace(r"\b", "")))
    return _NAMED_GROUP.sub("(", pattern).encode("utf-8"), flags


class MultiMatcher(ABC):
    """Finds, in a byte buffer, the end offsets of every pattern's matches."""

    @abstractmethod
    def scan(self, data: bytes) -> list[tuple[int, int]]:
        """Sorted (end_offset, pattern_index) pairs; several per line are possible."""


class HyperscanMatcher(MultiMatcher):
    """All patterns in one Hyperscan database; compiled databases are cached on disk by content."""

    def __init__(self, patterns: Sequence[str], cache_dir: Path | None = None) -> None:
        self._db = _cached_database(list(patterns), cache_dir)
        self._scratch = hyperscan.Scratch(self._db)

    def scan(self, data: bytes) -> list[tuple[int, int]]:
        hits: list[tuple[int, int]] = []

        def on_match(pattern_id: int, start: int, end: int, flags: int, context: object) -> None:
            hits.append((end, pattern_id))

        self._db.scan(data, match_event_handler=on_match, scratch=self._scratch)
        hits.sort()
        return hits


class RegexMatcher(MultiMatcher):
    """Fallback: one `re` search per pattern over the whole buffer."""

    def __init__(self, patterns: Sequence[str]) -> None:
        self._patterns = [re.compile(_NAMED_GROUP.sub("(?:", crlf_tolerant(_unanchored(p))).encode("utf-8"), re.M)
                          for p in patterns]

    def scan(self, data: bytes) -> list[tuple[int, int]]:
        hits = [(m.end(), i) for i, p in enumerate(self._patterns) for m in p.finditer(data)]
        hits.sort()
        return hits


def _compile(translated: list[tuple[bytes, int]]) -> hyperscan.Database:
    db = hyperscan.Database(mode=hyperscan.HS_MODE_BLOCK)
    expressions, flags = zip(*translated, strict=True)
    # no SINGLEMATCH: it is per scan and would hide every line after the first
    db.compile(expressions=list(expressions), ids=list(range(len(translated))), elements=len(translated),
               flags=list(flags))
    return db


def _cached_database(patterns: list[str], cache_dir: Path | None) -> hyperscan.Database:
    """Compiling ~300 patterns takes ~1 s; loading the serialised database takes milliseconds."""
    directory = cache_dir or Path(os.environ.get("DIAGNOSER_CACHE") or platformdirs.user_cache_dir("diagnoser"))
    translated = [to_hyperscan(p) for p in patterns]
    # keyed by what is compiled: a change to the translation can never load a stale database
    digest = hashlib.sha256(ENGINE_VERSION.encode())
    for expression, flags in translated:
        digest.update(b"\0%d:" % flags + expression)
    key = digest.hexdigest()[:24]
    path = directory / f"hs-{key}.db"
    try:
        return hyperscan.loadb(path.read_bytes(), mode=hyperscan.HS_MODE_BLOCK)
    except (OSError, hyperscan.error, TypeError):
        pass  # missing or stale cache entry: compile
    db = _compile(translated)
    try:
        directory.mkdir(parents=True, exist_ok=True)
        atomic.write_bytes(path, hyperscan.dumpb(db))  # concurrent triages never read a half-written file
    except OSError:
        pass  # a read-only home is fine: just slower
    return db


def build_matcher(patterns: Sequence[str], prefer_hyperscan: bool = True, cache_dir: Path | None = None,
                  ) -> MultiMatcher:
    """Hyperscan if installed and every pattern compiles there, else the `re` fallback."""
    if prefer_hyperscan and hyperscan is not None:
        try:
            return HyperscanMatcher(patterns, cache_dir)
        except hyperscan.error:
            pass  # a pattern outside Hyperscan's subset: correctness first
    return RegexMatcher(patterns)
