"""`triage(paths) -> Diagnosis`: the library entry point behind `diagnoser triage`.

collect (files, stdin) -> scan + match (parallel) -> demarcate -> culprit -> verdict.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

from diagnoser.classify.redact import redact_diagnosis
from diagnoser.collect.files import Source, UnusableInput, list_sources
from diagnoser.collect.prefixes import split_prefix
from diagnoser.collect.timestamps import has_year, nearest_year
from diagnoser.models import DecidedBy, Diagnosis, Evidence, InputWarning, Role, ScanStats, SignatureMatch
from diagnoser.prefilter.collectives import Finding, RankTail, stack_outliers
from diagnoser.prefilter.collectives import analyse as analyse_collectives
from diagnoser.prefilter.consistency import with_job_consistency
from diagnoser.prefilter.demarcate import Demarcation, demarcate
from diagnoser.prefilter.dimm import with_failing_dimm
from diagnoser.prefilter.recurrence import with_recurring_gpu_fault
from diagnoser.prefilter.runbooks import Runbook, load_runbooks
from diagnoser.prefilter.scan import ScanResult, SourceResult, scan_sources
from diagnoser.prefilter.trust import kernel_text_from_the_job, plausible_span, split_hints, waited_since
from diagnoser.prefilter.verdict import finding_verdict, rule_verdict

if TYPE_CHECKING:
    from diagnoser.retrieve.incident import Incident


def job_span(scan: ScanResult) -> tuple[datetime | None, datetime | None]:
    """First and last plausible time in the job's own (non-kernel) logs (see prefilter/trust.py), the start
    reaching back to when a timed-out collective began waiting."""
    times = [t for s in scan.sources if s.kind != "dmesg" for t in (s.first_time, s.last_time) if t]
    start, end = plausible_span(times)
    began = waited_since([m.record for m in scan.matches if m.record.kind != "dmesg"], (start, end))
    return (began if began is not None and start is not None and began < start else start), end


def reanchor_years(matches: list[SignatureMatch], span: tuple[datetime | None, datetime | None]
                   ) -> list[SignatureMatch]:
    """Give year-less timestamps (syslog, glog) the year nearest the job's dated logs."""
    anchor = span[0]
    if anchor is None:
        return matches
    out = []
    for m in matches:
        rec = m.record
        if rec.time is not None and not rec.time_inferred and not has_year(split_prefix(rec.text).rest):
            moved = nearest_year(rec.time, anchor)
            if moved != rec.time:
                m = m.model_copy(update={"record": rec.model_copy(update={"time": moved})})
        out.append(m)
    return out


REUSE_LISTING_S = 10.0
_last_listing: tuple[tuple, float, tuple[list[Source], list[tuple[str, str]]]] | None = None


def resolve_inputs(paths: list[str], within: tuple[Path, ...] | None = None
                   ) -> tuple[list[Source], list[InputWarning]]:
    """Readable sources, or UnusableInput with a one-line reason (`within`: see `list_sources`)."""
    global _last_listing
    if not paths:
        raise UnusableInput("no input: give log files, directories, or - for stdin")
    sources, problems = list_sources(paths, within)
    _last_listing = ((tuple(paths), within), time.monotonic(), (sources, problems))
    return _usable(paths, sources, problems)


def _resolve_again(paths: list[str], within: tuple[Path, ...] | None) -> tuple[list[Source], list[InputWarning]]:
    """`resolve_inputs`, reusing the listing a caller made just before for the same inputs (the CLI
    lists them to size its progress bar; walking 100,000 files twice costs seconds). Used once."""
    global _last_listing
    last, _last_listing = _last_listing, None
    fresh = last is not None and time.monotonic() - last[1] < REUSE_LISTING_S
    if paths and fresh and last[0] == (tuple(paths), within):
        return _usable(paths, *last[2])
    return resolve_inputs(paths, within)


def _usable(paths: list[str], sources: list[Source], problems: list[tuple[str, str]]
            ) -> tuple[list[Source], list[InputWarning]]:
    warnings = [InputWarning(source=p, message=m) for p, m in problems]
    if not sources:
        if problems:
            raise UnusableInput(f"{problems[0][0]}: {problems[0][1]}" +
                                (f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""))
        raise UnusableInput(f"no log files found in {', '.join(paths)}")
    return sources, warnings


MAX_WARNINGS = 50


def cap_warnings(warnings: list[InputWarning], limit: int = MAX_WARNINGS) -> list[InputWarning]:
    """At most `limit` warnings; the rest are counted in one last warning (5,000 bad files must not
    make a 500 KB verdict)."""
    if len(warnings) <= limit:
        return warnings
    rest = len(warnings) - (limit - 1)
    return [*warnings[: limit - 1], InputWarning(source="(more)", message=f"{rest} more warning(s) not listed")]


