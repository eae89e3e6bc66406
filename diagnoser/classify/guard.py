"""Grounding and guardrails: what of an LLM answer may reach the verdict, and who decides.

The model's answer is an opinion checked line by line:
- every cited evidence id must be a line of the prompt's evidence block (else the claim is dropped);
  lines that look like instructions (prompt injection) never count as proof;
- culprit nodes and ranks must appear in the job's logs;
- the action must be allowed for the category by policy; a hardware verdict needs a cited line
  naming the failing part; draining or excluding nodes needs those nodes named in the evidence;
- a confident rule verdict wins over the model, and a weaker one too unless the model is more
  confident; the disagreement is recorded in `notes`;
- low confidence turns the action into `escalate`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass, field

from diagnoser.classify.answer import LLMAnswer
from diagnoser.models import (
    Action,
    Category,
    Culprit,
    DecidedBy,
    Diagnosis,
    Evidence,
    FirstFailure,
    LogRecord,
)

RULE_WINS = 0.8  # a known-category rule/retrieval verdict at least this confident is kept
LOW_CONFIDENCE = 0.5  # below this the LLM's verdict is escalated to a human
LLM_MAX_CONFIDENCE = 0.9  # a model's self-reported confidence is capped
MAX_NODES_REMOVED = 2  # drain/exclude more nodes than this only with a human

ALLOWED: dict[Category, frozenset[Action]] = {
    Category.HARDWARE: frozenset({Action.DRAIN_AND_RESTART, Action.RESTART_EXCLUDING_NODES, Action.RESTART,
                                  Action.ESCALATE}),
    Category.INFRA: frozenset({Action.RESTART, Action.RESTART_EXCLUDING_NODES, Action.RETRY_AFTER_BACKOFF,
                               Action.DRAIN_AND_RESTART, Action.ESCALATE}),
    Category.USER_CODE: frozenset({Action.STOP_AND_NOTIFY, Action.ROLLBACK_AND_RESTART, Action.ESCALATE}),
    Category.UNKNOWN: frozenset({Action.ESCALATE}),
}
REMOVES_NODES = frozenset({Action.DRAIN_AND_RESTART, Action.RESTART_EXCLUDING_NODES})

HARDWARE_PART = re.compile(
    r"(?i)\bXid\b|\bECC\b|\bDBE\b|NVLink|NVSwitch|\bSXid\b|PCIe|\bAER\b|\bHBM\b|fallen off the bus|GPU is lost|"
    r"GPU requires reset|row.?remap|page retirement|mlx5|\bHCA\b|port error|link (?:is )?down|Lost carrier|"
    r"Machine check|\bmce\b|Hardware Error|EDAC|thermal|overheat|Kernel panic|LOCKUP|soft lockup|"
    r"uncorrectable|double.bit|\(rev ff\)|ECC_UNCORRECTABLE|dcgm"
)

_INSTRUCTION = [
    r"(?i)\b(?:ignore|disregard|forget|override)\b.{0,60}\b(?:instructions?|prompts?|rules?|messages?|context|"
    r"system|above|guidelines?)\b",
    r"(?i)(?:^|[\]:>|]\s*|\s{2})(?:system|assistant|developer)\s*(?:prompt|message)?\s*:\s",
    r"(?i)^\W*(?:system|assistant|developer)\b\s*[:>]",
    r"(?i)\byou (?:are|must|should|will) (?:now |hereby )?(?:an?\b|the\b|answer|respond|reply|output|classify|"
    r"ignore|act|follow)",
    r"(?i)\b(?:drain|cordon|exclude|reboot|kill)\b.{0,40}\b(?:all|every|each)\b.{0,20}\b(?:nodes?|hosts?|gpus?)\b",
    r"(?i)\b(?:new|updated|real|actual) (?:instructions?|task|system prompt)\b",
    r"(?i)\"(?:category|action|culprit_nodes|decided_by|confidence|evidence)\"\s*:",
    r"<\|(?:im_start|im_end|system|user|assistant|endoftext|eot_id|start_header_id)\|?>|\[/?INST\]|<</?SYS>>",
    r"(?i)</?(?:system|instructions?|prompt)>",
    r"(?i)\b(?:as an ai|language model|llm|chatgpt|the assistant)\b.{0,40}\b(?:must|should|shall|will)\b",
]
_INSTRUCTION_RE = [re.compile(p) for p in _INSTRUCTION]


def looks_like_instruction(text: str) -> bool:
    """Whether a log line reads like text aimed at a model rather than at a person (injection)."""
    return any(p.search(text) for p in _INSTRUCTION_RE)


@dataclass(frozen=True)
class JobScope:
    """The nodes and ranks that appear in the job's logs (what a culprit may name)."""

    nodes: frozenset[str]
    ranks: frozenset[int]
    texts: tuple[str, ...] = ()

    @classmethod
    def of(cls, window: Iterable[LogRecord], rule: Diagnosis) -> JobScope:
        records = list(window)
        nodes = {r.node for r in records if r.node} | set(rule.culprit.nodes)
        ranks = {r.rank for r in records if r.rank is not None} | set(rule.culprit.ranks)
        texts = tuple([r.source for r in records] + [r.text for r in records] + [e.text for e in rule.evidence])
        return cls(frozenset(nodes), frozenset(ranks), texts)

    def has_node(self, node: str) -> bool:
        if node in self.nodes:
            return True
        if len(node) < 3:
            return False
        pattern = re.compile(rf"(?<![\w.-]){re.escape(node)}(?![\w-])")
        return any(pattern.search(t) for t in self.texts)

    def has_rank(self, rank: int) -> bool:
        if rank in self.ranks:
            return True
        pattern = re.compile(rf"(?i)\brank[\s:=_-]*{rank}\b|\[rank{rank}\]")
        return any(pattern.search(t) for t in self.texts)


