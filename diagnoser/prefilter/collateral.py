"""Collateral matches at scale: the earliest few in full, every other one as a few facts.

A 100,000-rank hang is 100,000 collective-timeout lines, alike but for the rank and the time. Held as
full records they were most of triage's memory (~1.5 KB each). What later stages read from them is
small: the earliest ones (which one opened the failure, the evidence shown), the ranks and nodes that
reported and the collective each waited in (desync, silent ranks), and which line matched which rule
(counts, the policy's line check). So the scan keeps, per rule and per collective (SeqNum, OpType,
NumelIn), the KEEP earliest matches whole and turns the rest into `CollateralHit`s. Every group keeps
its earliest, so each collective a desync names has a full line to cite. Root-role matches are
never touched.
"""

from __future__ import annotations

import bisect
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from diagnoser.collect.prefixes import split_prefix
from diagnoser.models import Role, SignatureMatch

if TYPE_CHECKING:
    from diagnoser.prefilter.scan import SourceResult

KEEP = 32  # full matches kept per (rule, collective): evidence, ordering and locating need no more
_WORK = re.compile(r"SeqNum=(?P<seq>\d+), OpType=(?P<op>\w+)(?:, NumelIn=(?P<numel>\d+))?")
_RANK_IN_TEXT = re.compile(r"\[Rank (\d+)\]|\brank (\d+)\b", re.I)
_LATEST = datetime.max.replace(tzinfo=None)

Work = tuple[int, str, str | None]  # a collective: SeqNum, OpType, NumelIn


@dataclass(frozen=True, slots=True)
class CollateralHit:
    """A collateral match reduced to what the job-wide analyses read."""

    runbook_id: str
    priority: int
    source: str
    line: int
    rank: int | None  # the record's rank
    node: str | None  # the record's node
    named_node: str | None  # a node the signature captured (the job's node names include it)
    work: Work | None
    said_rank: int | None = None  # the rank its text names (`[Rank 5]`), when the record has none

    @property
    def reporting_rank(self) -> int | None:
        return self.rank if self.rank is not None else self.said_rank


def work_of(text: str) -> Work | None:
    """The collective a watchdog line names (`WorkNCCL(SeqNum=..., OpType=..., NumelIn=...)`)."""
    w = _WORK.search(text)
    return (int(w.group("seq")), w.group("op"), w.group("numel")) if w else None


def said_rank(text: str) -> int | None:
    """A `[Rank N]`/`rank N` in a line's text (after its launcher prefix)."""
    hit = _RANK_IN_TEXT.search(split_prefix(text).rest)
    return int(next(g for g in hit.groups() if g)) if hit else None


def as_hit(m: SignatureMatch, work: Work | None = None, source: str | None = None) -> CollateralHit:
    """`source`: the same name as the record's, an object already held (one string per file)."""
    r = m.record
    return CollateralHit(m.runbook_id, m.priority, source or r.source, r.line, r.rank, r.node, m.fields.get("node"),
                         work or work_of(r.text), said_rank(r.text) if r.rank is None else None)


def _when(m: SignatureMatch) -> tuple:
    """Earliest first (demarcate's order within one rule); year-less times are compared as read."""
    t = m.record.time
    return (t.astimezone(UTC).replace(tzinfo=None) if t else _LATEST, m.record.time_inferred,
            m.record.source, m.record.line)


class CollateralBudget:
    """Folds results as they arrive; the matches kept whole do not depend on the arrival order."""

    def __init__(self, keep: int = KEEP) -> None:
        self.keep = keep
        self._kept: dict[tuple[str, Work | None], list[tuple[tuple, int, SourceResult, SignatureMatch]]] = {}
        self._seq = 0
        self._interned: dict[Work, Work] = {}

    def absorb(self, result: SourceResult) -> None:
        for m in [m for m in result.matches if m.role == Role.COLLATERAL]:
            work = work_of(m.record.text)
            work = self._interned.setdefault(work, work) if work else None
            group = self._kept.setdefault((m.runbook_id, work), [])
            self._seq += 1
            bisect.insort(group, (_when(m), self._seq, result, m), key=lambda item: (item[0], item[1]))
            if len(group) > self.keep:
                _, _, owner, evicted = group.pop()
                self._demote(owner, evicted, work)

    def _demote(self, owner: SourceResult, m: SignatureMatch, work: Work | None) -> None:
        owner.matches = tuple(x for x in owner.matches if x is not m)
        owner.hits = (*owner.hits, as_hit(m, work, owner.source if owner.source == m.record.source else None))