@dataclass
class Analysis:
    """Everything the rule stage saw: the verdict and the evidence window later stages use."""

    diagnosis: Diagnosis
    demarcation: Demarcation
    scan: ScanResult
    runbooks: dict[str, Runbook]


def triage(
    paths: list[str],
    runbook_dir: Path | None = None,
    workers: int | None = None,
    on_progress: Callable[[int], None] | None = None,
    within: tuple[Path, ...] | None = None,
) -> Diagnosis:
    """Diagnose a failed job from its logs (rules; retrieval and LLM stages build on `analyse`).
    `within`: read nothing outside these roots, symlinks included (the chat bot)."""
    return analyse(paths, runbook_dir, workers, on_progress, within).diagnosis


def analyse(
    paths: list[str],
    runbook_dir: Path | None = None,
    workers: int | None = None,
    on_progress: Callable[[int], None] | None = None,
    within: tuple[Path, ...] | None = None,
) -> Analysis:
    """Collect, scan, demarcate and decide by rules; keep the window for later stages."""
    sources, warnings = _resolve_again(paths, within)
    runbooks = load_runbooks(runbook_dir)
    scan = scan_sources(sources, runbook_dir, workers, on_progress, runbooks)
    warnings = cap_warnings(warnings + scan.warnings)
    readable = [s for s in scan.sources if s.warning is None or s.bytes]  # a damaged .gz keeps what it had
    if not readable:
        raise UnusableInput(f"no readable log: {warnings[0].source}: {warnings[0].message}")
    if sum(s.bytes for s in readable) == 0:
        raise UnusableInput("empty input: the logs given contain no data")
    file_counts: Counter[str] = Counter()
    for s in readable:
        file_counts.update(s.counts)
    stats = ScanStats(files=len(readable), bytes=sum(s.bytes for s in readable),
                      lines=sum(s.lines for s in readable), matches=sum(file_counts.values()),
                      seconds=round(scan.seconds, 3))
    books = {b.id: b for b in runbooks}
    span = job_span(scan)
    evidence, hints = split_hints(reanchor_years(scan.matches, span), books)
    d = demarcate(evidence, span, scan.hits)
    verdict = None
    if d.root is None or d.root.role == Role.COLLATERAL:
        finding = explain_collateral(d, readable, scan)
        if finding is not None:
            verdict = finding_verdict(finding, d, books, file_counts, stats, warnings)
    if verdict is None:
        weak = [e for s in readable for e in s.weak]
        verdict = rule_verdict(d, books, scan.topology, file_counts, weak, stats, warnings)
    verdict = with_recurring_gpu_fault(verdict, evidence, books)
    verdict = with_failing_dimm(verdict, evidence, books)
    verdict = with_job_consistency(verdict, scan.topology, books)
    if hints:
        first = hints[0].record
        verdict = verdict.model_copy(update={"notes": [*verdict.notes, (
            f"not evidence: {len(hints)} kernel-only hardware line(s) printed by the job itself "
            f"({first.source}:{first.line}); hardware evidence counts only from kernel logs")]})
    if verdict.decided_by == DecidedBy.NONE and not verdict.evidence:
        verdict = with_last_lines(verdict, readable)
    verdict = with_retrieval(verdict)
    if verdict.decided_by == DecidedBy.NONE:
        verdict = with_closest_vocabulary(verdict, [e.record.text for s in readable for e in s.weak][:400], runbooks)
    analysis = Analysis(verdict, d, scan, books)
    from diagnoser.classify.scope import police_verdict  # the policy table every verdict passes

    # secrets are redacted before anything prints, stores or sends the verdict
    analysis.diagnosis = redact_diagnosis(police_verdict(analysis, analysis.diagnosis))
    return analysis


def with_closest_vocabulary(verdict: Diagnosis, error_lines: list[str], rules: list[Runbook]) -> Diagnosis:
    """Nothing fired and no past incident is close: the closest vocabulary entry, weakly (see vocabulary.py)."""
    from diagnoser.retrieve.vocabulary import MAX_CONFIDENCE, closest_entry

    found = closest_entry("\n".join(error_lines), rules)
    if found is None:
        return verdict
    r = found.rule
    return verdict.model_copy(update={
        "category": r.category, "subtype": r.subtype, "action": r.action, "decided_by": DecidedBy.RETRIEVAL,
        "rule": r.id, "runbook": r.path, "confidence": round(min(MAX_CONFIDENCE, found.score), 3),
        "root_cause": f"No signature matched; the error lines are closest to '{r.title}' "
                      f"({r.category.value}/{r.subtype}, similarity {found.score:.2f})",
        "notes": [*verdict.notes, f"decided by the closest entry of the failure vocabularies ({r.id}): "
                  "a weak verdict, check the evidence"]})


