"""Confirm multi-pattern hits with the runbooks' Python regexes and extract their fields.

The engine sees every signature of every runbook plus a few context patterns (NCCL topology,
srun task exits, generic error words); this module knows which pattern belongs to what.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from diagnoser.collect import nccl, slurm
from diagnoser.collect.prefixes import body_of, split_prefix
from diagnoser.collect.scanner import Event
from diagnoser.collect.text import visible_segments
from diagnoser.models import LogRecord, SignatureMatch
from diagnoser.prefilter.runbooks import Runbook

# Lightning (lightning_fabric/utilities/distributed.py, pytorch_lightning 1.x strategies/ddp.py) as each process
# joins: "Initializing distributed: GLOBAL_RANK: 3, MEMBER: 4/8" ("initializing ddp: ..." before 1.6)
RANK_CLAIM_ANCHOR = r"(?i)initializing (?:ddp|distributed): GLOBAL_RANK: \d+, MEMBER: \d+/\d+"
_RANK_CLAIM = re.compile(r"(?i)initializing (?:ddp|distributed): "
                         r"GLOBAL_RANK: (?P<rank>\d+), MEMBER: \d+/(?P<world>\d+)")

# Lines that are not failures but say where ranks ran, or that something went wrong at all.
CONTEXT_PATTERNS = {
    "nccl_init": nccl.INIT_ANCHOR,
    "nccl_oob": nccl.OOB_ANCHOR,
    "srun_task_exit": slurm.TASK_EXIT_ANCHOR,
    "nccl_net": nccl.NET_ANCHOR,
    "rank_claim": RANK_CLAIM_ANCHOR,
    # lines that say something went wrong at all: the evidence of a verdict no signature decided, and
    # what the vocabulary fallback compares (retrieve/vocabulary.py)
    "weak_error": r"(?i)\b(error|fatal|fail(ed|ure)?|exception|abort(ed)?|killed|segmentation fault|core dumped"
                  r"|timed out|timeout|denied|refused|unreachable|cannot|unable to|invalid|mismatch|overflow"
                  r"|exceeded|expired|preempted|evicted|unavailable|not ready|not found|nan)\b",
}


_WEAK = re.compile(CONTEXT_PATTERNS["weak_error"])


@dataclass(frozen=True)
class PatternTable:
    """All patterns the engine compiles, and what each index means."""

    patterns: list[str]
    owner: list[tuple[str, int]]  # ("runbook", runbook index) or ("context", name index)
    context_names: list[str]

    @classmethod
    def build(cls, runbooks: list[Runbook]) -> PatternTable:
        patterns: list[str] = []
        owner: list[tuple[str, int]] = []
        for i, book in enumerate(runbooks):
            for sig in book.signatures:
                patterns.append(sig)
                owner.append(("runbook", i))
        names = list(CONTEXT_PATTERNS)
        for j, name in enumerate(names):
            patterns.append(CONTEXT_PATTERNS[name])
            owner.append(("context", j))
        return cls(patterns, owner, names)


@dataclass(frozen=True, slots=True)
class JobFact:
    """What one process said about itself that must agree across the job (prefilter/consistency.py):
    its network choice (`kind` "plugin" / "network", see nccl.NetChoice), or the global rank it took
    ("rank": `value` the rank, `detail` the world size). `host` is the line's node, else its file's;
    `process` tells two processes apart when the line names no node (the launcher's task label)."""

    kind: str
    value: str
    detail: str
    host: str | None
    process: str
    record: LogRecord


def fact_key(fact: JobFact) -> tuple:
    """What makes a fact new: a node's network choice once per node, a rank claim once per process."""
    if fact.kind == "rank":
        return (fact.kind, fact.value, fact.detail, fact.process)
    return (fact.kind, fact.value, fact.host)


@dataclass
class Topology:
    """Where ranks ran: from NCCL init lines and srun task exits; and what each process chose (`facts`)."""

    placements: dict[int, nccl.RankPlacement] = field(default_factory=dict)
    node_ips: dict[str, str] = field(default_factory=dict)  # ip -> node
    task_nodes: dict[int, str] = field(default_factory=dict)  # rank -> node (srun)
    task_exits: list[tuple[Event, slurm.TaskExit]] = field(default_factory=list)
    facts: list[JobFact] = field(default_factory=list)

    def node_of_rank(self, rank: int) -> str | None:
        if rank in self.placements:
            return self.placements[rank].node
        return self.task_nodes.get(rank)

    def rank_of_gpu(self, node: str | None, bus_id: str) -> int | None:
        for p in self.placements.values():
            if p.bus_id == bus_id and (node is None or p.node == node):
                return p.rank
        return None

    def rank_of_pid(self, node: str | None, pid: int) -> int | None:
        for p in self.placements.values():
            if p.pid == pid and (node is None or p.node == node):
                return p.rank
        return None

    def rank_of_device(self, node: str, device: int) -> int | None:
        for p in self.placements.values():
            if p.node == node and p.device == device:
                return p.rank
        return None


def _extract(book: Runbook, text: str) -> dict[str, str] | None:
    """Named groups of the first signature that matches any visible segment of the line."""
    for segment in visible_segments(text):
        body = body_of(segment)
        for regex in book.compiled:
            m = regex.search(body) or regex.search(segment)
            if m:
                fields = {k: v.strip() for k, v in m.groupdict().items() if v}
                for extractor in book.compiled_extractors:
                    em = extractor.search(segment)
                    if em:
                        fields.update({k: v.strip() for k, v in em.groupdict().items() if v})
                return fields
    return None


def _job_fact(record: LogRecord) -> JobFact | None:
    prefix = split_prefix(record.text)
    process = f"{record.source}|{prefix.rank}|{prefix.local_rank}|{prefix.node}"
    choice = nccl.parse_net_choice(prefix.rest)
    if choice is not None:
        line = nccl.parse_line(prefix.rest) or nccl.parse_line(record.text)
        host = line.host if line else (prefix.node or record.node)
        return JobFact(choice.kind, choice.value, choice.detail, host, process, record)
    m = _RANK_CLAIM.search(prefix.rest)
    if m is None:
        return None
    return JobFact("rank", m.group("rank"), m.group("world"), prefix.node or record.node, process, record)


def confirm(events: list[Event], table: PatternTable, runbooks: list[Runbook],
            ) -> tuple[list[SignatureMatch], Topology, list[Event]]:
    """Matches, topology, and events that only hit the weak error pattern."""
    matches: list[SignatureMatch] = []
    topo = Topology()
    weak: list[Event] = []
    seen_facts: set[tuple] = set()
    for event in events:
        books = sorted({table.owner[p][1] for p in event.patterns if table.owner[p][0] == "runbook"})
        contexts = {table.context_names[table.owner[p][1]] for p in event.patterns if table.owner[p][0] == "context"}
        text = event.record.text
        confirmed = False
        for b in books:
            book = runbooks[b]
            fields = _extract(book, text)
            if fields is None:
                continue
            confirmed = True
            matches.append(SignatureMatch(runbook_id=book.id, record=event.record, role=book.role,
                                          priority=book.priority, fields=fields))
        if "nccl_init" in contexts:
            placement = nccl.parse_init(split_prefix(text).rest)
            if placement:
                topo.placements[placement.rank] = placement
        if "nccl_oob" in contexts:
            host_ip = nccl.parse_oob_ip(split_prefix(text).rest)
            if host_ip:
                topo.node_ips[host_ip[1]] = host_ip[0]
        if "srun_task_exit" in contexts:
            exit_ = slurm.parse_task_exit(text)
            if exit_:
                for r in exit_.ranks:
                    topo.task_nodes.setdefault(r, exit_.node)
                topo.task_exits.append((event, exit_))
        if "nccl_net" in contexts or "rank_claim" in contexts:
            fact = _job_fact(event.record)
            if fact is not None and fact_key(fact) not in seen_facts:
                seen_facts.add(fact_key(fact))
                topo.facts.append(fact)
        if "weak_error" in contexts and not confirmed and _WEAK.search(text):
            weak.append(event)
    return matches, topo, weak
