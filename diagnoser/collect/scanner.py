"""Stream one log file in chunks and turn the lines the matcher hits into LogRecords.

Memory is bounded by the chunk size plus a small look-behind, whatever the file size, even for a
file that is one 5 GB line. Only hit lines are decoded and normalised; the rest of the bytes are
touched once, by the multi-pattern matcher.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from typing import BinaryIO

from diagnoser.collect import kernel, nccl, prefixes, slurm, torchrun
from diagnoser.collect.paths import PathInfo
from diagnoser.collect.text import MAX_LINE_CHARS, clean_line, decode, truncate_around, visible_segments
from diagnoser.collect.timestamps import parse_time
from diagnoser.models import LogRecord
from diagnoser.prefilter.engine import MultiMatcher

CHUNK_BYTES = 8 << 20
LOOKBEHIND_BYTES = 64 << 10  # kept from the previous chunk: traceback frames, earlier timestamps
MAX_LINE_BYTES = 1 << 20  # a "line" longer than this is cut into pieces
NUMPY_COUNT_BYTES = 4 << 20  # newlines in larger spans are counted with numpy
NEIGHBOUR_LINES = 40  # how far an untimed hit looks for a timed line each way
MAX_EVENTS_PER_PATTERN = 256  # per file; the rest are only counted (bounded memory on any input)
TRACEBACK_MAX_LINES = 120
EDGE_LINES = 50  # lines read at the start and end of a file for its time span
TAIL_LINES = 12  # last non-empty lines of a file kept as records: where each rank stopped
PROGRESS_TAIL_LINES = 2000  # how far back from the end a file's last progress line is looked for
# A training step line of common trainers (Megatron, DeepSpeed, Lightning/tqdm, HF, torchtitan).
DEFAULT_PROGRESS = (r"(?i)(?:\b(?:global[_ ]step|step|iter(?:ation)?|it)\b\s*[:=#]?\s*\[?\s*(?P<step>\d+)"
                    r"|(?P<step2>\d+)/\d+ \[\d)")

_FRAME = re.compile(r'^\s+File "(?P<file>[^"]+)", line (?P<line>\d+), in (?P<fn>.+)$')
_TRACEBACK_BODY = re.compile(r"^(?:\s|Traceback \(most recent call last\)|During handling|The above exception"
                             r"|\^|~|\s*$)")


@dataclass(slots=True)
class Event:
    """A record and the indexes of the patterns that hit its line."""

    record: LogRecord
    patterns: tuple[int, ...]
    offset: int  # where in `record.text` the first hit ended (for truncation and display)


@dataclass(slots=True)
class FileScan:
    source: str
    events: list[Event] = field(default_factory=list)
    counts: dict[int, int] = field(default_factory=dict)  # pattern index -> lines hit (all, not just kept)
    bytes: int = 0
    lines: int = 0
    first_time: datetime | None = None
    last_time: datetime | None = None
    last_progress: Progress | None = None
    warnings: list[str] = field(default_factory=list)
    tail: list[LogRecord] = field(default_factory=list)  # the file's last TAIL_LINES non-empty lines, in order


PROGRESS_TEXT = 500  # characters of the last progress line kept


@dataclass(frozen=True, slots=True)
class Progress:
    """The last training-progress line of a file: where a rank was when its log ended."""

    line: int
    step: int
    time: datetime | None
    text: str


@dataclass(slots=True)
class _Window:
    """The bytes in memory: data[0] is at absolute offset `base` and starts line `base_line`."""

    data: bytes = b""
    base: int = 0
    base_line: int = 1


def _back_spans(data: bytes, start: int, limit: int) -> Iterator[tuple[int, int]]:
    """(lo, hi) of the lines ending just before offset `start` (a line start), nearest first."""
    pos = start - 1  # the newline that ends the previous line
    while limit > 0 and pos > 0:
        prev = data.rfind(b"\n", max(0, pos - MAX_LINE_BYTES), pos)
        yield prev + 1, pos
        if prev < 0:
            return
        pos, limit = prev, limit - 1


def _forward_spans(data: bytes, end: int, limit: int) -> Iterator[tuple[int, int]]:
    """(lo, hi) of the lines starting at offset `end`, nearest first."""
    pos = end
    while limit > 0 and pos < len(data):
        nl = data.find(b"\n", pos, pos + MAX_LINE_BYTES)
        stop = nl if nl != -1 else min(len(data), pos + MAX_LINE_BYTES)
        yield pos, stop
        pos, limit = stop + 1, limit - 1


def _back_lines(data: bytes, start: int, limit: int) -> Iterator[str]:
    """Clean lines ending just before offset `start` (a line start), nearest first, lazily."""
    return (clean_line(decode(data[lo:hi])) for lo, hi in _back_spans(data, start, limit))


def _lines_before(data: bytes, start: int, limit: int) -> list[str]:
    """Up to `limit` clean lines ending just before offset `start`, nearest last."""
    return list(_back_lines(data, start, limit))[::-1]


def count_newlines(data: bytes, start: int = 0, end: int | None = None) -> int:
    """Newlines in data[start:end]; numpy's vectorised compare is ~2.3x faster than bytes.count on
    the chunks of big files, but importing it costs a small input more than it saves. Counted in
    1 MB slices so the comparison's temporary stays small."""
    end = len(data) if end is None else end
    if end - start <= NUMPY_COUNT_BYTES:
        return data.count(b"\n", start, end)
    import numpy as np  # here, not at the top: ~0.15 s of start-up (per worker) that small files never need

    view = np.frombuffer(data, dtype=np.uint8)
    return sum(int(np.count_nonzero(view[i:min(end, i + (1 << 20))] == 10)) for i in range(start, end, 1 << 20))