@dataclass
class Checked:
    """An answer after grounding: what survived and what was dropped, in words."""

    answer: LLMAnswer
    cited: list[LogRecord]  # grounded, not instruction-like, in id order
    nodes: list[str]
    ranks: list[int]
    category: Category
    action: Action
    notes: list[str] = field(default_factory=list)


COLLATERAL = re.compile(
    r"(?i)Watchdog caught collective|Timed out waiting|timed out after|communicator (?:was )?aborted|"
    r"Some NCCL operations have failed|taking the entire process down|closing signal|ChildFailedError|"
    r"Connection closed by peer|remote worker crashing|SIGTERM|CANCELLED AT"
)


def _short(text: object, limit: int = 40) -> str:
    """Model-chosen text quoted on one line, cut (notes stay readable whatever it produced)."""
    return json.dumps(str(text)[:limit], ensure_ascii=False)


def _proves_node(record: LogRecord, node: str, category: Category) -> bool:
    """A cited line that names the node and shows a fault there (not a timeout waiting for it)."""
    named = record.node == node or re.search(rf"(?<![\w.-]){re.escape(node)}(?![\w-])", record.text) is not None
    if not named or COLLATERAL.search(record.text):
        return False
    return category != Category.HARDWARE or HARDWARE_PART.search(record.text) is not None


def check(answer: LLMAnswer, evidence: dict[str, LogRecord], flagged: set[str], scope: JobScope) -> Checked:
    """Ground the answer's citations and culprit, then apply the action policy."""
    notes: list[str] = []
    ids = list(dict.fromkeys(answer.evidence))
    missing = [i for i in ids if i not in evidence]
    if missing:
        notes.append(f"LLM cited line ids that are not in its evidence, dropped: {', '.join(map(_short, missing[:8]))}")
    hostile = [i for i in ids if i in flagged]
    if hostile:
        notes.append(f"LLM cited instruction-like log lines, not accepted as proof: {', '.join(hostile)}")
    good = sorted((i for i in ids if i in evidence and i not in flagged), key=lambda i: int(i[1:]))
    cited = [evidence[i] for i in good]
    nodes = [n for n in dict.fromkeys(answer.culprit_nodes) if scope.has_node(n)]
    ranks = [r for r in dict.fromkeys(answer.culprit_ranks) if scope.has_rank(r)]
    unknown = [_short(n) for n in answer.culprit_nodes if n not in nodes] + [
        str(r) for r in answer.culprit_ranks if r not in ranks]
    if unknown:
        notes.append(f"LLM culprit not found in the job's logs, dropped: {', '.join(unknown[:8])}")
    category, action = answer.category, answer.action
    if category == Category.HARDWARE and not any(HARDWARE_PART.search(r.text) for r in cited):
        notes.append("LLM said hardware but cited no line naming the failing part: category unknown, escalate")
        category, action = Category.UNKNOWN, Action.ESCALATE
    if action not in ALLOWED[category]:
        notes.append(f"policy: action {action.value} is not allowed for {category.value}: escalate")
        action = Action.ESCALATE
    if action in REMOVES_NODES:
        named = [n for n in nodes if any(_proves_node(r, n, category) for r in cited)]
        if not named:
            notes.append(f"policy: {action.value} needs a culprit node whose fault a cited line shows: escalate")
            action = Action.ESCALATE
        elif len(named) > MAX_NODES_REMOVED:
            notes.append(f"policy: {action.value} of {len(named)} nodes needs a human: escalate")
            action = Action.ESCALATE
        else:
            nodes = named
    return Checked(answer, cited, nodes, ranks, category, action, notes)


