"""Rank prefixes that launchers put in front of every line of a rank's output.

- torchrun `--tee`/`--log-dir` and `TORCH_DISTRIBUTED` logs: `[rank3]:` (global rank)
- torchrun `--role`: `[default3]:` (role name + LOCAL rank)
- `srun --label`: `3: ` (global task id, right-aligned)
- some wrappers: `[stderr]` / `[stdout]` (no rank)
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_TORCH_RANK = re.compile(r"^\[rank(\d{1,6})\]:\s?")
_TORCH_ROLE = re.compile(r"^\[(?:default|worker|trainer)(\d{1,4})\]:\s?")
_SRUN_LABEL = re.compile(r"^ {0,6}(\d{1,6}): ")
_STREAM = re.compile(r"^\[std(?:err|out)\]\s?")


@dataclass(frozen=True, slots=True)
class Prefix:
    rank: int | None
    local_rank: int | None
    rest: str  # the line without its prefix


def split_prefix(line: str) -> Prefix:
    """Remove a launcher prefix, returning the rank it names."""
    m = _TORCH_RANK.match(line)
    if m:
        return Prefix(int(m.group(1)), None, line[m.end():])
    m = _TORCH_ROLE.match(line)
    if m:
        return Prefix(None, int(m.group(1)), line[m.end():])
    m = _SRUN_LABEL.match(line)
    if m:
        return Prefix(int(m.group(1)), None, line[m.end():])
    m = _STREAM.match(line)
    if m:
        return Prefix(None, None, line[m.end():])
    return Prefix(None, None, line)

