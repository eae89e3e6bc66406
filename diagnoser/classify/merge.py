"""The merge of the rules + retrieval verdict and a checked LLM answer into one Diagnosis.

The rule, in order:
1. An answer that is not an opinion does not take part: it cited no line of its evidence, said
   `unknown`, said itself it is unsure (confidence < 0.5), or the policy table downgraded it
   (changed its category or action). The rules + retrieval verdict stands.
2. Agreement (same category and action family) raises the verdict's confidence:
   c + (1 - c) / 2, at most 0.99; the rule verdict, its culprit and its `rule` stay.
3. Disagreement is settled by the strength of the evidence each side cites, never by the model's
   self-reported confidence:
   - 4  a person's correction of this failure signature (retrieval);
   - 3  a hardware verdict on a kernel/driver line naming the part (dmesg, syslog) that no specific
        rule of another category claims (NVIDIA's catalog calls Xid 31/43 application faults);
   - 2  a specific rule: a runbook or catalog entry of priority >= 40 (for the model: a cited line
        that such a rule of the model's category matched, or the rule verdict's own decisive line,
        which the model then reads differently: the same evidence);
   - 1  a generic class (the `python-exception` runbook, catalog rules below priority 40, the
        collective/hang analysis, a neighbour vote); for the model: any other grounded line;
   - 0  no verdict (`unknown`).
   The model wins when its evidence is stronger. When it is not stronger, the model must at least
   cite the line the verdict rests on (its first failure) and read it differently; then it wins at
   equal strength when its action removes no node (it read the whole window, the rule stage took
   the first signature; draining or excluding a node takes evidence stronger than the verdict it
   replaces, unless the category is the same), and within the same category it may choose the
   action (a full disk vs. a transient storage error, a firewall vs. a flaky link) unless that
   removes a node on weaker evidence or the rule side is kernel-proven hardware or a person's
   correction. When the model wins, its verdict's confidence comes from its evidence
   (0.6 / 0.75 / 0.9 for 1 / 2 / 3), never from what it says of itself, and `rule` is empty.
"""

from __future__ import annotations

from collections.abc import Mapping

from diagnoser.classify.guard import Checked
from diagnoser.classify.policy import KERNEL_KINDS, JobScope, RuleRef
from diagnoser.models import (
    NODE_ACTIONS,
    Action,
    Category,
    Culprit,
    DecidedBy,
    Diagnosis,
    Evidence,
    FirstFailure,
    LogRecord,
)

UNSURE = 0.5  # an answer the model itself rates below this does not take part
CONFIDENCE_OF = {1: 0.6, 2: 0.75, 3: 0.9}
FAMILY = {Action.ROLLBACK_AND_RESTART: Action.RESTART, Action.RESTART_EXCLUDING_NODES: Action.DRAIN_AND_RESTART}


def rule_strength(rule: Diagnosis, lines: list[LogRecord], scope: JobScope) -> int:
    """How strong the evidence of the rules + retrieval verdict is (see the module docstring)."""
    if rule.category == Category.UNKNOWN or rule.decided_by == DecidedBy.NONE:
        return 0
    if rule.decided_by == DecidedBy.RETRIEVAL:
        return 4 if any("person's correction" in n for n in rule.notes) else 1
    rid = rule.rule or ""
    if rid.startswith("collectives."):
        return 1
    ref = RuleRef(rid, rule.category, scope.priorities.get(rid, 100))
    if not ref.specific:
        return 1
    if rule.category == Category.HARDWARE and any(r.kind in KERNEL_KINDS and scope.names_part(r) for r in lines):
        return 3
    return 2


def answer_strength(category: Category, cited: list[LogRecord], scope: JobScope) -> tuple[int, str | None]:
    """(strength, the specific rule that backs it) of the lines a model cited for `category`."""
    best, backing = (1 if cited else 0), None
    for r in cited:
        others = [x for x in scope.rules_of(r) if x.specific and x.category != category]
        if category == Category.HARDWARE and r.kind in KERNEL_KINDS and scope.names_part(r) and not others:
            return 3, next((x.id for x in scope.rules_of(r) if x.category == category), None)
        for x in scope.rules_of(r):
            if x.category == category and x.specific and best < 2:
                best, backing = 2, x.id
    return best, backing