def rule_is_authoritative(rule: Diagnosis) -> bool:
    return (rule.category != Category.UNKNOWN and rule.confidence >= RULE_WINS
            and rule.decided_by in (DecidedBy.RULE, DecidedBy.RETRIEVAL))


def decide(rule: Diagnosis, checked: Checked, runbook_of: dict[str, str], source: str) -> Diagnosis:
    """Merge the rule verdict and a checked LLM answer into the final verdict.

    `runbook_of` maps subtypes to runbook paths; `source` tells how the answer was obtained
    (endpoint and method, or the cache) for the notes.
    """
    a = checked.answer
    said = f"{a.category.value}/{a.subtype} -> {a.action.value} (confidence {a.confidence:.2f})"
    notes = [*rule.notes, *checked.notes]
    if rule_is_authoritative(rule):
        if (a.category, a.action) == (rule.category, rule.action):
            notes.append(f"LLM agrees with the {rule.decided_by.value} verdict ({source})")
        else:
            notes.append(f"LLM disagreed: {said}; the {rule.decided_by.value} verdict (confidence "
                         f"{rule.confidence:.2f}) stands ({source})")
        return rule.model_copy(update={"notes": notes})
    if not checked.cited:
        notes.append(f"LLM answer not used: it cited no line of the evidence ({said}; {source})")
        return rule.model_copy(update={"notes": notes})
    action = checked.action
    confidence = min(a.confidence, LLM_MAX_CONFIDENCE)
    if rule.category != Category.UNKNOWN and confidence <= rule.confidence:
        if (checked.category, action) != (rule.category, rule.action):
            notes.append(f"LLM disagreed: {said}; not more confident than the {rule.decided_by.value} verdict "
                         f"(confidence {rule.confidence:.2f}), which stands ({source})")
        else:
            notes.append(f"LLM agrees with the {rule.decided_by.value} verdict ({source})")
        return rule.model_copy(update={"notes": notes})
    if confidence < LOW_CONFIDENCE and action != Action.ESCALATE:
        notes.append(f"LLM confidence {confidence:.2f} is below {LOW_CONFIDENCE}: escalate")
        action = Action.ESCALATE
    if rule.category != Category.UNKNOWN:
        notes.append(f"LLM overrides the weaker {rule.decided_by.value} verdict {rule.category.value}/"
                     f"{rule.subtype} -> {rule.action.value} (confidence {rule.confidence:.2f})")
    notes.append(f"decided by the LLM ({source})")
    if a.explanation:
        notes.append(f"LLM explanation: {a.explanation}")
    first = checked.cited[0]
    gpus = rule.culprit.gpus if checked.nodes and set(checked.nodes) <= set(rule.culprit.nodes) else []
    subtype = a.subtype if checked.category == a.category else "unsupported_claim"
    return rule.model_copy(update={
        "category": checked.category, "subtype": subtype, "action": action,
        "confidence": round(confidence, 3),
        "culprit": Culprit(nodes=checked.nodes, ranks=checked.ranks, gpus=gpus),
        "root_cause": a.root_cause or rule.root_cause,
        "evidence": [Evidence(source=r.source, line=r.line, text=r.text) for r in checked.cited],
        "first_failure": FirstFailure(source=first.source, line=first.line, time=first.time),
        "decided_by": DecidedBy.LLM, "runbook": runbook_of.get(subtype), "notes": notes,
    })
