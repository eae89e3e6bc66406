"""Block Kit for the verdict, the job thread, approvals and feedback. Pure functions, no I/O.

Texts are cut to Slack's limits (3,000 characters a section); redaction happens in `poster`.
"""

from __future__ import annotations

import json
from typing import Any

from diagnoser.act.approval import ApprovalRequest
from diagnoser.classify.redact import redact
from diagnoser.hostlist import compress_hostlist
from diagnoser.models import Category, Diagnosis

APPROVE, DENY = "approval_approve", "approval_deny"
FEEDBACK_CORRECT, FEEDBACK_WRONG, FEEDBACK_CATEGORY = "feedback_correct", "feedback_wrong", "feedback_category"
MAX_SECTION = 2900
EVIDENCE_LINES = 3
LINE_CHARS = 240


def esc(text: object) -> str:
    """Text from logs or the audit log, redacted, then made inert for mrkdwn: no `<!channel>` pings,
    no fake links. Redaction runs first: escaping `&` would hide query-string secrets from it."""
    return redact(str(text)).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def cut(text: str, limit: int = MAX_SECTION) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def section(text: str) -> dict:
    return {"type": "section", "text": {"type": "mrkdwn", "text": cut(text)}}


def context(text: str) -> dict:
    return {"type": "context", "elements": [{"type": "mrkdwn", "text": cut(text)}]}


def button(text: str, action_id: str, value: str, style: str | None = None) -> dict:
    b: dict[str, Any] = {"type": "button", "action_id": action_id, "value": value[:2000],
                         "text": {"type": "plain_text", "text": text}}
    if style:
        b["style"] = style
    return b


def code(text: str) -> str:
    return text.replace("```", "'''")


def runbook_link(runbook: str | None, base_url: str | None) -> str | None:
    if not runbook:
        return None
    if base_url:
        return f"<{base_url.rstrip('/')}/{runbook.lstrip('/')}|{runbook}>"
    return f"`{esc(runbook)}`"


def verdict_line(d: Diagnosis) -> str:
    """One line: category/subtype -> action (confidence, stage)."""
    return (f"*{d.category.value}* / `{esc(d.subtype)}` → *{d.action.value}* "
            f"(confidence {d.confidence:.2f}, {d.decided_by.value})")


def verdict_blocks(d: Diagnosis, job: str, runbook_url: str | None = None,
                   feedback_key: str | None = None) -> tuple[str, list[dict]]:
    """The compact verdict: headline, culprit, root cause, evidence, runbook, similar incidents."""
    blocks = [section(f"*Diagnosis for {esc(job)}*\n{verdict_line(d)}")]
    c = d.culprit
    culprit = ", ".join(p for p in (
        f"nodes {esc(compress_hostlist(c.nodes))}" if c.nodes else "",
        f"ranks {', '.join(map(str, c.ranks[:16]))}" if c.ranks else "",
        f"GPUs {esc(', '.join(c.gpus[:8]))}" if c.gpus else "") if p)
    blocks.append(section(f"*Root cause:* {esc(d.root_cause)}" + (f"\n*Culprit:* {culprit}" if culprit else "")))
    if d.evidence:
        lines = [esc(f"{e.source}:{e.line}: {cut(e.text, LINE_CHARS)}") for e in d.evidence[:EVIDENCE_LINES]]
        blocks.append(section("*Evidence*\n```" + code("\n".join(lines)) + "```"))
    extra = []
    link = runbook_link(d.runbook, runbook_url)
    if link:
        extra.append(f"Runbook: {link}")
    if d.similar_incidents:
        sims = ", ".join(esc(f"{s.id} ({s.category.value}/{s.subtype or '?'}, {s.score:.2f})")
                         for s in d.similar_incidents[:3])
        extra.append(f"Similar: {sims}")
    if extra:
        blocks.append(context("\n".join(extra)))
    if feedback_key:
        blocks.append({"type": "actions", "block_id": "feedback", "elements": [
            button("Correct", FEEDBACK_CORRECT, feedback_key, "primary"),
            button("Wrong…", FEEDBACK_WRONG, feedback_key)]})
    text = f"{job}: {d.category.value}/{d.subtype} -> {d.action.value} ({d.confidence:.2f})"
    return text, blocks


def category_picker(feedback_key: str) -> tuple[str, list[dict]]:
    """The 'Wrong → choose the right category' select."""
    options = [{"text": {"type": "plain_text", "text": c.value}, "value": f"{feedback_key}|{c.value}"}
               for c in Category]
    return "Which category is right?", [{
        "type": "section", "block_id": "feedback_category",
        "text": {"type": "mrkdwn", "text": "Which category is right?"},
        "accessory": {"type": "static_select", "action_id": FEEDBACK_CATEGORY, "options": options,
                      "placeholder": {"type": "plain_text", "text": "category"}}}]


def status_text(job: str, status: str) -> str:
    return f"*{esc(job)}* — {esc(status)}"


def status_blocks(job: str, status: str) -> list[dict]:
    return [section(status_text(job, status))]


def approval_value(run_dir: str, request_id: str) -> str:
    return json.dumps({"run_dir": run_dir, "id": request_id}, separators=(",", ":"))


def approval_blocks(req: ApprovalRequest, value: str, approvers: tuple[str, ...] = (),
                    timeout_s: float = 0.0, default_approve: bool = False) -> tuple[str, list[dict]]:
    """Approve / Deny for an action that policy says needs a human."""
    run = (req.on_approve or req.action).value
    who = " ".join(f"<@{u}>" for u in approvers[:10])
    nodes = f" on {esc(compress_hostlist(req.culprit_nodes))}" if req.culprit_nodes else ""
    wait = (f"No answer in {timeout_s:g} s → *{'approve' if default_approve else 'deny'}*."
            if timeout_s > 0 else "")
    text = f"Approval needed for {req.job_id}: {run}{nodes}"
    return text, [
        section(f"*Approval needed* {who}\nJob *{esc(req.job_id)}*, attempt {req.attempt}: run *{run}*{nodes}?\n"
                f"{req.category}/`{esc(req.subtype)}` (confidence {req.confidence:.2f}) — {esc(req.reason)}"),
        *([section(f"*Root cause:* {esc(req.root_cause)}")] if req.root_cause else []),
        *([context(wait)] if wait else []),
        {"type": "actions", "block_id": "approval", "elements": [
            button("Approve", APPROVE, value, "primary"), button("Deny", DENY, value, "danger")]},
    ]


def decided_blocks(req: ApprovalRequest, approved: bool, by: str, note: str = "") -> tuple[str, list[dict]]:
    """What replaces the buttons once decided (or timed out)."""
    run = (req.on_approve or req.action).value
    verdict = "approved" if approved else "denied"
    user = by.removeprefix("slack:")
    who = f"<@{user}>" if by.startswith("slack:") and user.isalnum() else f"`{esc(by)}`"
    text = f"{req.job_id}: {run} {verdict} by {by}"
    return text, [section(f"Job *{esc(req.job_id)}*, attempt {req.attempt}: *{run}* {verdict} by {who}"
                          + (f" ({esc(note)})" if note else ""))]
