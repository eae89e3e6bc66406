"""Run the collectors and the matcher over every source, in parallel processes when it pays.

Each worker compiles the pattern database once and returns only small results (matches capped per
pattern and file, topology, counts), so memory stays bounded however many GB are read. Small files
travel in batches (one task and one result message per batch, not per file): a job of 100,000
per-rank logs is a few hundred tasks.
"""

from __future__ import annotations

import contextlib
import gc
import os
import sys
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path

from diagnoser.collect import pyspy
from diagnoser.collect.files import Source, open_source
from diagnoser.collect.prefixes import split_prefix
from diagnoser.collect.scanner import PROGRESS_TEXT, Event, Progress, scan_stream
from diagnoser.models import InputWarning, LogRecord, SignatureMatch
from diagnoser.prefilter.catalog import CATALOG_DIR
from diagnoser.prefilter.collateral import CollateralHit
from diagnoser.prefilter.engine import MultiMatcher, build_matcher
from diagnoser.prefilter.matching import PatternTable, Topology, confirm
from diagnoser.prefilter.merge import ResultMerger
from diagnoser.prefilter.runbooks import Runbook, default_runbook_dir, load_runbooks
from diagnoser.prefilter.tails import PackedTail, pack_tails, tail_ranks, tail_rows

# Below both, one process scans everything: starting workers (fork, compile or load the pattern
# database, ship results back) costs more than it saves (bench/scale.py measures the crossing).
PARALLEL_MIN_BYTES = 64 << 20
PARALLEL_MIN_FILES = 2000
BATCH_BYTES = 8 << 20  # a batch of small files holds about this many bytes ...
BATCH_FILES = 64  # ... or at most this many files (a worker holds a batch's records: ~30 MB at 512)
BATCHES_PER_WORKER = 4  # at least this many batches per worker, so no core idles at the end
# Context patterns whose hits are read only for their text (NCCL placement lines): no full record.
TEXT_ONLY_CONTEXTS = frozenset({"nccl_init", "nccl_oob", "nccl_net", "rank_claim"})


@dataclass(slots=True)
class SourceResult:
    source: str
    kind: str
    node: str | None
    matches: tuple[SignatureMatch, ...] = ()
    placed: tuple | None = None  # where ranks ran, by this file; folded into ScanResult.topology (merge.py)
    weak: tuple[Event, ...] = ()
    counts: dict[str, int] = field(default_factory=dict)  # runbook id -> lines matched in this file
    bytes: int = 0
    lines: int = 0
    first_time: datetime | None = None
    last_time: datetime | None = None
    last_progress: Progress | None = None  # its text is "" when progress_in_tail (see progress_text)
    rank: int | None = None  # the rank whose log this is, when it is one rank's log
    stack: pyspy.Stack | None = None  # when the file is a py-spy dump
    warning: str | None = None
    packed_tail: PackedTail | None = None  # the file's last lines (see collect.scanner.TAIL_LINES), compressed
    hits: tuple[CollateralHit, ...] = ()  # collateral matches beyond the budget, as facts (collateral.py)
    progress_in_tail: bool = False  # the last progress line is one of the tail's: its text is kept there only

    @property
    def tail(self) -> list[LogRecord]:
        """The file's last lines as records (unpacked on each call: keep the list if you need it twice)."""
        return self.packed_tail.records(self.source) if self.packed_tail else []

    def progress_text(self) -> str:
        """The last progress line's text (unpacks the tail when the text is kept only there)."""
        if self.last_progress is None:
            return ""
        if not self.progress_in_tail:
            return self.last_progress.text
        return next((r.text[:PROGRESS_TEXT] for r in self.tail if r.line == self.last_progress.line), "")

    @property
    def tail_ranks(self) -> tuple[tuple[int, str | None], ...]:
        """(rank, node) of the tail records on lines no match or error line of this file covers, in
        order (repeats left out): what the tail adds to the job's ranks without unpacking it."""
        if self.packed_tail is None:
            return ()
        ranks = self.packed_tail.ranks
        return ((self.rank, self.node),) if ranks is None else ranks


