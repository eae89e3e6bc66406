"""Turn a demarcation into a `diagnosis/v1` verdict decided by the rules.

Every evidence line cites the source and line number it was read from (grounding); the root cause
sentence is the runbook's summary filled from the matched fields.
"""

from __future__ import annotations

import re
from collections import Counter
from datetime import UTC, datetime

from diagnoser.collect.scanner import Event, raising_frame
from diagnoser.models import (
    Action,
    Category,
    Culprit,
    DecidedBy,
    Diagnosis,
    Evidence,
    FirstFailure,
    InputWarning,
    LogRecord,
    Role,
    ScanStats,
    SignatureMatch,
)
from diagnoser.prefilter.collectives import Finding
from diagnoser.prefilter.culprit import locate
from diagnoser.prefilter.demarcate import Demarcation, collateral_counts
from diagnoser.prefilter.matching import Topology
from diagnoser.prefilter.runbooks import Runbook

MAX_EVIDENCE = 8
# Hostnames that are no machine a scheduler can drain or exclude (where the job ran is still said in the
# root cause): Docker names a container's host after the first 12 hex digits of its id, some platforms
# give a container a UUID; Windows names a PC DESKTOP-/LAPTOP- and 7-8 random characters, which WSL
# passes on: a personal machine, not a cluster node
UNMANAGED_HOSTNAME = re.compile(r"[0-9a-f]{12}|[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"
                                r"|(?:DESKTOP|LAPTOP)-[0-9A-Z]{7,8}")
CLOSE_PRIORITY = 5  # a competitor this close in priority lowers confidence


class _Missing(dict):
    def __missing__(self, key: str) -> str:
        return "?"


def _summary(book: Runbook, match: SignatureMatch, culprit_node: str | None) -> str:
    values = _Missing(match.fields)
    values.setdefault("node", match.fields.get("node") or match.record.node or culprit_node or "?")
    values.setdefault("rank", str(match.record.rank) if match.record.rank is not None else "?")
    template = book.summary or book.title
    try:
        return tidy_unknowns(template.format_map(values))
    except (ValueError, IndexError):
        return book.title


_PAREN = re.compile(r" ?\(([^()]*)\)")
_UNKNOWN_WORDS = ((re.compile(r"\bon rank \?"), "on an unidentified rank"), (re.compile(r"\brank \?"), "a rank"),
                  (re.compile(r"\bGPU \?"), "a GPU"), (re.compile(r"\b(on|of) \?"), r"\1 an unidentified node"))


_UNKNOWN_PART = re.compile(r"(?:^|\s)\?(?:$|\s)")


def tidy_unknowns(text: str) -> str:
    """A summary without "?" for what the evidence did not name: "on rank ? (?)" reads
    "on an unidentified rank", "(n2, GPU ?)" reads "(n2)"."""
    def keep_known(m: re.Match[str]) -> str:
        parts = [p for p in m.group(1).split(", ") if not _UNKNOWN_PART.search(p)]
        return f" ({', '.join(parts)})" if parts else ""

    text = _PAREN.sub(keep_known, text)
    for pattern, words in _UNKNOWN_WORDS:
        text = pattern.sub(words, text)
    return text[:1].upper() + text[1:]


def _evidence_of(match: SignatureMatch) -> list[Evidence]:
    rec = match.record
    out = [Evidence(source=rec.source, line=rec.line, text=rec.text)]
    frame = raising_frame(rec)
    if frame:
        out.insert(0, Evidence(source=rec.source, line=frame[0], text=frame[1]))
    return out


def _spread(matches: list[SignatureMatch], limit: int) -> list[SignatureMatch]:
    """One match per (node, rank) first, so evidence shows the breadth of a failure."""
    seen: set[tuple] = set()
    first, rest = [], []
    for m in matches:
        key = (m.record.node, m.record.rank, m.record.source)
        (rest if key in seen else first).append(m)
        seen.add(key)
    return (first + rest)[:limit]


def _collateral_clause(counts: dict[str, int], books: dict[str, Runbook]) -> str:
    if not counts:
        return ""
    parts = [f"{n} × {books[i].subtype.replace('_', ' ')}" for i, n in counts.items() if i in books]
    return "; collateral: " + ", ".join(parts)


def evidence_led_by(records: list[LogRecord], verdict: Diagnosis, lead: int = 4, kept: int = 8) -> list[Evidence]:
    """A reconsidered verdict's evidence: the lines that changed it (up to `lead`), then up to `kept` of the
    verdict's own."""
    first = [Evidence(source=r.source, line=r.line, text=r.text) for r in records[:lead]]
    return first + [e for e in verdict.evidence if e not in first][:kept]


def scoped(culprit: Culprit, scope: str) -> Culprit:
    """Name only what the failure can be attributed to: nothing narrower than the job for a job-wide
    or external failure (preemption, DNS, a cancellation, NaN loss); the rank, never its node, for the
    job's own code (the node did nothing wrong, and a node named as culprit invites a node action); never a
    container's or a personal computer's default hostname. Rule and collective-analysis verdicts both pass here."""
    if scope == "job":
        return Culprit()
    if scope == "rank":
        return culprit.model_copy(update={"nodes": []})
    return culprit.model_copy(update={"nodes": [n for n in culprit.nodes if not UNMANAGED_HOSTNAME.fullmatch(n)]})


