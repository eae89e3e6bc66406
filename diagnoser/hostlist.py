"""Node lists as Slurm writes them: `gpu[001-200],login1`, not 200 names (the inverse of
`slurm.records.expand_hostlist`)."""

from __future__ import annotations

import re
from collections.abc import Iterable

_NAME = re.compile(r"\A(.*?)(\d+)(\D*)\Z")


def compress_hostlist(nodes: Iterable[str]) -> str:
    """`['gpu001', 'gpu002', 'gpu003', 'gpu007', 'login1']` -> `gpu[001-003,007],login1` (unique, sorted).

    The last run of digits in a name is the index. Zero-padded indexes keep their width (a range is padded
    to the width of its start, as Slurm expands it); names without digits are kept as they are."""
    groups: dict[tuple[str, str, int], set[int]] = {}
    plain: set[str] = set()
    unpadded: list[tuple[str, str, str]] = []
    for node in dict.fromkeys(n.strip() for n in nodes if n and n.strip()):
        m = _NAME.match(node)
        if not m:
            plain.add(node)
            continue
        prefix, digits, suffix = m.groups()
        if len(digits) > 1 and digits.startswith("0"):
            groups.setdefault((prefix, suffix, len(digits)), set()).add(int(digits))
        else:
            unpadded.append((prefix, digits, suffix))
    for prefix, digits, suffix in unpadded:  # 100 fits a width-3 padded group; else the group of unpadded ones
        key = (prefix, suffix, len(digits)) if (prefix, suffix, len(digits)) in groups else (prefix, suffix, 0)
        groups.setdefault(key, set()).add(int(digits))
    parts = [(_natural(p), p) for p in plain]
    for (prefix, suffix, width), numbers in groups.items():
        runs = _runs(sorted(numbers))
        if len(runs) == 1 and runs[0][0] == runs[0][1]:
            text = f"{prefix}{runs[0][0]:0{width}d}{suffix}"
        else:
            inner = ",".join(f"{a:0{width}d}" if a == b else f"{a:0{width}d}-{b:0{width}d}" for a, b in runs)
            text = f"{prefix}[{inner}]{suffix}"
        parts.append((_natural(f"{prefix}{min(numbers):0{width}d}{suffix}"), text))
    return ",".join(text for _, text in sorted(parts))


def _runs(numbers: list[int]) -> list[tuple[int, int]]:
    runs: list[tuple[int, int]] = []
    for n in numbers:
        if runs and n == runs[-1][1] + 1:
            runs[-1] = (runs[-1][0], n)
        else:
            runs.append((n, n))
    return runs


def _natural(name: str) -> list:
    return [(0, int(t), "") if t.isdigit() else (1, 0, t) for t in re.split(r"(\d+)", name)]