@dataclass
class ScanResult:
    sources: list[SourceResult]
    warnings: list[InputWarning]
    seconds: float
    topology: Topology = field(default_factory=Topology)  # where ranks ran, from every file in order

    @property
    def matches(self) -> list[SignatureMatch]:
        """The matches kept whole: every root-role one, the earliest collateral ones (collateral.py)."""
        return [m for s in self.sources for m in s.matches]

    @property
    def hits(self) -> list[CollateralHit]:
        """The other collateral matches, as facts."""
        return [h for s in self.sources for h in s.hits]


class _Worker:
    """Per-process state: runbooks and the compiled matcher."""

    runbooks: list[Runbook]
    table: PatternTable
    matcher: MultiMatcher
    text_only: frozenset[int]

    loaded_from: tuple | None = None  # (rule files and their time, ids of the rules compiled)

    @classmethod
    def setup(cls, runbook_dir: str | None, runbooks: list[Runbook] | None = None) -> None:
        """Load and compile once per process (again only if the rules changed: the runbook or catalog
        files, or the rule list given)."""
        directory = Path(runbook_dir) if runbook_dir else default_runbook_dir()
        files = [*directory.glob("*.md"), *CATALOG_DIR.glob("*.yaml")]
        read = (str(directory), max((p.stat().st_mtime for p in files), default=0.0))
        loaded = cls.loaded_from
        if loaded is not None and loaded[0] == read and (runbooks is None or loaded[1] == _ids(runbooks)):
            return
        cls.runbooks = runbooks if runbooks is not None else load_runbooks(directory)
        cls.loaded_from = (read, _ids(cls.runbooks))
        cls.table = PatternTable.build(cls.runbooks)
        cls.matcher = build_matcher(cls.table.patterns)
        cls.text_only = frozenset(i for i, (kind, j) in enumerate(cls.table.owner)
                                  if kind == "context" and cls.table.context_names[j] in TEXT_ONLY_CONTEXTS)


def _ids(runbooks: list[Runbook]) -> int:
    return hash(tuple(r.id for r in runbooks))


def _scan_one(source: Source, on_progress: Callable[[int], None] | None = None) -> SourceResult:
    result, tail = _scan_file(source, on_progress)
    if tail.records:
        result.packed_tail = PackedTail(pack_tails([tail_rows(tail.records)]), 0, tail.ranks)
    return result


@dataclass(frozen=True, slots=True)
class _Tail:
    records: list[LogRecord]
    ranks: tuple[tuple[int, str | None], ...] | None  # None: only the file's own (rank, node)


_NO_TAIL = _Tail([], ())


def _scan_file(source: Source, on_progress: Callable[[int], None] | None = None) -> tuple[SourceResult, _Tail]:
    """The result of one file, and its tail records (packed by the caller, alone or with a batch)."""
    result = SourceResult(source.name, source.info.kind, source.info.node, rank=source.info.rank)
    if source.path is not None and source.size <= pyspy.MAX_DUMP_BYTES and pyspy.NAME_HINT.search(source.name):
        try:
            with open(source.path, encoding="utf-8", errors="replace") as handle:
                text = handle.read()
        except OSError as exc:
            result.warning = exc.strerror or str(exc)
            return result, _NO_TAIL
        if pyspy.looks_like_dump(text):
            result.stack = pyspy.main_stack(text)
            result.bytes, result.lines = len(text.encode()), text.count("\n")
            return result, _NO_TAIL
    year = datetime.fromtimestamp(source.mtime or time.time(), tz=UTC).year
    try:
        stream = open_source(source, stdin=getattr(sys.stdin, "buffer", None) if source.path is None else None)
    except (OSError, ValueError) as exc:
        result.warning = getattr(exc, "strerror", None) or str(exc)
        return result, _NO_TAIL
    try:
        scan = scan_stream(stream, source.name, source.info, _Worker.matcher, year, on_progress,
                           light=_Worker.text_only)
    except OSError as exc:  # e.g. a file truncated or removed while being read
        result.warning = f"read error after some bytes: {exc.strerror or exc}"
        return result, _NO_TAIL
    finally:
        damaged = getattr(stream, "error", None) or getattr(getattr(stream, "raw", None), "error", None)
        if source.path is not None:
            stream.close()
    if damaged:
        result.warning = damaged  # the source still counts: its evidence before the damage is kept
    matches, topology, weak = confirm(scan.events, _Worker.table, _Worker.runbooks)
    result.weak = tuple(weak)
    result.matches = tuple(matches)
    if topology.placements or topology.node_ips or topology.task_nodes or topology.task_exits or topology.facts:
        # a line that names no node is the file's node's (a per-node directory layout)
        facts = tuple(f if f.host or not result.node else replace(f, host=result.node) for f in topology.facts)
        result.placed = (tuple(topology.placements.items()), tuple(topology.node_ips.items()),
                         tuple(topology.task_nodes.items()), tuple(topology.task_exits), facts)
    table = _Worker.table
    for pattern, count in scan.counts.items():
        kind, index = table.owner[pattern]
        if kind == "runbook":
            book_id = _Worker.runbooks[index].id
            result.counts[book_id] = max(result.counts.get(book_id, 0), count)
    result.bytes, result.lines = scan.bytes, scan.lines
    result.first_time, result.last_time = scan.first_time, scan.last_time
    result.last_progress = scan.last_progress
    progress = scan.last_progress
    if progress is not None and any(r.line == progress.line and r.text[:PROGRESS_TEXT] == progress.text
                                    for r in scan.tail):  # 100,000 progress lines are 20 MB of text
        result.last_progress = Progress(progress.line, progress.step, progress.time, "")
        result.progress_in_tail = True
    hit_lines = {m.record.line for m in matches} | {e.record.line for e in result.weak}
    if result.rank is None and scan.last_progress is not None:
        result.rank = split_prefix(scan.last_progress.text).rank
    ranks = tail_ranks(scan.tail, hit_lines)
    # most rank logs' tails name only the file's own rank: said by the result itself, not kept twice
    return result, _Tail(scan.tail, None if ranks == ((result.rank, result.node),) else ranks)


