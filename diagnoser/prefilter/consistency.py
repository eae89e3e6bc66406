"""What every process of a job must agree on, compared across the job's processes.

Some failures show in no single line, only in two lines that disagree:

- **The network, per node.** NCCL's processes connect with the network each one chose at init: a net plugin
  (`NET/Plugin: Loaded net plugin ...`, HPC-X's `Plugin Path : .../libnccl-net.so`) or NCCL's internal
  transports (`NET/Plugin: Could not find: libnccl-net.so. Using internal network plugin.`), then `Using
  network <name>`. A plugin installed on part of a cluster, or a node whose image differs, makes nodes
  choose differently and the job hangs at its first inter-node collective or fails in the bootstrap
  exchange: one node's software, which an operator makes uniform. The odd node is the one that chose
  differently from the rest; with two nodes, the one that fell back (no plugin, plain sockets).
- **The global rank, per process.** Lightning logs `Initializing distributed: GLOBAL_RANK: r, MEMBER: r+1/W`
  as each process joins. Two processes taking the same rank while other ranks never appear is the launch
  set-up (Slurm's `--ntasks-per-node` not matching the Trainer's devices, or each node numbering its ranks
  from 0): the world never forms, and a restart forms it the same way.

Each verdict is a catalog entry with `given_by` (category, action, runbook): a site runbook of the same id
changes the decision, and a rule set without the entry (a held-out evaluation) has no check. A verdict
decided by something stronger (a hardware fault, a higher-priority rule) stands: the disagreement may be a
consequence or a bystander.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass

from diagnoser.models import Category, Culprit, DecidedBy, Diagnosis, FirstFailure, Role
from diagnoser.prefilter.matching import JobFact, Topology
from diagnoser.prefilter.runbooks import Runbook
from diagnoser.prefilter.verdict import evidence_led_by, scoped

NET_ENTRY = "nccl.network-choice-differs-across-nodes"
RANK_ENTRY = "trainlib.global-rank-taken-by-two-processes"
FALLBACKS = {"plugin": "internal", "network": "Socket"}  # what a node without the intended install chose
MAX_EVIDENCE = 6


@dataclass(frozen=True)
class Disagreement:
    entry: str
    root_cause: str
    nodes: list[str]
    facts: list[JobFact]  # the lines that show it, the odd ones first


def _host_values(facts: list[JobFact], kind: str) -> dict[str, JobFact]:
    """Each host's one choice of `kind` (facts come once per host and choice, matching.fact_key); a plugin that
    loaded after a failed attempt counts as loaded (the loader tries several names), a host that otherwise said
    two different things is left out."""
    said: dict[str, dict[str, JobFact]] = defaultdict(dict)
    for f in facts:
        if f.kind == kind and f.host:
            said[f.host].setdefault(f.value, f)
    out = {}
    for host, choices in said.items():
        if kind == "plugin" and "loaded" in choices:
            choices = {"loaded": choices["loaded"]}
        if len(choices) == 1:
            out[host] = next(iter(choices.values()))
    return out


def _said(value: str, n: int) -> str:
    named = "NCCL's internal one" if value == "internal" else "a plugin" if value == "loaded" else value
    return f"{named} on {n} node{'s' if n > 1 else ''}"


def network_disagreement(facts: list[JobFact]) -> Disagreement | None:
    """Nodes that chose a different network plugin or transport than the others."""
    for kind in ("plugin", "network"):
        hosts = _host_values(facts, kind)
        counts = Counter(f.value for f in hosts.values())
        if len(hosts) < 2 or len(counts) < 2:
            continue
        (common, n_common), (_, n_next) = counts.most_common(2)
        if n_common > n_next:  # the odd ones are those off the majority
            odd = sorted(h for h, f in hosts.items() if f.value != common)
        else:  # a tie: the nodes that fell back are the ones missing the install
            odd = sorted(h for h, f in hosts.items() if f.value == FALLBACKS[kind])
        if len(odd) > max(1, len(hosts) // 4):
            odd = []  # not a few odd nodes but a split cluster: name none
        shown = [hosts[h] for h in odd] + [f for h, f in sorted(hosts.items()) if h not in odd]
        what = "net plugin" if kind == "plugin" else "network transport"
        choices = ", ".join(_said(v, n) for v, n in counts.most_common())
        where = f"; {', '.join(odd)} chose differently from the rest" if odd else ""
        return Disagreement(NET_ENTRY, f"The job's nodes disagree on NCCL's {what} ({choices}){where}: "
                            "nodes that chose different networks cannot connect", odd, shown)
    return None


def rank_collision(facts: list[JobFact]) -> Disagreement | None:
    """A global rank taken by two processes while the world is missing ranks."""
    claims: dict[tuple[int, int], dict[str, JobFact]] = defaultdict(dict)
    for f in facts:
        if f.kind == "rank":
            claims[(int(f.value), int(f.detail))].setdefault(f.process, f)
    for world in sorted({w for _, w in claims}):
        taken = {r for r, w in claims if w == world}
        twice = sorted(r for r in taken if len(claims[(r, world)]) > 1)
        if twice and len(taken) < world:
            shown = [f for r in twice for f in claims[(r, world)].values()]
            missing = world - len(taken)
            return Disagreement(RANK_ENTRY, (
                f"Global rank(s) {', '.join(map(str, twice[:8]))} of a world of {world} were each taken by "
                f"{max(len(claims[(r, world)]) for r in twice)} processes while {missing} rank(s) never joined: "
                "the launch started or numbered the processes wrongly (tasks per node vs devices)"), [], shown)
    return None


def _stands(verdict: Diagnosis, entry: Runbook, books: dict[str, Runbook]) -> bool:
    """A hardware verdict (a rule's, a GPU's recurring fault, a failing DIMM) and one decided by a
    higher-priority rule keep their place."""
    if verdict.category == Category.HARDWARE:
        return True
    if verdict.decided_by != DecidedBy.RULE or not verdict.rule:
        return False
    decided = books.get(verdict.rule)
    return decided is not None and decided.role == Role.ROOT and decided.priority >= entry.priority


def with_job_consistency(verdict: Diagnosis, topology: Topology, books: dict[str, Runbook]) -> Diagnosis:
    """The verdict, or the disagreement's verdict when the job's processes disagree on what must agree."""
    for check in (network_disagreement, rank_collision):
        found = check(topology.facts)
        entry = books.get(found.entry) if found else None
        if found is None or entry is None or _stands(verdict, entry, books):
            continue
        first = found.facts[0].record
        was = verdict.rule or verdict.subtype
        return verdict.model_copy(update={
            "category": entry.category, "subtype": entry.subtype, "action": entry.action,
            "confidence": entry.confidence, "decided_by": DecidedBy.RULE,
            "culprit": scoped(Culprit(nodes=found.nodes), entry.culprit_scope),
            "root_cause": found.root_cause,
            "evidence": evidence_led_by([f.record for f in found.facts], verdict, lead=MAX_EVIDENCE, kept=4),
            "first_failure": FirstFailure(source=first.source, line=first.line),
            "rule": entry.id, "runbook": entry.path or verdict.runbook,
            "notes": [*verdict.notes, f"decided by comparing the job's processes ({entry.given_by}); was {was}"],
        })
    return verdict
