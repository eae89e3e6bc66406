"""Streaming scanner: line numbers, chunk boundaries, tracebacks, hostile bytes, bounded output."""

import gzip
import io
from pathlib import PurePath

import pytest

from diagnoser.collect.paths import path_info
from diagnoser.collect.scanner import MAX_EVENTS_PER_PATTERN, raising_frame, scan_stream
from diagnoser.prefilter.engine import RegexMatcher, build_matcher

PATTERNS = [r"NVRM: Xid \(PCI:[0-9a-f:]+\): 79", r"^(?:\[rank\d+\]:)?[A-Za-z_.]*Error: .+", r"FATAL-MARK"]


def scan(data: bytes, chunk=1 << 20, path="gpu-017/rank5.log", matcher=None):
    matcher = matcher or build_matcher(PATTERNS)
    return scan_stream(io.BytesIO(data), path, path_info(PurePath(path)), matcher, 2025, chunk_bytes=chunk)


def line_numbers(data: bytes, needle: bytes) -> list[int]:
    return [i for i, line in enumerate(data.split(b"\n"), start=1) if needle in line]


@pytest.mark.parametrize("chunk", [64, 1000, 4096, 1 << 20])
def test_line_numbers_are_exact_across_chunk_boundaries(chunk):
    lines = [f"[2025-03-04 05:00:{i % 60:02d},000] step {i} loss 2.{i}" for i in range(3000)]
    for i in (7, 1500, 2999):
        lines[i] = f"FATAL-MARK at step {i}"
    data = ("\n".join(lines) + "\n").encode()
    s = scan(data, chunk=chunk)
    assert [e.record.line for e in s.events] == line_numbers(data, b"FATAL-MARK")
    assert s.lines == 3000
    assert s.bytes == len(data)


def test_file_time_span_and_inherited_time():
    data = (b"[2025-03-04 05:00:00,000] start\nFATAL-MARK no own time\n"
            b"[2025-03-04 06:00:00,000] end\n")
    s = scan(data)
    assert s.first_time.hour == 5 and s.last_time.hour == 6
    rec = s.events[0].record
    assert rec.time.hour == 5 and rec.time_inferred


def test_traceback_is_one_event_with_its_frames_and_raising_frame():
    data = b"""step 1
[rank3]:Traceback (most recent call last):
[rank3]:  File "/opt/train.py", line 88, in <module>
[rank2]:step 5 interleaved from another rank
[rank3]:    main()
[rank3]:  File "/opt/data.py", line 12, in __getitem__
[rank3]:    return self.items[idx]
[rank3]:IndexError: list index out of range
"""
    s = scan(data)
    (event,) = s.events
    rec = event.record
    assert (rec.line, rec.first_line, rec.rank) == (8, 2, 3)
    assert rec.text == "[rank3]:IndexError: list index out of range"
    assert raising_frame(rec) == (6, '[rank3]:  File "/opt/data.py", line 12, in __getitem__')


def test_exception_line_without_traceback_is_a_single_line_event():
    s = scan(b"x\nValueError: bad config\n")
    assert s.events[0].record.first_line is None


def test_hostile_bytes_do_not_crash_and_are_cleaned():
    data = b"\x00\x00garbage \xff\xfe\n\x1b[31mFATAL-MARK\x1b[0m \xc3\x28 tail\r\n" + bytes(range(256)) + b"\n"
    s = scan(data)
    assert s.events[0].record.text.startswith("FATAL-MARK")
    assert s.events[0].record.line == 2


def test_progress_bar_line_with_error_inside_is_found():
    data = b" 10%|#  | 1/10\r 20%|## | 2/10\rFATAL-MARK in between\r 30%|###| 3/10\n"
    s = scan(data)
    assert "FATAL-MARK in between" in s.events[0].record.text


def test_huge_single_line_memory_safe_and_match_found_in_the_middle():
    data = b"a" * (5 << 20) + b" FATAL-MARK " + b"b" * (5 << 20)  # 10 MB, no newline at all
    s = scan(data, chunk=1 << 20)
    assert len(s.events) >= 1
    assert "FATAL-MARK" in s.events[0].record.text
    assert len(s.events[0].record.text) <= 4100
    assert s.lines == 1


def test_events_per_pattern_are_capped_but_counted():
    data = b"FATAL-MARK\n" * 10000
    s = scan(data)
    assert len(s.events) == MAX_EVENTS_PER_PATTERN
    assert s.counts[2] == 10000


def test_regex_fallback_finds_the_same_lines_as_hyperscan():
    lines = [b"noise %d" % i for i in range(500)]
    lines[10] = b"[rank1]:KeyError: 'RANK'"
    lines[200] = b"[Tue Mar  4 05:06:07 2025] NVRM: Xid (PCI:0000:3b:00): 79, pid=1"
    lines[499] = b"FATAL-MARK"
    data = b"\n".join(lines) + b"\n"
    fast = [(e.record.line, e.patterns) for e in scan(data, chunk=700).events]
    slow = [(e.record.line, e.patterns) for e in scan(data, chunk=700, matcher=RegexMatcher(PATTERNS)).events]
    assert fast == slow == [(11, (1,)), (201, (0,)), (500, (2,))]


