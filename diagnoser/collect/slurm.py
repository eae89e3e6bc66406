"""Slurm's own lines in job output: srun task exits and slurmstepd cancellations.

Under srun every rank may report `host: localhost`; only srun's lines say which node a task ran on.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_TASK_EXIT = re.compile(
    r"srun: error: (?P<node>[A-Za-z0-9][A-Za-z0-9._-]*): tasks? (?P<first>\d+)(?:-(?P<last>\d+))?: "
    r"(?P<what>Exited with exit code (?P<code>\d+)|Killed|Terminated|.+)"
)
_STEPD = re.compile(r"\*\*\* (?:JOB|STEP) (?P<job>[\d.]+(?:\.\w+)?) ON (?P<node>\S+) CANCELLED AT (?P<time>\S+)")

TASK_EXIT_ANCHOR = r"srun: error: [A-Za-z0-9._-]+: tasks? \d+"


@dataclass(frozen=True, slots=True)
class TaskExit:
    node: str
    ranks: tuple[int, ...]
    exit_code: int | None
    text: str


def parse_task_exit(text: str) -> TaskExit | None:
    m = _TASK_EXIT.search(text)
    if not m:
        return None
    first = int(m.group("first"))
    last = int(m.group("last") or first)
    ranks = tuple(range(first, min(last, first + 4096) + 1))
    code = int(m.group("code")) if m.group("code") else None
    return TaskExit(m.group("node"), ranks, code, m.group("what"))


def parse_stepd_node(text: str) -> str | None:
    """The node named by a slurmstepd `*** JOB n ON node CANCELLED AT ...` line."""
    m = _STEPD.search(text)
    return m.group("node") if m else None
