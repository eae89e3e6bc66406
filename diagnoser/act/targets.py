"""Which nodes an action may touch: exact nodes of this job, counted after hostlist expansion.

A culprit comes from log text, and log text is written by whoever can write to the job's output.
So before any drain or exclusion:

- every name is expanded as a Slurm hostlist (`gpu-[001-100],gpu-200` is 101 nodes, not one) and
  counted expanded: caps compare node counts, never strings;
- only nodes of this job (the scheduler's job record, or the launcher's own host) are kept; a
  name from the logs that is not one of them is reported and never acted on;
- `check_targets` repeats both checks right before the executor acts (exclusions and drains
  alike), so a decision restored from a damaged audit log cannot widen an action either.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from diagnoser.slurm.records import expand_hostlist

MAX_EXPANDED = 100_000  # a hostlist larger than this is not a culprit, it is an attack or a bug


@dataclass(frozen=True)
class Targets:
    """Culprit names split into nodes of this job and names that are not."""

    nodes: tuple[str, ...]
    outside: tuple[str, ...] = ()

    def describe_outside(self, limit: int = 5) -> str:
        shown = ", ".join(self.outside[:limit])
        more = f" and {len(self.outside) - limit} more" if len(self.outside) > limit else ""
        return f"{shown}{more}"


def expand_nodes(names: Iterable[str]) -> list[str]:
    """Each name expanded as a hostlist, in order, without duplicates."""
    out: dict[str, None] = {}
    for name in names:
        for node in expand_hostlist(str(name)):
            out.setdefault(node.strip(), None)
            if len(out) > MAX_EXPANDED:
                return list(out)
    return [n for n in out if n]


def job_targets(culprits: Iterable[str], job_nodes: Iterable[str] | None) -> Targets:
    """The culprit nodes this job may act on. `job_nodes` None: the job's nodes are unknown to the
    caller (pure policy tests); the names are still expanded and counted."""
    named = expand_nodes(culprits)
    if job_nodes is None:
        return Targets(tuple(named))
    own = set(expand_nodes(job_nodes))
    return Targets(tuple(n for n in named if n in own), tuple(n for n in named if n not in own))


def check_targets(nodes: Iterable[str], job_nodes: Iterable[str] | None, cap: int | None,
                  verb: str = "exclude") -> str | None:
    """Why an action on `nodes` must not run (None: it may). Membership, then the expanded count."""
    t = job_targets(nodes, job_nodes)
    if t.outside:
        return f"refused to {verb} {t.describe_outside()}: not node(s) of this job"
    if not t.nodes:
        return f"refused to {verb}: no node named"
    if cap is not None and len(t.nodes) > cap:
        return f"refused to {verb} {len(t.nodes)} node(s): more than the cap of {cap}"
    return None