def test_node_and_kind_from_nccl_and_syslog_lines():
    data = (b"gpu-021:99:99 [2] NCCL WARN NET/IB : FATAL-MARK\n"
            b"Mar  4 05:06:07 gpu-022 kernel: [1.0] FATAL-MARK\n")
    a, b = (e.record for e in scan(data, path="mixed.log").events)
    assert (a.node, a.kind, a.local_rank) == ("gpu-021", "nccl", 2)
    assert (b.node, b.kind) == ("gpu-022", "dmesg")


def test_gzip_logs_are_read(tmp_path):
    from diagnoser.collect.files import list_sources, open_source

    path = tmp_path / "gpu-001" / "rank0.log.gz"
    path.parent.mkdir()
    path.write_bytes(gzip.compress(b"hello\nFATAL-MARK\n"))
    (source,), warnings = list_sources([str(tmp_path)])
    with open_source(source) as stream:
        s = scan_stream(stream, source.name, source.info, build_matcher(PATTERNS), 2025)
    assert s.events[0].record.line == 2 and s.events[0].record.node == "gpu-001"


@pytest.mark.parametrize("matcher", [None, RegexMatcher(["^AssertionError$", r"Xid \(PCI:[0-9a-f:]+\): 79$"])])
def test_patterns_anchored_at_line_end_match_crlf_logs(matcher):
    # a log written with CRLF line ends (Windows tooling, some container log drivers) loses nothing
    patterns = ["^AssertionError$", r"Xid \(PCI:[0-9a-f:]+\): 79$"]
    lf = b"step 10 loss 2.1\nAssertionError\n[  1.0] NVRM: Xid (PCI:0000:3b:00): 79\n"
    crlf = lf.replace(b"\n", b"\r\n")
    found = [[(e.record.line, e.patterns, e.record.text) for e in
              scan(data, matcher=matcher or build_matcher(patterns)).events] for data in (lf, crlf)]
    assert found[0] == found[1] == [(2, (0,), "AssertionError"), (3, (1,), "[  1.0] NVRM: Xid (PCI:0000:3b:00): 79")]


@pytest.mark.parametrize("prefix", ["", "3: ", "[rank3]: ", "(RayTrainWorker pid=4242, ip=10.1.2.3) ", "trainer-1  | ",
                                    "2025-03-04T05:06:07.123456789Z ",
                                    # wrappers stack: srun --label around a job that tags its ranks, Ray around srun
                                    "  3: [rank3]: ", "(RayTrainWorker pid=4242, ip=10.1.2.3) 0: "])
def test_line_start_anchors_hold_behind_launcher_prefixes(prefix):
    # a pattern anchored at the line start still finds its line when a launcher prefixes every line
    from diagnoser.prefilter.matching import PatternTable, confirm
    from diagnoser.prefilter.runbooks import load_runbooks

    books = [b for b in load_runbooks() if b.id == "python-traceback-truncated"]
    table = PatternTable.build(books)
    data = (f"{prefix}step 10 loss 2.1\n{prefix}Traceback (most recent call last):\n"
            f'{prefix}  File "/w/train.py", line 212, in <module>\n').encode()
    events = scan(data, matcher=build_matcher(table.patterns)).events
    matches, _, _ = confirm(events, table, books)
    assert [m.record.line for m in matches] == [2, 3]


def test_a_multi_line_nvrm_message_keeps_the_line_that_names_its_gpu():
    """The kernel prints "GPU has fallen off the bus" without an Xid as three NVRM lines, the GPU only on the
    first (dmesg indents the continuations without a timestamp); an unrelated NVRM line before it is no head."""
    matcher = build_matcher([r"NVRM: fallen off the bus"])
    data = (b"[ 1843.300001] NVRM: loading NVIDIA UNIX x86_64 Kernel Module  550.90.07\n"
            b"[ 1843.308145] NVRM: The NVIDIA GPU 0000:b3:00.0\n"
            b"                  NVRM: (PCI ID: 10de:26b5) installed in this system has\n"
            b"                  NVRM: fallen off the bus and is not responding to commands.\n")
    (event,) = scan(data, path="gpu-07/dmesg.log", matcher=matcher).events
    assert event.record.line == 4 and event.record.kind == "dmesg"
    assert "0000:b3:00.0" in event.record.context[0] and len(event.record.context) == 2
    lone = b"[ 1843.300001] NVRM: loading the module\n[ 1843.308145] NVRM: fallen off the bus, GPU unknown\n"
    (event,) = scan(lone, path="gpu-07/dmesg.log", matcher=matcher).events
    assert event.record.context == ()
