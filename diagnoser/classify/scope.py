"""The nodes of this job: the only names a culprit (and so a drain or an exclusion) may carry.

A node is a node of the job when the job's own records say so: the file or directory a log came
from (`gpu-017/rank5.log`), the host field of NCCL lines, the host of a syslog/kernel line, the node
in a slurmstepd or srun record, a torchrun failure block's host, NCCL's rank placement and
bootstrap addresses, or a node field a signature captured from a scheduler record ("JOB 7 ON cn119",
"Node failure on gpu-003"). A word that merely occurs in a log line ("NVRM", "python3", "ERROR",
"Wed") is not a node.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from diagnoser.classify.policy import JobScope, RuleRef, lines_of, policed, with_own_rule
from diagnoser.models import Diagnosis, LogRecord
from diagnoser.prefilter.culprit import REDACTED_NAME

if TYPE_CHECKING:
    from diagnoser.triage import Analysis


def job_nodes(analysis: Analysis, extra: Iterable[LogRecord] = ()) -> frozenset[str]:
    """Every node name the job's records attribute a line, a rank or a file to."""
    scan = analysis.scan
    names: set[str] = {s.node for s in scan.sources if s.node}
    for m in scan.matches:
        names.add(m.record.node or "")
        names.add(m.fields.get("node") or "")
    for h in scan.hits:
        names.add(h.node or "")
        names.add(h.named_node or "")
    for s in scan.sources:
        names.update(e.record.node or "" for e in s.weak)
    names.update(r.node or "" for r in extra)
    topo = scan.topology
    names.update(p.node for p in topo.placements.values() if p.node)
    names.update(topo.task_nodes.values())
    names.update(topo.node_ips.values())
    names.update(analysis.diagnosis.culprit.nodes)
    # a placeholder ("?", "...", "xxx", "<redacted>") or localhost is no node of the job's
    return frozenset(n for n in names if n and n != "localhost" and not REDACTED_NAME.match(n))


def _hit_records(analysis: Analysis) -> dict[tuple[str, int], LogRecord]:
    """The records of matches and error lines by (source, line) (the first for a line wins)."""
    out: dict[tuple[str, int], LogRecord] = {}
    for s in analysis.scan.sources:
        for r in [*(m.record for m in s.matches), *(e.record for e in s.weak)]:
            out.setdefault((r.source, r.line), r)
    return out


def all_records(analysis: Analysis) -> dict[tuple[str, int], LogRecord]:
    """Every record the scan kept (matches, error lines, file tails) by (source, line)."""
    out: dict[tuple[str, int], LogRecord] = {}
    for s in analysis.scan.sources:
        for r in [*(m.record for m in s.matches), *(e.record for e in s.weak), *s.tail]:
            out.setdefault((r.source, r.line), r)
    return out


def records_at(analysis: Analysis, keys: Iterable[tuple[str, int]]) -> dict[tuple[str, int], LogRecord]:
    """`all_records` for a few (source, line) keys: only the tails of the files named are unpacked."""
    wanted = set(keys)
    hits = _hit_records(analysis)
    out = {k: hits[k] for k in wanted if k in hits}
    sources = {k[0] for k in wanted - out.keys()}
    for s in analysis.scan.sources:
        if s.source in sources:
            out.update({(r.source, r.line): r for r in s.tail if (r.source, r.line) in wanted and
                        (r.source, r.line) not in out})
    return out


def scope_of(analysis: Analysis) -> JobScope:
    """The policy's view of a job: its nodes and ranks, and which rules matched which line."""
    books = analysis.runbooks
    topo = analysis.scan.topology
    rank_nodes: dict[int, str] = {**topo.task_nodes, **{r: p.node for r, p in topo.placements.items() if p.node}}
    ranks = set(rank_nodes)
    hits = _hit_records(analysis)
    by_source: dict[str, list[tuple[int | None, str | None]]] = {}
    for r in hits.values():
        by_source.setdefault(r.source, []).append((r.rank, r.node))
    for s in analysis.scan.sources:  # every record's rank in the order of `all_records` (later wins)
        for rank, node in [*by_source.get(s.source, ()), *((h.rank, h.node) for h in s.hits), *s.tail_ranks]:
            if rank is not None:
                ranks.add(rank)
                if node:
                    rank_nodes[rank] = node
    ranks |= {s.rank for s in analysis.scan.sources if s.rank is not None}
    line_rules: dict[tuple[str, int], tuple[RuleRef, ...]] = {}
    for m in analysis.scan.matches:
        book = books.get(m.runbook_id)
        if book is not None:
            key = (m.record.source, m.record.line)
            line_rules[key] = (*line_rules.get(key, ()), RuleRef(book.id, book.category, book.priority))
    # collateral lines kept as facts only (prefilter/collateral.py) have no text to cite: no
    # verdict's evidence is one of them, so the policy never asks for their rules
    return JobScope(job_nodes(analysis), frozenset(ranks), rank_nodes, line_rules,
                    {b.id: b.priority for b in books.values()}, dict(topo.node_ips))


def police_verdict(analysis: Analysis, verdict: Diagnosis) -> Diagnosis:
    """A rules + retrieval verdict of this analysis under the policy table (`policy.police`)."""
    scope = with_own_rule(scope_of(analysis), verdict)
    return policed(verdict, lines_of(verdict, records_at(analysis, ((e.source, e.line) for e in verdict.evidence))),
                   scope)
