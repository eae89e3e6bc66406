"""The evidence a model is shown: the job's strongest lines, best first, whether or not a rule fired.

Order (the prompt keeps a prefix of it within its token budget, see `prompt.build_prompt`):
1. the decisive matches of the rule stage (supporting, competing, later root-cause matches);
2. per rank/node (per source file): its first failure candidate (earliest error line or signature
   match) and its exception lines (the end of a traceback, frames attached);
3. the scheduler's and launcher's record (slurmstepd/srun lines, torchrun failure blocks);
4. every other error line, collateral and out-of-span kernel history;
5. the last lines of each file (where each rank stopped), so even a log without any error word
   (a diverging loss, a hang's last progress line, a command that printed its failure plainly)
   reaches the model.
A line repeated across ranks (same text once digits are masked) is kept twice at its place and
its further copies go to the end, where the prompt folds them into a count.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from diagnoser.collect.prefixes import split_prefix
from diagnoser.models import LogRecord

if TYPE_CHECKING:
    from diagnoser.triage import Analysis

LIMIT = 240
KEEP_REPEATS = 2
RECORD_KINDS = frozenset({"scheduler", "scheduler_record", "launcher"})
_MASK = re.compile(r"0x[0-9a-fA-F]+|\d+")
_EXCEPTION = re.compile(r"^\s*(?:\[[^\]]*\]:?\s*)*[\w.]*(?:Error|Exception|Interrupt|Exit|Warning|Fault)\b\s*:")


def _shape(r: LogRecord) -> str:
    return _MASK.sub("#", r.text)[:200]


def is_exception_line(r: LogRecord) -> bool:
    """The line a traceback ends with (`ValueError: ...`), whether or not frames preceded it."""
    rest = split_prefix(r.text).rest
    if _EXCEPTION.match(rest):
        return True
    return r.first_line is not None and bool(rest) and not rest[0].isspace() and not rest.startswith("Traceback")


def evidence_window(analysis: Analysis, limit: int = LIMIT) -> list[LogRecord]:
    """The records worth showing a model, strongest first, bounded by `limit`."""
    d = analysis.demarcation
    sources = [s for s in analysis.scan.sources if s.warning is None]
    decisive = [m.record for m in [*d.supporting, *d.competing, *d.later]]
    per_source: list[LogRecord] = []
    for s in sources:
        own = sorted([m.record for m in s.matches] + [e.record for e in s.weak], key=lambda r: r.line)
        own = [r for r in own if r.kind not in RECORD_KINDS]
        if own:
            per_source.append(own[0])
        per_source += [r for r in own if is_exception_line(r)]
        per_source += [r for r in s.tail if is_exception_line(r)]
    records = [r for s in sources for r in [*(m.record for m in s.matches), *(e.record for e in s.weak), *s.tail]
               if r.kind in RECORD_KINDS]
    errors = [e.record for s in sources for e in s.weak]
    background = [m.record for m in [*d.collateral[:20], *d.history[:5]]]
    framed = {(r.source, c) for r in [*decisive, *per_source] for c in r.context}  # frames shown with their exception
    tails = [r for s in sources for r in s.tail if (r.source, r.text) not in framed]
    per_source = [r for r in per_source if (r.source, r.text) not in framed]
    ordered: list[LogRecord] = []
    repeats: list[LogRecord] = []
    seen: set[tuple[str, int]] = set()
    shapes: dict[str, int] = {}
    for r in [*decisive, *per_source, *records, *errors, *background, *tails]:
        key = (r.source, r.line)
        if key in seen:
            continue
        seen.add(key)
        shape = _shape(r)
        shapes[shape] = shapes.get(shape, 0) + 1
        (ordered if shapes[shape] <= KEEP_REPEATS else repeats).append(r)
    return (ordered + repeats)[:limit]
