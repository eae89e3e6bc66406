"""One policy table for every verdict: rule, retrieval and LLM opinions pass the same checks.

- action allowed for the category (`ALLOWED`): hardware -> drain, exclude, restart, escalate;
  infra -> restart, exclude, retry, drain, stop (a full disk, a bad container or driver config),
  escalate; user_code -> stop, rollback, escalate; unknown -> escalate, restart, exclude (a hang's
  silent rank, a bare SIGKILL). Else: `escalate`.
- hardware names the part: a line of the verdict's evidence names a machine part (`HARDWARE_PART`:
  GPU Xid/ECC/NVLink/PCIe/HBM, NIC/HCA incl. InfiniBand "catastrophic" errors, AMD GPU errors, host
  memory, thermal, kernel panic), or a hardware rule matched it, and is not kernel text the job
  printed itself (an Xid in a rank's output is a hint, `prefilter/trust.py`). Else: `unknown` / `escalate`.
- a culprit node is a node of this job (`JobScope.nodes`, see `scope.job_nodes`: log files and
  directories named after nodes, NCCL host fields, kernel/syslog hosts, scheduler and launcher
  records, NCCL rank placement), never just any word of the text. Else: the name is dropped.
- a drained or excluded node is tied to the fault by a line of the evidence: the line comes from
  that node (its record's node, or a rank placed on it) or names it (or the address NCCL's bootstrap
  lines give it: a peer error names the IP), is not a collateral timeout,
  and for hardware names the part. Else: the name is dropped.
- at most `MAX_NODES_REMOVED` nodes drained or excluded. Else: `escalate`.

A drain or exclusion left without a node keeps its action (the rule stage does the same when a
log names no host): the controller then escalates it (`act/policy.py`, `no_culprit`) and never
removes a node the verdict does not name.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from diagnoser.models import NODE_ACTIONS, Action, Category, Culprit, DecidedBy, Diagnosis, LogRecord
from diagnoser.prefilter.trust import kernel_text_from_the_job

MAX_NODES_REMOVED = 2  # drain/exclude more nodes than this only with a human
KERNEL_KINDS = frozenset({"dmesg", "syslog"})
GENERIC_PRIORITY = 40  # catalog rules below this priority are generic classes (a bare exception, errno, signal)
GENERIC_RULES = frozenset({"python-exception"})

ALLOWED: dict[Category, frozenset[Action]] = {
    Category.HARDWARE: frozenset({Action.DRAIN_AND_RESTART, Action.RESTART_EXCLUDING_NODES, Action.RESTART,
                                  Action.ESCALATE}),
    Category.INFRA: frozenset({Action.RESTART, Action.RESTART_EXCLUDING_NODES, Action.RETRY_AFTER_BACKOFF,
                               Action.DRAIN_AND_RESTART, Action.STOP_AND_NOTIFY, Action.ESCALATE}),
    Category.USER_CODE: frozenset({Action.STOP_AND_NOTIFY, Action.ROLLBACK_AND_RESTART, Action.ESCALATE}),
    # unknown: a hang names the rank everyone waited for (restart without its node), a bare SIGKILL is
    # restarted; anything else unknown is escalated
    Category.UNKNOWN: frozenset({Action.ESCALATE, Action.RESTART, Action.RESTART_EXCLUDING_NODES}),
}

HARDWARE_PART = re.compile(
    r"(?i)\bXid\b|\bECC\b|\bDBE\b|NVLink|NVSwitch|\bSXid\b|PCIe|\bAER\b|\bHBM\b|fallen off the bus|GPU is lost|"
    r"GPU requires reset|row.?remap|page retirement|mlx\d|\bHCA\b|port error|link (?:is )?down|Lost carrier|"
    r"Machine check|\bmce\b|Hardware Error|EDAC|thermal|overheat|Kernel panic|LOCKUP|soft lockup|"
    r"uncorrectable|double.bit|\(rev ff\)|ECC_UNCORRECTABLE|dcgm|"
    r"catastrophic|InfiniBand|\bIB (?:port|link|device)|local catastrophic error|"  # IB/HCA fatal errors
    r"amdgpu|\bXGMI\b|\bRAS\b|GPU reset|HW Exception by GPU|ring \w+ timeout|GPU hang|\bhsa\b.{0,40}hardware"  # AMD
)
COLLATERAL = re.compile(
    r"(?i)caught collective operation timeout|Timed out waiting|timed out after|communicator (?:was )?aborted|"
    r"Some NCCL operations have failed|taking the entire process down|closing signal|ChildFailedError|"
    r"Connection closed by peer|remote worker crashing|SIGTERM|CANCELLED AT"
)


@dataclass(frozen=True)
class RuleRef:
    """A rule (runbook or catalog entry) that matched a line."""

    id: str
    category: Category
    priority: int

    @property
    def specific(self) -> bool:
        return self.priority >= GENERIC_PRIORITY and self.id not in GENERIC_RULES


@dataclass(frozen=True)
class JobScope:
    """What a verdict may name: the job's nodes and ranks, and the rules that matched each line."""

    nodes: frozenset[str]
    ranks: frozenset[int] = frozenset()
    rank_nodes: Mapping[int, str] = field(default_factory=dict)
    line_rules: Mapping[tuple[str, int], tuple[RuleRef, ...]] = field(default_factory=dict)
    priorities: Mapping[str, int] = field(default_factory=dict)
    # a node's addresses as NCCL's bootstrap lines give them (ip -> node): a peer error names the IP
    node_ips: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def of_records(cls, records: Iterable[LogRecord], nodes: Iterable[str] = (),
                   priorities: Mapping[str, int] | None = None) -> JobScope:
        """A scope from records alone (their node and rank fields), when no `Analysis` is at hand."""
        recs = list(records)
        return cls(frozenset({r.node for r in recs if r.node} | set(nodes)),
                   frozenset(r.rank for r in recs if r.rank is not None),
                   {r.rank: r.node for r in recs if r.rank is not None and r.node}, {}, dict(priorities or {}))

    def rules_of(self, r: LogRecord) -> tuple[RuleRef, ...]:
        return self.line_rules.get((r.source, r.line), ())

    def names_part(self, r: LogRecord) -> bool:
        """The line names a failing machine part (by pattern, or a hardware rule matched it). Kernel
        text the job printed itself names nothing: any stage (rule, incident memory, model) that cites
        it as hardware evidence is overruled, as in the rule stage's trust model (prefilter/trust.py)."""
        if kernel_text_from_the_job(r):
            return False
        return bool(HARDWARE_PART.search(r.text)) or any(x.category == Category.HARDWARE for x in self.rules_of(r))

    def ties(self, r: LogRecord, node: str, category: Category) -> bool:
        """A line that shows a fault on `node` (not a timeout waiting for it)."""
        names = [node, *(ip for ip, owner in self.node_ips.items() if owner == node)]
        named = (r.node == node or (r.rank is not None and self.rank_nodes.get(r.rank) == node)
                 or any(re.search(rf"(?<![\w.-]){re.escape(n)}(?![\w-])", r.text) for n in names))
        if not named or COLLATERAL.search(r.text):
            return False
        return category != Category.HARDWARE or self.names_part(r)


