"""torchrun / torch.distributed.elastic output: the ChildFailedError summary block.

```
Failures:
[1]:
  time      : 2025-03-04_05:06:09
  host      : gpu-017
  rank      : 5 (local_rank: 1)
  exitcode  : -9 (pid: 12345)
  error_file: <N/A>
  traceback : Signal 9 (SIGKILL) received by PID 12345
```
A line inside such a block says little alone; its block names the host, rank and time.
Note: the block's "Root Cause (first observed failure)" is often wrong (DESIGN.md), so the block
is used only to place a line, never to choose the root cause.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_FIELD = re.compile(r"^\s*(time|host|rank|exitcode|traceback)\s*:\s*(.*)$")
_RANK = re.compile(r"^(\d+)(?: \(local_rank: (\d+)\))?")


@dataclass(frozen=True, slots=True)
class BlockFields:
    host: str | None = None
    rank: int | None = None
    local_rank: int | None = None
    time: str | None = None


def block_fields(lines: list[str]) -> BlockFields:
    """Read the `key : value` fields of the failure entry that `lines` (a window) belongs to."""
    values: dict[str, str] = {}
    for line in lines:
        m = _FIELD.match(line)
        if m and m.group(1) not in values:
            values[m.group(1)] = m.group(2).strip()
    rank = local = None
    if "rank" in values:
        m = _RANK.match(values["rank"])
        if m:
            rank = int(m.group(1))
            local = int(m.group(2)) if m.group(2) else None
    host = values.get("host")
    return BlockFields(host=host or None, rank=rank, local_rank=local, time=values.get("time"))


def is_block_line(line: str) -> bool:
    return bool(_FIELD.match(line))
