"""The MCP tools as plain functions: typed in, JSON out, `ToolFailure` with a caller-safe message.

Every answer goes through the same redaction as the CLI (`classify/redact.py`): a verdict with
`redact_diagnosis`, anything else with `scrub`. A failure message names the input and the reason,
never a traceback or a log line.
"""

from __future__ import annotations

import threading
from contextlib import contextmanager
from typing import Any

from diagnoser.classify.redact import redact_diagnosis, scrub
from diagnoser.collect.confine import below_roots
from diagnoser.mcp_server.config import McpSettings
from diagnoser.models import Diagnosis

_TRIAGE_LOCK = threading.Lock()  # the triage keeps per-process state: one call at a time
MAX_K = 50


class ToolFailure(ValueError):
    """A tool cannot answer; the message is shown to the caller as the tool error."""


def confine(paths: list[str], settings: McpSettings) -> list[str]:
    """The resolved paths, each below a configured root and existing; ToolFailure otherwise."""
    if not settings.roots:
        raise ToolFailure("no log roots are configured (DIAGNOSER_MCP__ROOTS or `diagnoser mcp --root DIR`): "
                          "this server reads no logs")
    if not paths:
        raise ToolFailure("give at least one path")
    out = []
    for arg in paths:
        path = below_roots(arg, settings.roots)
        if path is None:
            raise ToolFailure(f"{arg!r} is not below an allowed log root ({', '.join(map(str, settings.roots))})")
        if not path.exists():
            raise ToolFailure(f"{arg!r}: no such file or directory")
        out.append(str(path))
    return out


def run_triage(paths: list[str], settings: McpSettings) -> Diagnosis:
    """The CLI's triage (rules, retrieval, the LLM stage when configured), confined to the roots, redacted."""
    from diagnoser.classify import load_config
    from diagnoser.classify.stage import review, without_off_note
    from diagnoser.collect.files import UnusableInput
    from diagnoser.prefilter.runbooks import RunbookError
    from diagnoser.triage import analyse

    confined = confine(paths, settings)
    try:
        with _TRIAGE_LOCK:
            analysis = analyse(confined, runbook_dir=settings.runbooks, within=settings.roots)
            config = load_config()
            return redact_diagnosis(without_off_note(review(analysis, config), config))
    except (UnusableInput, RunbookError, ValueError) as exc:
        raise ToolFailure(scrub(str(exc))) from None


def triage(paths: list[str], settings: McpSettings) -> dict[str, Any]:
    return run_triage(paths, settings).to_json_dict()


@contextmanager
def open_store(settings: McpSettings):  # type: ignore[no-untyped-def]
    """The incident store (created with the seed memory on first use, as the CLI does)."""
    from diagnoser.retrieve.backend import open_store
    from diagnoser.retrieve.store import StoreError

    try:
        store = open_store(settings.store)
    except StoreError as exc:
        raise ToolFailure(f"incident store unavailable: {exc}") from None
    with store:
        yield store


def search_incidents(query: str, k: int, settings: McpSettings) -> dict[str, Any]:
    """`diagnoser incidents search --json`: the `k` most similar past incidents and their vote."""
    from diagnoser.retrieve.vote import tally

    if not query.strip():
        raise ToolFailure("give the failure text to search for")
    if not 1 <= k <= MAX_K:
        raise ToolFailure(f"k must be between 1 and {MAX_K}")
    with open_store(settings) as store:
        found = store.search(query, k=k)
    vote = tally(found)
    return scrub({"results": [{"score": round(s, 4), "incident": i.to_json_dict()} for i, s in found],
                  "vote": vote.model_dump(mode="json") if vote else None})


def load_books(settings: McpSettings) -> dict[str, Any]:
    from diagnoser.prefilter.runbooks import RunbookError, load_runbooks

    try:
        return {b.id: b for b in load_runbooks(settings.runbooks)}
    except RunbookError as exc:
        raise ToolFailure(str(exc)) from None


def runbook_json(book: Any) -> dict[str, Any]:
    """A runbook or a catalog entry: its verdict, documented meaning (body) and where it came from."""
    data = book.model_dump(mode="json", include={"id", "title", "category", "subtype", "action", "role", "severity",
                                                 "priority", "confidence", "summary", "path", "catalog", "body"})
    data["kind"] = "catalog entry" if book.catalog else "runbook"
    return scrub(data)


def get_runbook(runbook_id: str, settings: McpSettings) -> dict[str, Any]:
    books = load_books(settings)
    book = books.get(runbook_id.strip())
    if book is None:
        near = sorted(i for i in books if runbook_id.strip().lower() in i.lower())[:10]
        hint = f"; ids containing it: {', '.join(near)}" if near else " (`diagnoser runbooks` lists them)"
        raise ToolFailure(f"no runbook or catalog entry with id {runbook_id!r}{hint}")
    return runbook_json(book)


def runbook_for(verdict_rule: str | None, runbook_path: str | None, books: dict[str, Any]) -> Any:
    """The entry that decided: the rule id (a runbook or catalog entry), else the runbook by path."""
    if verdict_rule and verdict_rule in books:
        return books[verdict_rule]
    return next((b for b in books.values() if runbook_path and b.path == runbook_path and b.catalog is None), None)


def diagnosis_arg(value: dict[str, Any]) -> Diagnosis:
    try:
        return Diagnosis.model_validate(value)
    except ValueError as exc:
        raise ToolFailure(f"not a diagnosis/v1 verdict: {str(exc).splitlines()[0]}") from None


def incident(incident_id: str, settings: McpSettings) -> Any:
    with open_store(settings) as store:
        found = store.get(incident_id.strip())
    if found is None:
        raise ToolFailure(f"no incident {incident_id!r} in the incident store")
    return found