def _family(action: Action) -> Action:
    return FAMILY.get(action, action)


def decide(rule: Diagnosis, checked: Checked, scope: JobScope, rule_lines: list[LogRecord],
           runbook_of: Mapping[str, str], source: str) -> Diagnosis:
    """Merge the (policed) rules + retrieval verdict and a checked LLM answer.

    `rule_lines`: the records behind the rule verdict's evidence; `runbook_of` maps subtypes to
    runbook paths; `source` says how the answer was obtained (for the notes)."""
    a = checked.answer
    said = f"{a.category.value}/{a.subtype} -> {a.action.value}"
    notes = [*rule.notes, *checked.notes]

    def stands(why: str) -> Diagnosis:
        notes.append(f"{why} ({said}; {source}); the {rule.decided_by.value} verdict stands")
        return rule.model_copy(update={"notes": notes})

    if a.category == Category.UNKNOWN:
        return stands("LLM abstained")
    if not checked.cited:
        return stands("LLM answer not used: it cited no line of the evidence")
    if checked.downgraded:
        return stands("LLM answer not used: the policy downgraded it")
    if a.confidence < UNSURE:
        return stands(f"LLM answer not used: the model rates it {a.confidence:.2f}")
    if (checked.category, _family(checked.action)) == (rule.category, _family(rule.action)):
        confidence = round(min(0.99, rule.confidence + (1 - rule.confidence) / 2), 3)
        notes.append(f"LLM agrees with the {rule.decided_by.value} verdict: confidence {rule.confidence:.2f} -> "
                     f"{confidence:.2f} ({source})")
        return rule.model_copy(update={"notes": notes, "confidence": confidence})
    mine = rule_strength(rule, rule_lines, scope)
    theirs, backing = answer_strength(checked.category, checked.cited, scope)
    ff = rule.first_failure
    reads = ff is None or any((r.source, r.line) == (ff.source, ff.line) for r in checked.cited)
    if mine == 2 and ff is not None and reads:
        theirs = max(theirs, 2)  # it reads the rule's own decisive line differently: the same evidence
    same, removes = checked.category == rule.category, checked.action in NODE_ACTIONS
    wins = theirs > mine or (reads and ((theirs == mine and (same or not removes))
                                        or (same and not removes and mine <= 2)))
    weighed = f"evidence {theirs} (LLM) vs {mine} ({rule.decided_by.value}{', ' + rule.rule if rule.rule else ''})"
    if not wins:
        return stands(f"LLM disagreed, {weighed}")
    if rule.category != Category.UNKNOWN:
        notes.append(f"LLM overrides the {rule.decided_by.value} verdict {rule.category.value}/{rule.subtype} -> "
                     f"{rule.action.value}: {weighed}")
    notes.append(f"decided by the LLM ({source})" + (f"; its evidence matches {backing}" if backing else ""))
    if a.explanation:
        notes.append(f"LLM explanation: {a.explanation}")
    first = checked.cited[0]
    gpus = rule.culprit.gpus if checked.nodes and set(checked.nodes) <= set(rule.culprit.nodes) else []
    return rule.model_copy(update={
        "category": checked.category, "subtype": a.subtype, "action": checked.action,
        "confidence": CONFIDENCE_OF[theirs],
        "culprit": Culprit(nodes=checked.nodes, ranks=checked.ranks, gpus=gpus),
        "root_cause": a.root_cause or rule.root_cause,
        "evidence": [Evidence(source=r.source, line=r.line, text=r.text) for r in checked.cited],
        "first_failure": FirstFailure(source=first.source, line=first.line, time=first.time),
        "decided_by": DecidedBy.LLM, "rule": None, "runbook": runbook_of.get(a.subtype), "notes": notes,
    })