def _scan_batch(sources: list[Source]) -> list[SourceResult]:
    """A worker's task: several files, one result message. A file that cannot be read (vanished,
    unreadable, damaged) is a warning on its own result and the others are scanned."""
    scanned = [_scan_file(s) for s in sources]
    with_tail = [(r, tail) for r, tail in scanned if tail.records]
    blob = pack_tails([tail_rows(tail.records) for _, tail in with_tail])  # the batch's tails compress together
    for i, (r, tail) in enumerate(with_tail):
        r.packed_tail = PackedTail(blob, i, tail.ranks)
    results = [r for r, _ in scanned]
    _share_field_sets(results)
    return results


def _share_field_sets(results: list[SourceResult]) -> None:
    """Pydantic keeps, per model instance, the set of the fields given (about 700 bytes for a
    LogRecord): identical sets become one object, so pickling sends and rebuilds it once a batch
    (a third of the memory 100,000 files' matches hold). Safe: these models are frozen, and pydantic
    copies the set before it changes it (`model_copy`)."""
    shared: dict[tuple[type, frozenset[str]], set[str]] = {}
    for r in results:
        for model in [*(m for m in r.matches), *(m.record for m in r.matches), *(e.record for e in r.weak)]:
            fields = model.__pydantic_fields_set__
            object.__setattr__(model, "__pydantic_fields_set__",
                               shared.setdefault((type(model), frozenset(fields)), fields))


