"""Decide which failure came first and which are its consequences.

Rules, in order (documented in the README):
1. Kernel-log events far outside the job's time span (older than the first rank-log line, or
   after the last, by more than HISTORY_MARGIN) are history, not this failure.
2. Collateral signatures (collective timeouts, aborted communicators, launcher teardown, a lost
   peer) never decide while a root-role signature fired. A line that matches a collateral
   signature and only a catch-all root one (e.g. `RuntimeError: ... Connection closed by peer`:
   a Python exception *carrying* a collateral message) is collateral.
3. A match's time is an interval: its own timestamp; or, for a line without one, from the last
   earlier timed line of its file (lower bound) to the next later one (upper bound, if any). The
   first-failure window opens at the earliest time by which some root-role failure surely had
   happened (the smallest upper bound) and lasts WINDOW (clock skew between nodes, and the
   propagation from a dying GPU to the rank's own error). Every match that could lie in the window
   competes (untimed ones too); matches surely after it are consequences.
4. Inside the window the most specific signature (highest priority) wins; ties go to the earliest.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from diagnoser.models import Role, SignatureMatch
from diagnoser.prefilter.collateral import CollateralHit

WINDOW = timedelta(seconds=30)
HISTORY_MARGIN = timedelta(minutes=10)
_LATEST = datetime.max.replace(tzinfo=None)


@dataclass
class Demarcation:
    root: SignatureMatch | None
    supporting: list[SignatureMatch] = field(default_factory=list)  # same class, same window
    competing: list[SignatureMatch] = field(default_factory=list)  # other root classes in the window
    later: list[SignatureMatch] = field(default_factory=list)  # root-role matches after the window
    collateral: list[SignatureMatch] = field(default_factory=list)
    history: list[SignatureMatch] = field(default_factory=list)
    span: tuple[datetime | None, datetime | None] = (None, None)
    hits: list[CollateralHit] = field(default_factory=list)  # the collateral lines not kept whole (collateral.py)


def _when(m: SignatureMatch) -> datetime:
    """Sort time: own timestamps first in time order; an inferred time sorts after an own one at
    the same moment (it is only a lower bound)."""
    t = m.record.time
    return t.astimezone(UTC).replace(tzinfo=None) if t else _LATEST


def _not_after(m: SignatureMatch) -> datetime | None:
    """The latest time the event can have happened, if known."""
    if m.record.time is None:
        return None
    return m.record.time_not_after if m.record.time_inferred else m.record.time


def _order(m: SignatureMatch) -> tuple:
    return (-m.priority, _when(m), m.record.time_inferred, m.record.source, m.record.line)


def split_history(matches: list[SignatureMatch], span: tuple[datetime | None, datetime | None]
                  ) -> tuple[list[SignatureMatch], list[SignatureMatch]]:
    """(current, history): kernel events outside the job's span by more than the margin. Without a
    job span (only kernel or system logs carry times), the span is the latest incident's."""
    start, end = span
    if start is None or end is None:
        start, end = latest_incident([m.record.time for m in matches if m.record.kind == "dmesg"])
    if start is None or end is None:
        return matches, []
    current, history = [], []
    for m in matches:
        t = m.record.time
        if m.record.kind == "dmesg" and t is not None and not (
            start - HISTORY_MARGIN <= t <= end + HISTORY_MARGIN
        ):
            history.append(m)
        else:
            current.append(m)
    return current, history


def latest_incident(times: list[datetime | None]) -> tuple[datetime | None, datetime | None]:
    """The last burst of kernel events: a node's `dmesg -T` holds days of history, and the failure a
    user asks about is the latest one. Bursts are split where events are more than HISTORY_MARGIN
    apart; within one burst (a cascade) the first failure still decides."""
    ordered = sorted(t.astimezone(UTC) if t.tzinfo else t.replace(tzinfo=UTC) for t in times if t is not None)
    if not ordered:
        return None, None
    start = ordered[0]
    for earlier, later in zip(ordered, ordered[1:], strict=False):
        if later - earlier > HISTORY_MARGIN:
            start = later
    return start, ordered[-1]


def demarcate(matches: list[SignatureMatch], span: tuple[datetime | None, datetime | None],
              hits: list[CollateralHit] | None = None) -> Demarcation:
    """`hits`: collateral lines beyond the scan's budget (facts only): counted, never a root (each
    rule's earliest lines are among the matches)."""
    d = _demarcate(matches, span)
    d.hits = hits or []
    return d


def _demarcate(matches: list[SignatureMatch], span: tuple[datetime | None, datetime | None]) -> Demarcation:
    current, history = split_history(matches, span)
    collateral_floor: dict[tuple[str, int], int] = {}
    for m in current:
        if m.role == Role.COLLATERAL:
            key = (m.record.source, m.record.line)
            collateral_floor[key] = max(collateral_floor.get(key, -1), m.priority)
    roots = [m for m in current if m.role == Role.ROOT
             and m.priority > collateral_floor.get((m.record.source, m.record.line), -1)]
    collateral = [m for m in current if m.role == Role.COLLATERAL]
    if not roots:
        pool = sorted(collateral, key=_order)
        root = pool[0] if pool else None
        supporting = [m for m in pool if root and m.runbook_id == root.runbook_id]
        return Demarcation(root, supporting, [], [], collateral, history, span)
    later: list[SignatureMatch] = []
    candidates: list[SignatureMatch] = []
    uppers = [u for m in roots if (u := _not_after(m)) is not None]
    t0 = min(uppers) if uppers else None
    for m in roots:
        lower = m.record.time
        (later if t0 is not None and lower is not None and lower > t0 + WINDOW else candidates).append(m)
    candidates.sort(key=_order)
    root = candidates[0]
    supporting = [m for m in candidates if m.runbook_id == root.runbook_id]
    competing = [m for m in candidates if m.runbook_id != root.runbook_id]
    return Demarcation(root, supporting, competing, later, collateral, history, span)


def collateral_counts(d: Demarcation, file_counts: Counter[str]) -> dict[str, int]:
    """How many lines of each collateral class were seen (all of them, not just those kept)."""
    lines: dict[str, set[tuple[str, int]]] = {}
    priority: dict[str, int] = {}
    for m in d.collateral:
        lines.setdefault(m.runbook_id, set()).add((m.record.source, m.record.line))
        priority[m.runbook_id] = m.priority
    for h in d.hits:
        lines.setdefault(h.runbook_id, set()).add((h.source, h.line))
        priority[h.runbook_id] = h.priority
    # a class whose every line another class of higher priority also matched is the same symptom
    # seen twice (a runbook and a catalog entry): count it once, under the more specific one
    rank = sorted(lines, key=lambda i: (-priority[i], i))
    kept = [i for n, i in enumerate(rank) if not any(lines[i] <= lines[j] for j in rank[:n])]
    return {i: file_counts.get(i, 0) for i in sorted(kept)}