def rule_verdict(d: Demarcation, books: dict[str, Runbook], topo: Topology, file_counts: Counter[str],
                 weak: list[Event], stats: ScanStats, warnings: list[InputWarning]) -> Diagnosis:
    """The verdict of the rule stage (category `unknown` when nothing matched)."""
    notes: list[str] = []
    if d.history:
        notes.append(f"ignored {len(d.history)} kernel event(s) outside the job's time span "
                     f"(e.g. {d.history[0].runbook_id} at {d.history[0].record.time})")
    if d.root is None:
        return _no_signature(weak, stats, warnings, notes)
    book = books[d.root.runbook_id]
    hardware = book.category == Category.HARDWARE
    culprit = scoped(locate(d.supporting, topo, hardware=hardware, connection=book.about_connection),
                     book.culprit_scope)
    confidence = book.confidence
    # a competitor that says the same thing (a catalog entry of the runbook's class) is agreement
    close = [m for m in d.competing if d.root.priority - m.priority < CLOSE_PRIORITY and m.runbook_id in books
             and (books[m.runbook_id].category, books[m.runbook_id].action) != (book.category, book.action)]
    if close:
        confidence *= 0.85
        notes.append("close competitor: " + ", ".join(sorted({m.runbook_id for m in close})))
    if hardware and not culprit.nodes:
        confidence *= 0.9
        notes.append("hardware fault but no node named in the evidence; drain needs a node")
    if d.root.role == Role.COLLATERAL:
        notes.append("only collateral symptoms were found: the failing peer's own logs may be missing")
    counts = collateral_counts(d, file_counts)
    evidence: list[Evidence] = []
    for m in _spread(d.supporting, 4):
        evidence.extend(_evidence_of(m))
    for m in _spread(d.competing, 2) + _spread(d.collateral, 2):
        evidence.append(Evidence(source=m.record.source, line=m.record.line, text=m.record.text))
    root_cause = _summary(book, d.root, culprit.nodes[0] if culprit.nodes else None)
    if d.root.role == Role.ROOT:
        root_cause += _collateral_clause(counts, books)
    rec = d.root.record
    return Diagnosis(
        category=book.category, subtype=book.subtype,
        action=book.localised_action if book.localised_action and culprit.nodes else book.action,
        confidence=round(min(1.0, confidence), 3), culprit=culprit, root_cause=root_cause,
        evidence=_dedupe(evidence)[:MAX_EVIDENCE],
        first_failure=FirstFailure(source=rec.source, line=rec.line, time=rec.time),
        decided_by=DecidedBy.RULE, rule=book.id, runbook=book.path, collateral=counts, notes=notes,
        warnings=warnings, stats=stats,
    )


def finding_verdict(f: Finding, d: Demarcation, books: dict[str, Runbook], file_counts: Counter[str],
                    stats: ScanStats, warnings: list[InputWarning]) -> Diagnosis:
    """A verdict from the collective/hang analysis of a collateral-only failure."""
    counts = collateral_counts(d, file_counts)
    book = next((b for b in books.values() if b.subtype == f.subtype and b.category == f.category), None)
    first = f.evidence[0]
    return Diagnosis(
        category=f.category, subtype=f.subtype, action=book.action if book else f.action,
        confidence=f.confidence,
        culprit=scoped(Culprit(nodes=f.nodes, ranks=f.ranks), "rank" if f.category == Category.USER_CODE else "node"),
        root_cause=f.root_cause + _collateral_clause(counts, books), evidence=_dedupe(f.evidence)[:MAX_EVIDENCE],
        first_failure=FirstFailure(source=first.source, line=first.line), decided_by=DecidedBy.RULE,
        rule=f"collectives.{f.subtype}", runbook=book.path if book else None, collateral=counts,
        notes=["decided by the collective/progress analysis: no root-cause signature fired"],
        warnings=warnings, stats=stats,
    )


def _dedupe(evidence: list[Evidence]) -> list[Evidence]:
    seen: set[tuple[str, int]] = set()
    out = []
    for e in evidence:
        if (e.source, e.line) not in seen:
            seen.add((e.source, e.line))
            out.append(e)
    return out


def _no_signature(weak: list[Event], stats: ScanStats, warnings: list[InputWarning],
                  notes: list[str]) -> Diagnosis:
    def earliest_first(e: Event) -> tuple:
        t = e.record.time
        return (t is None, t.astimezone(UTC).replace(tzinfo=None) if t else datetime.min, e.record.source,
                e.record.line)

    ordered = sorted(weak, key=earliest_first)
    evidence = [Evidence(source=e.record.source, line=e.record.line, text=e.record.text) for e in ordered[:5]]
    first = ordered[0].record if ordered else None
    return Diagnosis(
        category=Category.UNKNOWN, subtype="no_signature", action=Action.ESCALATE, confidence=0.0,
        root_cause="No known failure signature matched; the strongest error lines are shown"
        if evidence else "No known failure signature and no error lines were found",
        evidence=evidence,
        first_failure=FirstFailure(source=first.source, line=first.line, time=first.time) if first else None,
        decided_by=DecidedBy.NONE, notes=notes, warnings=warnings, stats=stats,
    )
