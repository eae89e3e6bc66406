"""Grounding: what of an LLM answer may reach the merge (`merge.decide`).

The model's answer is an opinion checked line by line:
- every cited evidence id must be a line of the prompt's evidence block (else the claim is dropped);
  lines that look like instructions (prompt injection) never count as proof;
- culprit ranks must be ranks of the job;
- then the one policy table every verdict passes (`policy.police`): the action allowed for the
  category, hardware only with a cited line naming the part, a culprit node only if it is a node of
  this job and a cited line ties the fault to it. An answer whose category or action the policy
  changed is marked `downgraded`: it never overrides anything.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

from diagnoser.classify.answer import LLMAnswer
from diagnoser.classify.policy import JobScope, police
from diagnoser.models import Action, Category, LogRecord

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


@dataclass
class Checked:
    """An answer after grounding and policy: what survived and what was dropped, in words."""

    answer: LLMAnswer
    cited: list[LogRecord]  # grounded, not instruction-like, in id order
    nodes: list[str]
    ranks: list[int]
    category: Category
    action: Action
    notes: list[str] = field(default_factory=list)
    downgraded: bool = False  # the policy changed its category or action


def _short(text: object, limit: int = 40) -> str:
    """Model-chosen text quoted on one line, cut (notes stay readable whatever it produced)."""
    return json.dumps(str(text)[:limit], ensure_ascii=False)


def check(answer: LLMAnswer, evidence: dict[str, LogRecord], flagged: set[str], scope: JobScope) -> Checked:
    """Ground the answer's citations and culprit, then apply the policy table."""
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
    mentioned = " ".join(r.text for r in cited)
    ranks = [r for r in dict.fromkeys(answer.culprit_ranks) if r in scope.ranks
             or re.search(rf"(?i)\brank[\s:=_-]*{r}\b|\[rank{r}\]", mentioned)]
    dropped = [str(r) for r in answer.culprit_ranks if r not in ranks]
    if dropped:
        notes.append(f"LLM culprit ranks not found in the job, dropped: {', '.join(dropped[:8])}")
    p = police("LLM", answer.category, answer.action, [_short(n, 64)[1:-1] if n not in scope.nodes else n
                                                       for n in answer.culprit_nodes], cited, scope)
    return Checked(answer, cited, p.nodes, ranks, p.category, p.action, notes + p.notes, p.downgraded)
