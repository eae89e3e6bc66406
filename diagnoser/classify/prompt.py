"""Assemble the triage prompt from a versioned template within a token budget.

The evidence window becomes numbered lines with ids stable for a given window (`E3 |
gpu-017/rank5.log:812 | ...`), oldest first. Log text is quoted as JSON strings between markers
derived from the evidence's hash, so a log line can neither close the data block nor pass for a
line of the prompt. Lines repeated by many ranks collapse into one with a count. When the prompt
would not fit the model's context, the lowest-value parts go first (repeats, later evidence,
extra runbooks and incidents); the decisive lines, the window's strongest lines and the rule
verdict stay.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC
from functools import cache, lru_cache, partial
from pathlib import Path
from string import Template

from diagnoser.classify.guard import looks_like_instruction
from diagnoser.classify.redact import redact
from diagnoser.models import Action, Category, Diagnosis, LogRecord, SimilarIncident
from diagnoser.shipped import shipped_dir

MAX_LINE = 320  # characters of one evidence line in the prompt
MAX_CONTEXT_LINES = 4  # traceback frames kept under an exception line
MAX_CONTEXT_CHARS = 160
MAX_RUNBOOK = 900  # characters of one runbook excerpt
MAX_REPEATS_SHOWN = 2  # lines of the same template shown before collapsing into a count
STRONG_LINES = 24  # the window's first lines (its strongest, see window.py) go in before runbooks and incidents
MAX_WINDOW = 600  # records considered at most (the window is ordered by value); a budget never fits more
REDACT_OVERLAP = 256  # characters redacted beyond a cut, so a secret across the cut is still recognised
MESSAGE_OVERHEAD = 8  # chat-template tokens per message
REPAIR_RESERVE = 96  # tokens kept free for the one repair turn

CATEGORY_HELP = {
    Category.HARDWARE: "a machine part failed: GPU (Xid 48/63/64/74/79/92/94/95/119/120, ECC, fell off the bus), "
                       "NVLink, PCIe, HBM, NIC/HCA port, host memory, overheating, node crash",
    Category.INFRA: "shared services or the stack around the job: IB/RoCE fabric, NCCL network errors, storage, "
                    "scheduler events (node failure, preemption, eviction), rendezvous store, DNS, driver mismatch",
    Category.USER_CODE: "the job itself: script exceptions, CUDA OOM from its sizes, dataloader host OOM, bad config, "
                        "bad checkpoint, NaN loss, desynchronised collectives, device-side asserts, port conflicts",
    Category.UNKNOWN: "not enough evidence to tell",
}
ACTION_HELP = {
    Action.RESTART: "resume from the newest valid checkpoint on the same nodes (transient infra events)",
    Action.RESTART_EXCLUDING_NODES: "resume without the culprit nodes (bad link or NIC on a node)",
    Action.DRAIN_AND_RESTART: "drain the culprit node in the scheduler, then resume (failed hardware)",
    Action.RETRY_AFTER_BACKOFF: "wait, then resume (flaky network, storage or a shared service)",
    Action.ROLLBACK_AND_RESTART: "resume from an older checkpoint (NaN / loss spike, corrupt checkpoint)",
    Action.STOP_AND_NOTIFY: "stop and tell the job's owner (user code: a restart would fail the same way)",
    Action.ESCALATE: "a human decides (low confidence, or unclear evidence)",
}


_PIECE = re.compile(r"[A-Za-z]+|[0-9]|[ ]+|[\t\r\n\x0b\x0c]|[^\x00-\x7f]+|.", re.S)
_CASE = re.compile(r"[a-z](?=[A-Z])|[A-Z](?=[a-z])")


def estimate_tokens(text: str) -> int:
    """A deliberately pessimistic token count for BPE tokenizers (no tokenizer needed).

    Calibrated on a small model's byte-level BPE (one of the least efficient on logs): a digit,
    punctuation or control character is a token; a word costs a token per 3.5 letters plus one per
    case change; a long letter run (ids, base64) a token per 1.6 letters; a space run a token per 8;
    other Unicode a token per byte (a BPE token is never shorter than a byte). 5% on top. It
    overestimates English by ~1.6x and logs by ~1.2-1.5x, and stays above the real count on
    random hex, base64 and Unicode.
    """
    n = 0
    for m in _PIECE.finditer(text):
        piece = m.group(0)
        c = piece[0]
        if c.isascii() and c.isalpha():
            size, changes = len(piece), len(_CASE.findall(piece))
            n += math.ceil(size / 3.5) + changes if size <= 12 else max(math.ceil(size / 1.6),
                                                                        math.ceil(size / 4) + changes)
        elif c == " ":
            n += 1 + len(piece) // 8 if len(piece) > 1 else 0
        elif not c.isascii():
            n += len(piece.encode("utf-8"))
        else:
            n += 1
    return math.ceil(n * 1.05)


def prompts_dir() -> Path:
    return shipped_dir("prompts", "DIAGNOSER_PROMPTS")


@dataclass(frozen=True)
class PromptTemplate:
    version: str
    system: str
    user: str


@cache
def load_template(version: str = "triage-v1", directory: Path | None = None) -> PromptTemplate:
    """Parse `prompts/<version>.md`: front matter, then `## system` and `## user` sections."""
    path = (directory or prompts_dir()) / f"{version}.md"
    text = path.read_text(encoding="utf-8")
    m = re.match(r"\A---\n(.*?)\n---\n(.*)\Z", text, re.S)
    if not m:
        raise ValueError(f"{path}: no front matter")
    declared = re.search(r"^version:\s*(\S+)", m.group(1), re.M)
    if not declared or declared.group(1) != version:
        raise ValueError(f"{path}: front matter must declare version: {version}")
    parts = re.split(r"^## (system|user)\s*$", m.group(2), flags=re.M)
    sections = {parts[i]: parts[i + 1].strip("\n") for i in range(1, len(parts) - 1, 2)}
    if set(sections) != {"system", "user"}:
        raise ValueError(f"{path}: needs exactly a '## system' and a '## user' section")
    return PromptTemplate(version, sections["system"], sections["user"])


@dataclass(frozen=True)
class EvidenceItem:
    """One numbered line of the evidence block."""

    id: str
    record: LogRecord
    flagged: bool  # looks like an instruction (prompt injection attempt)
    repeats: int = 0  # further lines of the same template not shown
    repeat_ranks: tuple[int, ...] = ()


@dataclass
class Prompt:
    """The rendered prompt and what it contains (for grounding, caching and notes)."""

    version: str
    system: str
    user: str
    items: dict[str, EvidenceItem]  # id -> item, only those in the prompt
    tokens: int
    budget: int
    dropped_lines: int = 0
    dropped_other: int = 0
    notes: list[str] = field(default_factory=list)

    def messages(self) -> list[dict[str, str]]:
        return [{"role": "system", "content": self.system}, {"role": "user", "content": self.user}]


_MASK = re.compile(r"0x[0-9a-fA-F]+|\d+")


def template_of(text: str) -> str:
    return _MASK.sub("#", text)[:200]


def _when(r: LogRecord) -> tuple:
    t = r.time
    return (t is None, t.astimezone(UTC).replace(tzinfo=None).isoformat() if t else "", r.source, r.line)


def number_window(window: list[LogRecord]) -> tuple[list[EvidenceItem], dict[str, list[LogRecord]]]:
    """Items with stable ids (oldest first) and, per item id, the repeats folded into it."""
    unique: dict[tuple[str, int], LogRecord] = {}
    for r in window[:MAX_WINDOW]:
        unique.setdefault((r.source, r.line), r)
    ordered = sorted(unique.values(), key=_when)
    shown: dict[str, list[str]] = {}
    folded: dict[str, list[LogRecord]] = {}
    items: list[EvidenceItem] = []
    for i, r in enumerate(ordered, 1):
        key = template_of(r.text)
        ids = shown.setdefault(key, [])
        if len(ids) >= MAX_REPEATS_SHOWN:
            folded.setdefault(ids[-1], []).append(r)
            continue
        item_id = f"E{i}"
        ids.append(item_id)
        items.append(EvidenceItem(item_id, r, _flagged(r)))
    out = []
    for item in items:
        extra = folded.get(item.id, [])
        ranks = tuple(sorted({x.rank for x in extra if x.rank is not None}))
        out.append(EvidenceItem(item.id, item.record, item.flagged, len(extra), ranks))
    return out, folded


@lru_cache(maxsize=4096)
def _cut(text: str, limit: int) -> str:
    """What the model is shown of a text: redacted, cut to `limit` characters (head and tail kept)."""
    if len(text) > limit + 2 * REDACT_OVERLAP:  # redact only what can be shown, with room for a whole secret
        head, tail = redact(text[:limit + REDACT_OVERLAP]), redact(text[-(limit + REDACT_OVERLAP):])
    else:
        text = redact(text)
        if len(text) <= limit:
            return text
        head, tail = text, text
    keep = int(limit * 0.75)
    return f"{head[:keep]} … {tail[-(limit - keep - 3):]}"


def _quote(text: str, limit: int) -> str:
    """The shown text as a JSON string, with the data-block markers neutralised."""
    quoted = json.dumps(_cut(text, limit), ensure_ascii=False)
    return quoted.replace("<<<", "‹‹‹").replace(">>>", "›››")


def _flagged(r: LogRecord) -> bool:
    """Whether what the model would see of a record reads like an instruction."""
    return looks_like_instruction(_cut(r.text, MAX_LINE)) or any(
        looks_like_instruction(_cut(c, MAX_CONTEXT_CHARS)) for c in r.context[-MAX_CONTEXT_LINES:])


def _ranks(ranks: tuple[int, ...]) -> str:
    if len(ranks) > 12:
        return f"ranks {ranks[0]}..{ranks[-1]} ({len(ranks)})"
    return "ranks " + ",".join(map(str, ranks))


def render_item(item: EvidenceItem) -> str:
    r = item.record
    where = " ".join(x for x in (r.node and f"node={r.node}", r.rank is not None and f"rank={r.rank}") if x) or "-"
    when = r.time.isoformat() if r.time else "-"
    line = f"{item.id} | {_quote(r.source, 120)[1:-1]}:{r.line} | {where} | {when} | {_quote(r.text, MAX_LINE)}"
    if item.flagged:
        line += " [instruction-like]"
    if item.repeats:
        line += f" (+{item.repeats} similar lines" + (f", {_ranks(item.repeat_ranks)})" if item.repeat_ranks else ")")
    for ctx in r.context[-MAX_CONTEXT_LINES:]:
        line += f"\n    {_quote(ctx, MAX_CONTEXT_CHARS)}"
    return line


def render_rule(rule: Diagnosis, ids: dict[tuple[str, int], str]) -> str:
    def cite(source: str, line: int) -> str:
        return f"{source}:{line}" + (f" ({ids[(source, line)]})" if (source, line) in ids else "")

    lines = [f"verdict: {rule.category.value} / {rule.subtype} -> {rule.action.value}, "
             f"confidence {rule.confidence:.2f}, decided by {rule.decided_by.value}",
             f"root cause (from log fields): {_quote(rule.root_cause, 300)}"]
    if rule.first_failure:
        lines.append("first failure across ranks: " + cite(rule.first_failure.source, rule.first_failure.line))
    c = rule.culprit
    if c.nodes or c.ranks or c.gpus:
        lines.append(f"culprit: nodes {', '.join(c.nodes) or '-'}; ranks {', '.join(map(str, c.ranks)) or '-'}; "
                     f"gpus {', '.join(c.gpus) or '-'}")
    if rule.collateral:
        lines.append("collateral lines counted: " + ", ".join(f"{k} x{v}" for k, v in rule.collateral.items()))
    for note in rule.notes[:4]:
        lines.append(f"note: {_quote(note, 200)}")
    return "\n".join(lines)


def render_similar(s: SimilarIncident) -> str:
    text = f"- {s.id} (score {s.score:.2f}): {s.category.value} / {s.subtype or '?'} -> {s.action.value}"
    if s.resolution:
        text += f"; resolution: {_quote(s.resolution, 240)}"
    return text


def runbook_excerpt(name: str, text: str) -> str:
    """Front-matter essentials and the 'What it means' section of a runbook."""
    keep = [f"[{name}]"]
    for key in ("id", "category", "subtype", "action"):
        m = re.search(rf"^{key}:\s*(.+)$", text, re.M)
        if m:
            keep.append(f"{key}: {m.group(1).strip()}")
    body = re.split(r"^---\s*$", text, maxsplit=2, flags=re.M)[-1]
    means = re.search(r"^## What it means\s*$(.*?)(?=^## |\Z)", body, re.M | re.S)
    keep.append(" ".join((means.group(1) if means else body).split()))
    return redact("\n".join(keep))[:MAX_RUNBOOK]


def _vocab() -> tuple[str, str]:
    cats = "\n".join(f"- {c.value}: {CATEGORY_HELP[c]}" for c in Category)
    acts = "\n".join(f"- {a.value}: {ACTION_HELP[a]}" for a in Action)
    return cats, acts


def build_prompt(rule: Diagnosis, window: list[LogRecord], similar: list[SimilarIncident],
                 runbook_texts: dict[str, str], budget: int, version: str = "triage-v1") -> Prompt:
    """Render the prompt within `budget` estimated tokens (raises ValueError when even the
    decisive evidence does not fit)."""
    tpl = load_template(version)
    cats, acts = _vocab()
    system = redact(Template(tpl.system).safe_substitute(categories=cats, actions=acts))
    items, _ = number_window(window)
    ids = {(i.record.source, i.record.line): i.id for i in items}
    rule_block = render_rule(rule, ids)
    decisive = {(e.source, e.line) for e in rule.evidence}
    if rule.first_failure:
        decisive.add((rule.first_failure.source, rule.first_failure.line))
    digest = hashlib.sha256("\n".join(f"{i.record.source}:{i.record.line}:{i.record.text}" for i in items)
                            .encode("utf-8", "replace")).hexdigest()[:12]
    begin, end = f"<<<LOG DATA {digest}>>>", f"<<<END LOG DATA {digest}>>>"

    # (value, kind, key, render): lower value goes in first, the rest as long as the budget allows
    parts: list[tuple[float, str, str, Callable[[], str]]] = []
    rank_of: dict[tuple[str, int], int] = {}  # the window is ordered by value (decisive, competing, ..., weak)
    for n, r in enumerate(window[:MAX_WINDOW]):
        rank_of.setdefault((r.source, r.line), n)
    for item in items:
        key = (item.record.source, item.record.line)
        n = rank_of[key]
        value = 0.0 if key in decisive else (0.5 if n < STRONG_LINES else 3.0) + n / (len(rank_of) + 1)
        parts.append((value, "evidence", item.id, partial(render_item, item)))
    for n, (name, text) in enumerate(runbook_texts.items()):
        parts.append((1.0 if n == 0 else 5.0 + n / 1000, "runbook", name, partial(runbook_excerpt, name, text)))
    for n, s in enumerate(similar):
        parts.append((2.0 + n / 1000 if n < 3 else 6.0 + n / 1000, "similar", s.id, partial(render_similar, s)))
    parts.sort(key=lambda p: p[0])

    def render(chosen: list[tuple[float, str, str, str]]) -> str:
        ev = [p for p in chosen if p[1] == "evidence"]
        ev.sort(key=lambda p: int(p[2][1:]))
        rb = [p[3] for p in chosen if p[1] == "runbook"]
        sm = [p[3] for p in chosen if p[1] == "similar"]
        return Template(tpl.user).safe_substitute(
            rule=rule_block, similar="\n".join(sm) or "(none)", runbooks="\n\n".join(rb) or "(none)",
            evidence="\n".join(p[3] for p in ev) or "(no evidence lines)", begin=begin, end=end, count=len(ev))

    fixed = estimate_tokens(system) + estimate_tokens(render([])) + 2 * MESSAGE_OVERHEAD
    if fixed > budget:
        raise ValueError(f"the prompt skeleton alone needs ~{fixed} tokens, budget is {budget}")
    chosen: list[tuple[float, str, str, str]] = []
    used, misses = fixed, 0
    for value, kind, key, make in parts:
        text = make()
        cost = estimate_tokens(text) + 1
        if used + cost <= budget:
            chosen.append((value, kind, key, text))
            used, misses = used + cost, 0
        else:
            misses += 1
            if misses >= 50:  # the budget is spent: stop rendering what cannot fit
                break
    user = render(chosen)
    while chosen and estimate_tokens(system) + estimate_tokens(user) + 2 * MESSAGE_OVERHEAD > budget:
        chosen.pop()  # never exceed: drop the lowest-value part until it fits
        user = render(chosen)
    kept = {p[2] for p in chosen if p[1] == "evidence"}
    if items and not kept:
        raise ValueError(f"not even one evidence line fits the budget of {budget} tokens")
    prompt = Prompt(tpl.version, system, user, {i.id: i for i in items if i.id in kept},
                    estimate_tokens(system) + estimate_tokens(user) + 2 * MESSAGE_OVERHEAD, budget,
                    dropped_lines=len(items) - len(kept),
                    dropped_other=sum(1 for p in parts if p[1] != "evidence")
                    - sum(1 for p in chosen if p[1] != "evidence"))
    if prompt.dropped_lines or prompt.dropped_other:
        prompt.notes.append(f"prompt trimmed to its token budget ({budget}): {len(kept)} of {len(items)} "
                            f"evidence lines kept, {prompt.dropped_other} runbook/incident excerpt(s) left out")
    return prompt