def _forward_lines(data: bytes, end: int, limit: int) -> Iterator[str]:
    """Clean lines starting at offset `end`, lazily: callers usually stop at the first one."""
    return (clean_line(decode(data[lo:hi])) for lo, hi in _forward_spans(data, end, limit))


def _lines_after(data: bytes, end: int, limit: int) -> list[str]:
    return list(_forward_lines(data, end, limit))


class _RecordBuilder:
    """Normalises a hit line: prefix, node, rank, time, and multi-line context."""

    def __init__(self, source: str, info: PathInfo, reference_year: int) -> None:
        self.source = source
        self.info = info
        self.year = reference_year
        # per window (`data`): the time of the line starting at an offset, and the record built for
        # a line. Hits come in clusters (a traceback, a watchdog block) and the file's edges, last
        # progress line and tail look at the same last lines: each line is read once.
        self._times: dict[int, datetime | None] = {}
        self._records: dict[int, LogRecord] = {}
        self._of: bytes | None = None

    def _window(self, data: bytes) -> None:
        if self._of is not data:
            self._times, self._records, self._of = {}, {}, data

    def time_of(self, text: str) -> datetime | None:
        return parse_time(prefixes.split_prefix(text).rest, self.year)

    def line_time(self, data: bytes, lo: int, hi: int) -> datetime | None:
        """The time of the clean line data[lo:hi], read once per window."""
        self._window(data)
        if lo not in self._times:
            self._times[lo] = self.time_of(clean_line(decode(data[lo:hi])))
        return self._times[lo]

    def neighbour_times(self, data: bytes, start: int, end: int) -> tuple[datetime | None, datetime | None]:
        """The times of the nearest timed lines before the line at [start, end) and after it
        (within NEIGHBOUR_LINES each way)."""
        times_before = (self.line_time(data, lo, hi) for lo, hi in _back_spans(data, start, NEIGHBOUR_LINES))
        times_after = (self.line_time(data, lo, hi) for lo, hi in _forward_spans(data, end + 1, NEIGHBOUR_LINES))
        before = next((t for t in times_before if t is not None), None)
        after = next((t for t in times_after if t is not None), None)
        return before, after

    @staticmethod
    def text(data: bytes, start: int, end: int, hit_end: int) -> tuple[str, int]:
        """The visible text of the line at [start, end) and where in it the hit ends."""
        # decode at most MAX_LINE_BYTES of a line, centred on the hit (a line can be gigabytes)
        lo = max(start, min(hit_end - MAX_LINE_BYTES // 2, end - MAX_LINE_BYTES))
        raw = clean_line(decode(data[lo:min(end, lo + MAX_LINE_BYTES)]))
        segments = visible_segments(raw)
        text = segments[-1] if len(segments) == 1 else "\r".join(segments)
        rel_hit = min(len(text), max(0, hit_end - lo))
        return truncate_around(text, max(0, rel_hit - 200), rel_hit), rel_hit

    def line_record(self, data: bytes, start: int, end: int, line_no: int) -> LogRecord:
        """The record of a whole line (a file's tail), shared with a hit on the same line."""
        self._window(data)
        record = self._records.get(start)
        return record if record is not None else self.build(data, start, end, line_no, end)[0]

    def build(self, data: bytes, start: int, end: int, line_no: int, hit_end: int) -> tuple[LogRecord, int]:
        text, rel_hit = self.text(data, start, end, hit_end)
        prefix = prefixes.split_prefix(text)
        rest = prefix.rest
        node, rank, local_rank, kind = self.info.node, self.info.rank, None, self.info.kind
        if prefix.rank is not None:
            rank = prefix.rank
        if prefix.local_rank is not None:
            local_rank = prefix.local_rank
        if prefix.node:  # the line came from that node, whichever file gathered it
            node = prefix.node
        nline = nccl.parse_line(rest)
        if nline:
            node, kind = nline.host, "nccl" if kind == "log" else kind
            if local_rank is None:
                local_rank = nline.device
        host = kernel.syslog_host(rest)
        if host:
            node, kind = host, "dmesg"
        elif kind == "log" and kernel.is_kernel_line(rest):
            kind = "dmesg"
        stepd_node = slurm.parse_stepd_node(rest)
        if stepd_node:
            kind = "scheduler"
            node = node or stepd_node
        # a job-accounting table's columns (Start, End, Submit) are not the time of an event
        time = parse_time(rest, self.year) if kind != "scheduler_record" else None
        inferred = False
        first_line, context = None, ()
        if torchrun.is_block_line(rest):
            window = _lines_before(data, start, 8) + [rest] + _lines_after(data, end + 1, 8)
            fields = torchrun.block_fields(window)
            node = fields.host or node
            rank = fields.rank if fields.rank is not None else rank
            local_rank = fields.local_rank if fields.local_rank is not None else local_rank
            kind = "launcher"
            if fields.time:
                time = parse_time(fields.time.replace("_", " "), self.year)
        else:
            first_line, context = self._traceback(data, start, line_no, text, prefix)
        if not context and kind == "dmesg":  # a multi-line NVRM message names its GPU on its first line
            context = kernel.nvrm_message_head(rest, _back_lines(data, start, kernel.NVRM_MESSAGE_LINES - 1))
        not_after = None
        if time is None and kind != "scheduler_record":
            # no time of its own: the nearest timed lines before and after bound it
            time, not_after = self.neighbour_times(data, start, end)
            inferred = time is not None
        record = LogRecord(
            source=self.source, line=line_no, text=text, time=time, time_inferred=inferred,
            time_not_after=not_after, node=node, rank=rank, local_rank=local_rank, kind=kind,
            first_line=first_line, context=context)
        if end - start <= MAX_LINE_CHARS:  # short enough that where the hit is does not change the text
            self._window(data)
            self._records[start] = record
        return record, rel_hit

    def _traceback(self, data: bytes, start: int, line_no: int, text: str,
                   prefix: prefixes.Prefix) -> tuple[int | None, tuple[str, ...]]:
        """If the line ends a Python traceback, the traceback's first line and its frames."""
        if text.startswith((" ", "\t")) or ":" not in text:
            return None, ()
        frames: list[str] = []
        for i, line in enumerate(_back_lines(data, start, TRACEBACK_MAX_LINES)):
            other = prefixes.split_prefix(line)
            if (other.rank, other.local_rank) != (prefix.rank, prefix.local_rank):
                continue  # another rank's line interleaved
            body = other.rest
            if body.startswith("Traceback (most recent call last)"):
                return line_no - i - 1, tuple(reversed(frames[:12]))
            if not _TRACEBACK_BODY.match(body):
                return None, ()
            frames.append(line)
        return None, ()


def raising_frame(record: LogRecord) -> tuple[int, str] | None:
    """(line number, text) of the innermost `File ...` frame of a traceback record."""
    if record.first_line is None:
        return None
    for back, line in enumerate(reversed(record.context), start=1):
        if _FRAME.match(prefixes.split_prefix(line).rest):
            return record.line - back, line
    return None


def _edge_time(data: bytes, spans: Iterator[tuple[int, int]], builder: _RecordBuilder) -> datetime | None:
    """The first time found in the lines at `spans` of `data` (give them nearest-first)."""
    for lo, hi in spans:
        t = builder.line_time(data, lo, hi)
        if t is not None:
            return t
    return None


def _end_of_last_line(region: bytes) -> int:
    """Offset just past the last line, as a line start for `_back_lines`."""
    return len(region) if region.endswith(b"\n") else len(region) + 1


def scan_stream(
    stream: BinaryIO,
    source: str,
    info: PathInfo,
    matcher: MultiMatcher,
    reference_year: int,
    on_progress: Callable[[int], None] | None = None,
    chunk_bytes: int = CHUNK_BYTES,
    progress: re.Pattern[str] | None = None,
    light: frozenset[int] = frozenset(),
) -> FileScan:
    """Scan a binary stream; keep up to MAX_EVENTS_PER_PATTERN events per pattern. A hit of only
    `light` patterns (context lines read for their text alone, e.g. NCCL placement lines) gets a
    record with just its source, line and text."""
    scan = FileScan(source=source)
    builder = _RecordBuilder(source, info, reference_year)
    win = _Window()
    done_upto = 0  # absolute offset: hit lines starting before this were handled
    kept: dict[int, int] = {}
    first_chunk = True
    pending = b""
    while True:
        data, pending = pending or stream.read(chunk_bytes), b""
        if data and not data.endswith(b"\n"):
            data += stream.readline(MAX_LINE_BYTES)  # end on a line: the region is then the whole buffer
        eof = not data
        if data and len(data) < chunk_bytes:
            # a short read is almost always the end: make sure, and scan a small file in one pass
            # (its hits, edges, progress line and tail read once, not again from the look-behind)
            pending = stream.read(chunk_bytes)
            eof = not pending
        buf = win.data + data
        scan.bytes += len(data)
        if on_progress and data:
            on_progress(len(data))
        if eof:
            cut = len(buf)
        else:
            cut = buf.rfind(b"\n", max(0, len(buf) - MAX_LINE_BYTES)) + 1
            if cut <= done_upto - win.base:  # no newline in the last MB: a huge line, cut it
                cut = len(buf)
        if first_chunk and buf:
            scan.first_time = _edge_time(buf, _forward_spans(buf, 0, EDGE_LINES), builder)
            first_chunk = False
        region = buf if cut == len(buf) else buf[:cut]
        _handle_hits(region, win, done_upto, matcher, builder, scan, kept, light)
        if eof:
            scan.lines = win.base_line - 1 + count_newlines(region) + (0 if region.endswith(b"\n") or not region
                                                                       else 1)
            scan.last_time = _edge_time(region, _back_spans(region, _end_of_last_line(region), EDGE_LINES), builder)
            scan.last_progress = _last_progress(region, scan.lines, builder, progress)
            tail = _tail(region, scan.lines, builder)
            earlier = [r for r in scan.tail if not tail or r.line < tail[0].line]
            scan.tail = (earlier + tail)[-TAIL_LINES:]
            break
        scan.tail = _tail(region, win.base_line + count_newlines(region) - 1, builder)
        done_upto = win.base + cut
        keep_from = max(0, cut - LOOKBEHIND_BYTES)
        if keep_from:  # start the look-behind on a line (offset 0 is one)
            keep_from = buf.find(b"\n", keep_from, cut) + 1 or keep_from
        win = _Window(buf[keep_from:], win.base + keep_from, win.base_line + count_newlines(buf, 0, keep_from))
    return scan


def _last_progress(region: bytes, last_line: int, builder: _RecordBuilder,
                   progress: re.Pattern[str] | None) -> Progress | None:
    """Walk back from the end of the file to its last progress line (bounded)."""
    progress = progress or _PROGRESS
    end = len(region) - 1 if region.endswith(b"\n") else len(region)
    line_no = last_line
    for lo, hi in _back_spans(region, end + 1, PROGRESS_TAIL_LINES):
        text = clean_line(decode(region[lo:hi]))
        m = progress.search(text)
        if m:
            step = next((int(v) for v in m.groupdict().values() if v), None)
            if step is None and m.groups():
                step = int(m.group(1)) if (m.group(1) or "").isdigit() else 0
            return Progress(line_no, step or 0, builder.line_time(region, lo, hi), text[:PROGRESS_TEXT])
        line_no -= 1
    return None


_PROGRESS = re.compile(DEFAULT_PROGRESS)


def _tail(region: bytes, last_line: int, builder: _RecordBuilder) -> list[LogRecord]:
    """The last TAIL_LINES non-empty lines of the file as records (bounded look-back)."""
    out: list[LogRecord] = []
    line_no = last_line
    for lo, hi in _back_spans(region, _end_of_last_line(region), 4 * TAIL_LINES):
        if region[lo:hi].strip():
            out.append(builder.line_record(region, lo, hi, line_no))
            if len(out) >= TAIL_LINES:
                break
        line_no -= 1
    return out[::-1]


def _handle_hits(region: bytes, win: _Window, done_upto: int, matcher: MultiMatcher,
                 builder: _RecordBuilder, scan: FileScan, kept: dict[int, int], light: frozenset[int]) -> None:
    hits = matcher.scan(region)
    counted_pos, counted_lines = 0, win.base_line
    current_start = -1
    current: list[int] = []
    current_end = 0
    first_hit_end = 0

    def flush() -> None:
        if current_start < 0:
            return
        patterns = tuple(sorted(set(current)))
        new = [p for p in patterns if kept.get(p, 0) < MAX_EVENTS_PER_PATTERN]
        for p in patterns:
            scan.counts[p] = scan.counts.get(p, 0) + 1
        if not new:
            return
        for p in new:
            kept[p] = kept.get(p, 0) + 1
        if light.issuperset(patterns):
            text, offset = builder.text(region, current_start, current_end, first_hit_end)
            record = LogRecord(source=builder.source, line=current_line, text=text)
        else:
            record, offset = builder.build(region, current_start, current_end, current_line, first_hit_end)
        scan.events.append(Event(record, patterns, offset))

    current_line = 0
    for end, pattern in hits:
        line_start = region.rfind(b"\n", 0, max(0, end - 1) if end else 0) + 1
        if end > 0 and region[end - 1:end] == b"\n":
            line_start = region.rfind(b"\n", 0, end - 1) + 1
        if win.base + end <= done_upto:
            continue  # found in the previous region already (this is the look-behind)
        if line_start != current_start:
            flush()
            counted_lines += count_newlines(region, counted_pos, line_start)
            counted_pos = line_start
            nl = region.find(b"\n", line_start)
            current_start, current_end = line_start, (nl if nl != -1 else len(region))
            current, first_hit_end, current_line = [], end, counted_lines
        current.append(pattern)
    flush()