SAME_SIGNATURE_SCORE = 0.95  # masked signatures this close differ only in what masking kept (paths, names)


LAST_LINES = 8  # lines quoted when a log has no known signature and no error-looking line


def with_last_lines(verdict: Diagnosis, readable: list[SourceResult]) -> Diagnosis:
    """No signature and no error line: quote where the log stopped (the file that ended last), so the
    verdict still shows its strongest evidence and the incident memory has something to compare.
    Kernel-only text the job printed itself is left out: quoted, it would hand forged hardware evidence
    to the incident memory's vote."""
    timed = [s for s in readable if s.last_time is not None]
    ended_last = max(timed, key=lambda s: s.last_time) if timed else (readable[0] if readable else None)
    if ended_last is None:
        return verdict
    tail = [r for r in ended_last.tail if r.text.strip() and not kernel_text_from_the_job(r)][-LAST_LINES:]
    if not tail:
        return verdict
    return verdict.model_copy(update={
        "evidence": [Evidence(source=r.source, line=r.line, text=r.text) for r in tail],
        "root_cause": f"No known failure signature and no error lines were found; {ended_last.source} "
                      f"ends with the lines shown"})


def with_retrieval(verdict: Diagnosis) -> Diagnosis:
    """Attach similar past incidents; when no rule decided, a confident neighbour vote decides.

    The incident memory is optional (`pip install diagnoser[retrieval]`) and never breaks triage."""
    try:
        from diagnoser.retrieve.api import neighbours
        from diagnoser.retrieve.vote import neighbour_vote
    except ImportError:
        return verdict
    text = "\n".join(e.text for e in verdict.evidence)
    if not text:
        return verdict
    near = neighbours(text)  # one search serves both the list and the vote
    update: dict = {"similar_incidents": [inc.similar(score) for inc, score in near]}
    correction = person_corrected(text, near)
    if correction is not None and (correction.category, correction.action) != (verdict.category, verdict.action):
        who = f" by {correction.confirmed_by}" if correction.confirmed_by else ""
        return verdict.model_copy(update=update | {
            "category": correction.category, "subtype": correction.subtype, "action": correction.action,
            "confidence": max(verdict.confidence, 0.9), "decided_by": DecidedBy.RETRIEVAL,
            "root_cause": f"{verdict.root_cause} -- corrected: a person classified this failure signature as "
                          f"{correction.category.value}/{correction.subtype} ({correction.id}{who})",
            "notes": [*verdict.notes, f"decided by a person's correction of the same failure signature "
                      f"({correction.id}{who}); the rules said {verdict.category.value}/{verdict.subtype}"]})
    if verdict.decided_by == DecidedBy.NONE:
        vote = neighbour_vote(near)
        if vote is not None:
            update |= {"category": vote.category, "subtype": vote.subtype, "action": vote.action,
                       "confidence": round(vote.confidence, 3), "decided_by": DecidedBy.RETRIEVAL,
                       "root_cause": f"No runbook signature matched; {len(vote.support)} similar past incident(s) "
                                     f"({', '.join(vote.support[:3])}) were {vote.category.value}/{vote.subtype}",
                       "notes": [*verdict.notes, "decided by a vote of similar past incidents"]}
    return verdict.model_copy(update=update)


def person_corrected(evidence_text: str, near: list) -> Incident | None:
    """A corrected incident with this very failure signature: a person's verdict beats any rule's."""
    from diagnoser.retrieve.incident import Status
    from diagnoser.retrieve.signature import same_failure_key, signature_text

    signature = signature_text(evidence_text)
    mine = same_failure_key(signature) if signature else None
    for inc, score in near:
        if inc.status is not Status.CORRECTED:
            continue  # only a person's correction decides; the key is not worth computing for the rest
        if score >= SAME_SIGNATURE_SCORE or same_failure_key(inc.signature) == mine:
            return inc
    return None


def explain_collateral(d: Demarcation, readable: list[SourceResult], scan: ScanResult) -> Finding | None:
    """Who everyone waited for: desync, outlier stacks, silent ranks, stalled progress."""
    topo = scan.topology
    tails: dict[int, RankTail] = {}
    stacks = {}
    for s in readable:
        if s.rank is None or s.kind == "dmesg":
            continue
        node = s.node or topo.node_of_rank(s.rank)
        if s.stack is not None:
            stacks[s.rank] = (s.source, node, s.stack)
        else:
            tails[s.rank] = RankTail(s.rank, node, s.source, s.last_progress, s.last_time,
                                     s if s.progress_in_tail else None)
    nranks = max((p.nranks for p in topo.placements.values()), default=None)
    return analyse_collectives([*d.collateral, *d.hits], tails, nranks, stack_outliers(stacks))