def plan_batches(sizes: list[int], workers: int) -> list[list[int]]:
    """Indexes of the sources grouped into tasks: big files first and alone, small files together
    (about BATCH_BYTES or BATCH_FILES a batch, smaller when that leaves a worker idle)."""
    total = sum(sizes)
    target = max(1 << 20, min(BATCH_BYTES, total // max(1, workers * BATCHES_PER_WORKER)))
    per_batch = max(16, min(BATCH_FILES, len(sizes) // max(1, workers * BATCHES_PER_WORKER)))
    batches: list[list[int]] = []
    current: list[int] = []
    current_bytes = 0
    for i in sorted(range(len(sizes)), key=lambda i: -sizes[i]):  # stable: equal sizes keep their order
        if current and (current_bytes + sizes[i] > target or len(current) >= per_batch):
            batches.append(current)
            current, current_bytes = [], 0
        current.append(i)
        current_bytes += sizes[i]
    if current:
        batches.append(current)
    return batches


def use_workers(sources: list[Source], workers: int) -> bool:
    """Whether starting worker processes pays for this input (see PARALLEL_MIN_BYTES/FILES)."""
    if workers <= 1 or len(sources) <= 1 or any(s.prefix is None for s in sources):
        return False
    return sum(s.size for s in sources) >= PARALLEL_MIN_BYTES or len(sources) >= PARALLEL_MIN_FILES


_preforked: tuple[tuple, ProcessPoolExecutor] | None = None  # (rules it loaded, pool): see `preforked`


@contextlib.contextmanager
def preforked(workers: int | None, runbook_dir: Path | None = None) -> Iterator[None]:
    """Start the scan's worker processes now, before the job's files are listed. A worker forked
    later inherits the parent's heap (100,000 sources): the parent then copies each page it writes
    and both copies count, tens of MB at 100,000 files. Unused (a small input) they just exit."""
    global _preforked
    workers = workers if workers is not None else min(os.cpu_count() or 1, 8)
    if workers <= 1 or _preforked is not None:
        yield
        return
    rules = str(runbook_dir) if runbook_dir else None
    _Worker.setup(rules)
    gc.collect()
    pool = ProcessPoolExecutor(max_workers=workers, initializer=_Worker.setup, initargs=(rules, None))
    pool.submit(int).result()  # the first task forks every worker (the fork start method starts them all)
    _preforked = (_Worker.loaded_from, pool)
    try:
        yield
    finally:
        if _preforked is not None and _preforked[1] is pool:  # not used by a scan
            _preforked = None
        pool.shutdown(cancel_futures=True)


@contextlib.contextmanager
def _pool(workers: int, rules: str | None, runbooks: list[Runbook] | None) -> Iterator[ProcessPoolExecutor]:
    """The preforked workers when they loaded these very rules, else new ones. Either way they exit
    when the scan is done: the rest of the analysis needs no workers."""
    global _preforked
    if _preforked is not None and _preforked[0] == _Worker.loaded_from:
        pool, _preforked = _preforked[1], None
        with pool:
            yield pool
        return
    with ProcessPoolExecutor(max_workers=workers, initializer=_Worker.setup, initargs=(rules, runbooks)) as pool:
        yield pool


def _scan_parallel(sources: list[Source], workers: int, rules: str | None, runbooks: list[Runbook] | None,
                   merger: ResultMerger, on_progress: Callable[[int], None] | None) -> list[SourceResult]:
    results: list[SourceResult | None] = [None] * len(sources)
    batches = plan_batches([s.size for s in sources], workers)
    # CPython's collector writes into every object it tracks: frozen, the parent's heap stays shared
    # with workers forked now instead of being copied
    gc.freeze()
    try:
        with _pool(min(workers, len(batches)), rules, runbooks) as pool:
            futures = {pool.submit(_scan_batch, [sources[i] for i in batch]): batch for batch in batches}
            for future in as_completed(futures):
                batch = futures.pop(future)
                for i, result in zip(batch, future.result(), strict=True):
                    result.source = sources[i].name  # the same name: one string per file, not two
                    results[i] = result
                    merger.add(i, result)
                if on_progress:
                    on_progress(sum(sources[i].size for i in batch))
    finally:
        gc.unfreeze()
    return [r for r in results if r is not None]


def scan_sources(
    sources: list[Source],
    runbook_dir: Path | None = None,
    workers: int | None = None,
    on_progress: Callable[[int], None] | None = None,
    runbooks: list[Runbook] | None = None,
) -> ScanResult:
    """Scan all sources; results keep the order of `sources`."""
    started = time.perf_counter()
    workers = workers if workers is not None else min(os.cpu_count() or 1, 8)
    rules = str(runbook_dir) if runbook_dir else None
    _Worker.setup(rules, runbooks)  # before the workers fork: they share the rules and the database
    merger = ResultMerger()
    if use_workers(sources, workers):
        done = _scan_parallel(sources, workers, rules, runbooks, merger, on_progress)
    else:
        done = []
        for i, s in enumerate(sources):
            done.append(_scan_one(s, on_progress))
            merger.add(i, done[-1])
    warnings = [InputWarning(source=r.source, message=r.warning) for r in done if r.warning]
    return ScanResult(done, warnings, time.perf_counter() - started, merger.topology())
