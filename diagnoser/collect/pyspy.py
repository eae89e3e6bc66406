"""py-spy dumps (`py-spy dump --pid P > stacks/rank3.txt`): the Python stack of each rank's threads.

```
Process 4242: python train.py
Python v3.11.7 (/usr/bin/python3.11)

Thread 4242 (active): "MainThread"
    all_reduce (torch/distributed/distributed_c10d.py:2050)
    train_step (train.py:120)
```
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_THREAD = re.compile(r'^Thread (?:0x)?[0-9a-fA-F]+ \((?P<state>[\w ]+)\)(?:: "(?P<name>[^"]*)")?')
_FRAME = re.compile(r"^\s+(?P<fn>\S+) \((?P<file>[^:()]+):(?P<line>\d+)\)")
MAX_DUMP_BYTES = 2 << 20
NAME_HINT = re.compile(r"py-?spy|stack|dump", re.I)


@dataclass(frozen=True)
class Stack:
    """The main thread's frames, innermost first, as `function (file)`; line numbers dropped so that
    ranks in the same place group together."""

    frames: tuple[str, ...]
    first_line: int  # 1-based line of the thread header in the dump


def looks_like_dump(head: str) -> bool:
    return head.startswith("Process ") and "\nPython v" in head[:500]


def main_stack(text: str) -> Stack | None:
    frames: list[str] = []
    start = 0
    in_main = False
    for no, line in enumerate(text.splitlines(), start=1):
        t = _THREAD.match(line)
        if t:
            if in_main:
                break
            in_main = (t.group("name") or "") == "MainThread" or not frames and start == 0
            start = no if in_main else start
            continue
        f = _FRAME.match(line)
        if in_main and f:
            frames.append(f"{f.group('fn')} ({f.group('file').rsplit('/', 1)[-1]})")
    return Stack(tuple(frames), start) if frames else None