@dataclass
class Policed:
    """A verdict after the policy: what survived, and why anything changed."""

    category: Category
    action: Action
    nodes: list[str]
    notes: list[str] = field(default_factory=list)
    downgraded: bool = False  # category or action was changed by the policy


def police(who: str, category: Category, action: Action, nodes: Iterable[str], lines: list[LogRecord],
           scope: JobScope) -> Policed:
    """Apply the table to a verdict of `who` ("rule", "retrieval", "LLM") backed by `lines`."""
    notes: list[str] = []
    wanted = list(dict.fromkeys(nodes))
    foreign = [n for n in wanted if n not in scope.nodes]
    if foreign:
        notes.append(f"{who} culprit is not a node of this job, dropped: {', '.join(foreign[:4])}")
    start = (category, action)
    if category == Category.HARDWARE and not any(scope.names_part(r) for r in lines):
        notes.append(f"{who} said hardware but no line of its evidence names the failing part: unknown, escalate")
        category, action = Category.UNKNOWN, Action.ESCALATE
    if action not in ALLOWED[category]:
        notes.append(f"policy: {action.value} is not allowed for {category.value}: escalate")
        action = Action.ESCALATE
    kept = [n for n in wanted if n in scope.nodes]
    if action in NODE_ACTIONS:
        tied = [n for n in kept if any(scope.ties(r, n, category) for r in lines)]
        if len(tied) < len(kept):
            loose = [n for n in kept if n not in tied]
            notes.append(f"{who} culprit {', '.join(loose[:4])} dropped: no line of its evidence shows the fault there")
        if len(tied) > MAX_NODES_REMOVED:
            notes.append(f"policy: {action.value} of {len(tied)} nodes needs a human: escalate")
            action = Action.ESCALATE
        kept = tied
        if not kept:
            notes.append(f"{action.value} names no node of this job: the controller escalates it")
    return Policed(category, action, kept, notes, (category, action) != start)


def with_own_rule(scope: JobScope, rule: Diagnosis) -> JobScope:
    """The scope with the rule verdict's own match recorded: a line its rule matched (so a hardware
    rule's line names the part even when no pattern of `HARDWARE_PART` does)."""
    if rule.decided_by != DecidedBy.RULE or not rule.rule or not rule.first_failure:
        return scope
    key = (rule.first_failure.source, rule.first_failure.line)
    own = RuleRef(rule.rule, rule.category, scope.priorities.get(rule.rule, 100))
    return JobScope(scope.nodes, scope.ranks, scope.rank_nodes,
                    {**scope.line_rules, key: (*scope.line_rules.get(key, ()), own)}, scope.priorities,
                    scope.node_ips)


def lines_of(d: Diagnosis, records: Mapping[tuple[str, int], LogRecord]) -> list[LogRecord]:
    """The records behind a verdict's evidence (a bare record when none is at hand)."""
    return [records.get((e.source, e.line)) or LogRecord(source=e.source, line=e.line, text=e.text)
            for e in d.evidence]


def policed(rule: Diagnosis, lines: list[LogRecord], scope: JobScope) -> Diagnosis:
    """A rules + retrieval verdict under the same table as a model's answer (unchanged when it passes)."""
    p = police(rule.decided_by.value, rule.category, rule.action, rule.culprit.nodes, lines, scope)
    if (p.category, p.action, p.nodes) == (rule.category, rule.action, list(rule.culprit.nodes)):
        return rule
    culprit = rule.culprit if p.nodes == list(rule.culprit.nodes) else Culprit(
        nodes=p.nodes, ranks=rule.culprit.ranks, gpus=rule.culprit.gpus if p.nodes else [])
    return rule.model_copy(update={"category": p.category, "action": p.action, "culprit": culprit,
                                   "notes": [*rule.notes, *p.notes]})
