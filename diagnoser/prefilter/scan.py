"""Run the collectors and the matcher over every source, in parallel processes when it pays.

Each worker compiles the pattern database once and returns only small results (matches capped per
pattern and file, topology, counts), so memory stays bounded however many GB are read.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from diagnoser.collect import pyspy
from diagnoser.collect.files import Source, open_source
from diagnoser.collect.prefixes import split_prefix
from diagnoser.collect.scanner import Event, Progress, scan_stream
from diagnoser.models import InputWarning, LogRecord, SignatureMatch
from diagnoser.prefilter.catalog import CATALOG_DIR
from diagnoser.prefilter.engine import MultiMatcher, build_matcher
from diagnoser.prefilter.matching import PatternTable, Topology, confirm
from diagnoser.prefilter.runbooks import Runbook, default_runbook_dir, load_runbooks

PARALLEL_MIN_BYTES = 64 << 20  # below this, starting processes costs more than it saves


@dataclass
class SourceResult:
    source: str
    kind: str
    node: str | None
    matches: list[SignatureMatch] = field(default_factory=list)
    topology: Topology = field(default_factory=Topology)
    weak: list[Event] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)  # runbook id -> lines matched in this file
    bytes: int = 0
    lines: int = 0
    first_time: datetime | None = None
    last_time: datetime | None = None
    last_progress: Progress | None = None
    rank: int | None = None  # the rank whose log this is, when it is one rank's log
    stack: pyspy.Stack | None = None  # when the file is a py-spy dump
    warning: str | None = None
    tail: list[LogRecord] = field(default_factory=list)  # the file's last lines (see collect.scanner.TAIL_LINES)


@dataclass
class ScanResult:
    sources: list[SourceResult]
    warnings: list[InputWarning]
    seconds: float

    @property
    def matches(self) -> list[SignatureMatch]:
        return [m for s in self.sources for m in s.matches]

    @property
    def topology(self) -> Topology:
        topo = Topology()
        for s in self.sources:
            topo.merge(s.topology)
        return topo


class _Worker:
    """Per-process state: runbooks and the compiled matcher."""

    runbooks: list[Runbook]
    table: PatternTable
    matcher: MultiMatcher

    loaded_from: tuple | None = None

    @classmethod
    def setup(cls, runbook_dir: str | None, runbooks: list[Runbook] | None = None) -> None:
        """Load and compile once per process (again only if the rules changed: the runbook or catalog
        files, or the rule list given)."""
        directory = Path(runbook_dir) if runbook_dir else default_runbook_dir()
        files = [*directory.glob("*.md"), *CATALOG_DIR.glob("*.yaml")]
        stamp = (str(directory), max((p.stat().st_mtime for p in files), default=0.0),
                 None if runbooks is None else hash(tuple(r.id for r in runbooks)))
        if cls.loaded_from == stamp:
            return
        cls.loaded_from = stamp
        cls.runbooks = runbooks if runbooks is not None else load_runbooks(directory)
        cls.table = PatternTable.build(cls.runbooks)
        cls.matcher = build_matcher(cls.table.patterns)


def _scan_one(source: Source, on_progress: Callable[[int], None] | None = None) -> SourceResult:
    result = SourceResult(source.name, source.info.kind, source.info.node, rank=source.info.rank)
    if source.path is not None and source.size <= pyspy.MAX_DUMP_BYTES and pyspy.NAME_HINT.search(source.name):
        try:
            text = source.path.read_text(encoding="utf-8", errors="replace")
        except OSError as exc:
            result.warning = exc.strerror or str(exc)
            return result
        if pyspy.looks_like_dump(text):
            result.stack = pyspy.main_stack(text)
            result.bytes, result.lines = len(text.encode()), text.count("\n")
            return result
    year = datetime.fromtimestamp(source.mtime or time.time(), tz=UTC).year
    try:
        stream = open_source(source, stdin=getattr(sys.stdin, "buffer", None) if source.path is None else None)
    except (OSError, ValueError) as exc:
        result.warning = getattr(exc, "strerror", None) or str(exc)
        return result
    try:
        scan = scan_stream(stream, source.name, source.info, _Worker.matcher, year, on_progress)
    except OSError as exc:  # e.g. a file truncated or removed while being read
        result.warning = f"read error after some bytes: {exc.strerror or exc}"
        return result
    finally:
        damaged = getattr(stream, "error", None) or getattr(getattr(stream, "raw", None), "error", None)
        if source.path is not None:
            stream.close()
    if damaged:
        result.warning = damaged  # the source still counts: its evidence before the damage is kept
    result.matches, result.topology, result.weak = confirm(scan.events, _Worker.table, _Worker.runbooks)
    table = _Worker.table
    for pattern, count in scan.counts.items():
        kind, index = table.owner[pattern]
        if kind == "runbook":
            book_id = _Worker.runbooks[index].id
            result.counts[book_id] = max(result.counts.get(book_id, 0), count)
    result.bytes, result.lines = scan.bytes, scan.lines
    result.first_time, result.last_time = scan.first_time, scan.last_time
    result.last_progress = scan.last_progress
    result.tail = scan.tail
    if result.rank is None and scan.last_progress is not None:
        result.rank = split_prefix(scan.last_progress.text).rank
    return result


def _scan_one_in_worker(source: Source) -> SourceResult:
    return _scan_one(source)


def scan_sources(
    sources: list[Source],
    runbook_dir: Path | None = None,
    workers: int | None = None,
    on_progress: Callable[[int], None] | None = None,
    runbooks: list[Runbook] | None = None,
) -> ScanResult:
    """Scan all sources; results keep the order of `sources`."""
    started = time.perf_counter()
    total = sum(s.size for s in sources)
    workers = workers if workers is not None else min(os.cpu_count() or 1, 8)
    parallel = workers > 1 and len(sources) > 1 and total >= PARALLEL_MIN_BYTES and all(s.path for s in sources)
    if parallel:
        order = sorted(range(len(sources)), key=lambda i: -sources[i].size)  # big files first
        results: list[SourceResult | None] = [None] * len(sources)
        with ProcessPoolExecutor(max_workers=workers, initializer=_Worker.setup,
                                 initargs=(str(runbook_dir) if runbook_dir else None,)) as pool:
            futures = {pool.submit(_scan_one_in_worker, sources[i]): i for i in order}
            for future, i in futures.items():
                results[i] = future.result()
                if on_progress:
                    on_progress(sources[i].size)
        done = [r for r in results if r is not None]
    else:
        _Worker.setup(str(runbook_dir) if runbook_dir else None, runbooks)
        done = [_scan_one(s, on_progress) for s in sources]
    warnings = [InputWarning(source=r.source, message=r.warning) for r in done if r.warning]
    return ScanResult(done, warnings, time.perf_counter() - started)
