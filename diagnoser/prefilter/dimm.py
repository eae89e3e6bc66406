"""Corrected memory errors piling up on one DIMM make the DIMM the failing part.

One corrected error (CE) is harmless: ECC fixed it. A DIMM that corrects errors at a high rate is failing:
mcelog's DIMM tracking runs its dimm-error-trigger when one DIMM corrects more than `THRESHOLD` errors in
`WINDOW` (mcelog.conf `[dimm] ce-error-threshold = 10 / 24h`, andikleen/mcelog). The kernel's EDAC core and
rasdaemon report each batch with its count and the DIMM's label ("EDAC MC1: 3 CE memory read error on
CPU_SrcID#0_Ha#0_Chan#1_DIMM#0 (...)", "1 Corrected error(s): memory read error at CPU_SrcID#1_MC#1_Chan#1_DIMM#0
location: ..."), so the rate can be summed per node and DIMM across reports.

Only a verdict that corrected errors decided is reconsidered: a real root cause (an uncorrectable error, a
crash, an OOM) keeps its verdict. Only kernel and health sources count (a line the job printed is not
evidence, `split_hints` already set those aside). The verdict it gives is the catalog's burst entry
(`host-hardware.edac-correctable-burst`: category, action, runbook), so a site or a held-out evaluation
that drops that entry drops this too.
"""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime, timedelta

from diagnoser.models import Culprit, Diagnosis, SignatureMatch
from diagnoser.prefilter.runbooks import Runbook
from diagnoser.prefilter.verdict import evidence_led_by, scoped

THRESHOLD = 10
WINDOW = timedelta(hours=24)
CORRECTED = "host_corrected_error"  # the subtype of the single-corrected-error entries
VERDICT_ENTRY = "host-hardware.edac-correctable-burst"
# edac_mc_handle_error(): "<count> CE <message> on <label> (<location>)"; rasdaemon's ras-mc-ctl --errors:
# "<count> Corrected error(s): <message> at <label> location: ..."
_EDAC = re.compile(r"\bEDAC (?:\w+ )?MC(?P<mc>\d+): (?P<count>\d+) CE\b.*? on (?P<label>.+?)(?: \(|$)")
_RAS = re.compile(r"\b(?P<count>\d+) Corrected error\(s\): [\w ]*?error at (?P<label>\S+)")


@dataclass(frozen=True)
class FailingDimm:
    node: str | None
    label: str
    errors: int
    matches: list[SignatureMatch]


def _reading(text: str) -> tuple[int, str] | None:
    """(corrected errors, DIMM label) of one report; a report that names no DIMM counts for its controller."""
    m = _EDAC.search(text)
    if m:
        label = m.group("label").strip()
        return int(m.group("count")), (f"MC{m.group('mc')}" if label.startswith("unknown memory") else label)
    m = _RAS.search(text)
    return (int(m.group("count")), m.group("label")) if m else None


def _most_in_window(reports: list[tuple[datetime | None, int]]) -> int:
    """The most errors within any `WINDOW`; reports without a time all count together (one excerpt)."""
    if any(t is None for t, _ in reports):
        return sum(n for _, n in reports)
    timed = sorted((t, n) for t, n in reports if t is not None)
    best = total = start = 0
    for t, n in timed:  # a window ending at each report
        total += n
        while t - timed[start][0] > WINDOW:
            total -= timed[start][1]
            start += 1
        best = max(best, total)
    return best


def failing_dimm(matches: list[SignatureMatch], books: dict[str, Runbook]) -> FailingDimm | None:
    """The DIMM with the most corrected errors in a window, if it reached `THRESHOLD`."""
    # (node, DIMM label) -> the reports on it: (time, corrected errors, the match)
    reports: dict[tuple[str | None, str], list[tuple[datetime | None, int, SignatureMatch]]] = defaultdict(list)
    for m in matches:
        book = books.get(m.runbook_id)
        reading = _reading(m.record.text) if book is not None and book.subtype == CORRECTED else None
        if reading is not None:
            reports[(m.record.node, reading[1])].append((m.record.time, reading[0], m))
    counted = {key: _most_in_window([(t, n) for t, n, _ in r]) for key, r in reports.items()}
    if not counted:
        return None
    key = max(counted, key=lambda k: counted[k])
    if counted[key] < THRESHOLD:
        return None
    return FailingDimm(node=key[0], label=key[1], errors=counted[key], matches=[m for _, _, m in reports[key]])


def with_failing_dimm(verdict: Diagnosis, matches: list[SignatureMatch], books: dict[str, Runbook]) -> Diagnosis:
    """The verdict, or the burst entry's verdict naming the node when corrected errors add up on one DIMM."""
    book = books.get(VERDICT_ENTRY)
    if verdict.subtype != CORRECTED or book is None:
        return verdict
    dimm = failing_dimm(matches, books)
    if dimm is None:
        return verdict
    where = f"DIMM {dimm.label}" + (f" of {dimm.node}" if dimm.node else "")
    return verdict.model_copy(update={
        "category": book.category, "subtype": book.subtype, "action": book.action,
        "confidence": book.confidence,
        "culprit": scoped(Culprit(nodes=[dimm.node] if dimm.node else []), "node"),
        "root_cause": (f"{dimm.errors} corrected memory errors on {where}, past mcelog's per-DIMM threshold "
                       f"({THRESHOLD} in 24 h): the DIMM is failing; drain the node and replace the DIMM"),
        "evidence": evidence_led_by([m.record for m in dimm.matches], verdict),
        "rule": book.id, "runbook": book.path or verdict.runbook,
        "notes": [*verdict.notes, f"was {verdict.category.value}/{verdict.subtype}: {dimm.errors} corrected errors "
                  f"added up on one DIMM"],
    })
