"""`explain_verdict`: why a verdict is what it is, for an agent (the human view is render.py).

For a verdict: the rule or catalog entry that decided (its documented meaning and source), the
evidence lines with their sources, the first failure, and what each stage contributed (rules,
retrieval, the LLM). For a stored incident: the same entry looked up from its verdict, the masked
signature that stands for its evidence, and who vouched for it.
"""

from __future__ import annotations

from typing import Any

from diagnoser.classify.redact import redact_diagnosis, scrub
from diagnoser.mcp_server.config import McpSettings
from diagnoser.mcp_server.tools import ToolFailure, diagnosis_arg, incident, load_books, runbook_for, runbook_json
from diagnoser.models import Diagnosis

STAGES = {"rule": "a runbook signature or catalog entry matched the first failure",
          "retrieval": "no rule decided; similar past incidents agreed on the verdict",
          "llm": "the LLM stage reviewed the evidence window and its grounded answer was kept",
          "none": "no stage found enough evidence: unknown"}


def _entry(book: Any) -> dict[str, Any] | None:
    return runbook_json(book) if book is not None else None


def explain_diagnosis(d: Diagnosis, settings: McpSettings) -> dict[str, Any]:
    d = redact_diagnosis(d)
    book = runbook_for(d.rule, d.runbook, load_books(settings))
    return scrub({
        "verdict": {"category": d.category.value, "subtype": d.subtype, "action": d.action.value,
                    "confidence": d.confidence, "root_cause": d.root_cause},
        "decided_by": d.decided_by.value,
        "decided_by_means": STAGES[d.decided_by.value],
        "rule": d.rule,
        "entry": _entry(book),
        "evidence": [e.model_dump(mode="json") for e in d.evidence],
        "first_failure": d.first_failure.model_dump(mode="json") if d.first_failure else None,
        "culprit": d.culprit.model_dump(mode="json"),
        "stages": {
            "rule": {"rule": d.rule, "collateral": d.collateral},
            "retrieval": {"similar_incidents": [s.model_dump(mode="json") for s in d.similar_incidents]},
            "llm": {"decided": d.decided_by.value == "llm",
                    "notes": [n for n in d.notes if "llm" in n.lower()]},
        },
        "notes": d.notes,
    })


def explain_incident(incident_id: str, settings: McpSettings) -> dict[str, Any]:
    inc = incident(incident_id, settings)
    books = load_books(settings)
    book = runbook_for(None, inc.runbook, books) or next(
        (b for b in books.values() if b.subtype == inc.subtype and b.category == inc.category), None)
    return scrub({
        "incident": inc.id,
        "verdict": {"category": inc.category.value, "subtype": inc.subtype, "action": inc.action.value,
                    "root_cause": inc.root_cause},
        "status": inc.status.value, "confirmed_by": inc.confirmed_by, "count": inc.count,
        "first_seen": inc.first_seen.isoformat(), "last_seen": inc.last_seen.isoformat(),
        "resolution": inc.resolution, "outcome": inc.outcome.value,
        "entry": _entry(book),
        "evidence": [{"source": "incident signature (masked)", "line": n, "text": line}
                     for n, line in enumerate(inc.signature.splitlines(), 1)],
        "culprit": inc.culprit.model_dump(mode="json"),
        "origin": inc.origin,
    })


def explain_verdict(incident_id: str | None, diagnosis: dict[str, Any] | None, settings: McpSettings) -> dict[str, Any]:
    if (incident_id is None) == (diagnosis is None):
        raise ToolFailure("give exactly one of incident_id (e.g. inc-00042) or diagnosis (a triage result)")
    if incident_id is not None:
        return explain_incident(incident_id, settings)
    return explain_diagnosis(diagnosis_arg(diagnosis or {}), settings)
